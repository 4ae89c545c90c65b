"""Fit a model spec to a table by EM; write the fitted model and a run summary.

    python jobs/em_fit.py                      # the bundled sample, see below
    python jobs/em_fit.py --input TABLE --model conf/models/sample.json --output DIR [options]
    spark-submit --packages io.delta:delta-spark_2.13:4.0.1 jobs/em_fit.py --input ... (same options)
    mpiexec -n 4 python jobs/em_fit.py --backend mpi --input PATH --model SPEC --output DIR

The job is :mod:`mixle_spark.cli.fit` (its docstring and ``--help`` list every option; ``python -m
mixle_spark.cli.fit`` runs it from an installed package). This script adds the bundled sample: with
no arguments, ``data/customers_sample.parquet`` is fitted with ``conf/models/sample.json`` on
``local[*]`` (read as the Parquet file it is, by a Spark session without Delta: nothing to resolve at
start-up); the result replaces ``output/sample_fit/`` (``$MIXLE_SPARK_OUTPUT`` moves ``output/``).
``--sample-delta`` (``make demo-delta``) copies the sample once into the local Delta table
``output/customers_sample_delta`` and fits that instead, the round trip a Delta input takes. Options
(``--output``, ``--master``, ``--backend local``, ``--max-its``, ...) still apply; ``--input`` and
``--model`` go together.

``--update-from DIR --input NEW --output OUT`` folds new rows into the model an earlier run wrote to
DIR, without its training rows (:mod:`mixle_spark.cli.update`).

Exit codes: 0 success; 2 bad arguments or bad input; 3 new rows that drifted past ``--max-drop`` with
``--on-drift fail`` (``--update-from``; nothing written); 1 any other failure. A failure prints one
line on stderr (``MIXLE_SPARK_TRACEBACK=1`` adds the traceback).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mixle_spark.cli.fit import PROG, Sample
from mixle_spark.cli.fit import main as fit_main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DATA = ROOT / "data" / "customers_sample.parquet"
SAMPLE_SPEC = ROOT / "conf" / "models" / "sample.json"
OUTPUT_ROOT = Path(os.environ.get("MIXLE_SPARK_OUTPUT") or ROOT / "output")
SAMPLE_TABLE = OUTPUT_ROOT / "customers_sample_delta"
SAMPLE_OUTPUT = OUTPUT_ROOT / "sample_fit"


def sample_table(spark: Any) -> str:
    """The bundled sample as a local Delta table, written on first use (idempotent)."""
    from mixle_spark.io import read_table, write_table

    if not (SAMPLE_TABLE / "_delta_log").is_dir():
        print(f"{PROG}: writing the bundled sample to the Delta table {SAMPLE_TABLE}", file=sys.stderr)
        write_table(read_table(spark, str(SAMPLE_DATA)), SAMPLE_TABLE, mode="overwrite")
    return str(SAMPLE_TABLE)


def main(argv: list[str] | None = None) -> int:
    """Entry point: the fit job with the bundled sample as its default input."""
    return fit_main(argv, Sample(SAMPLE_DATA, SAMPLE_SPEC, SAMPLE_OUTPUT, sample_table))


if __name__ == "__main__":
    raise SystemExit(main())
