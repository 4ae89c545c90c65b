"""Write the bundled sample data set (data/customers_sample.parquet) from a known true model.

The true model is printed and saved beside the data (``*.truth.json``) so a fit can be compared
with it. Deterministic: the same seed writes the same file.

Both files are written whole or not at all, and an existing file is replaced only when this job
wrote it (a Parquet file of the sample's columns, marked ``mixle_spark.sample`` in its metadata; a
model file beside it): ``--output thesis.txt`` is refused in one line, never overwritten, nor a
file reached through a symbolic link.
"""

from __future__ import annotations

import argparse
from pathlib import PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from mixle_spark._outputs import check_file, write_file
from mixle_spark.cli._common import run_job
from mixle_spark.spec import is_model_file, save_model
from mixle_spark.stats import (
    CategoricalDistribution,
    LogGaussianDistribution,
    MixtureDistribution,
    PoissonDistribution,
    RecordDistribution,
    SequenceDistribution,
)


def true_model() -> MixtureDistribution:
    """Three customer segments: occasional web shoppers, store regulars, and big app spenders."""

    def segment(mu: float, s2: float, channels: dict, items: float, tags: dict, n_tags: float):
        return RecordDistribution(
            {
                "amount": LogGaussianDistribution(mu, s2),
                "channel": CategoricalDistribution(channels),
                "n_items": PoissonDistribution(items),
                "tags": SequenceDistribution(CategoricalDistribution(tags), PoissonDistribution(n_tags)),
            }
        )

    return MixtureDistribution(
        [
            segment(
                2.5,
                0.30,
                {"web": 0.7, "store": 0.2, "app": 0.1},
                1.5,
                {"books": 0.5, "music": 0.3, "garden": 0.2},
                1.0,
            ),
            segment(
                3.5,
                0.20,
                {"web": 0.1, "store": 0.8, "app": 0.1},
                4.0,
                {"food": 0.6, "garden": 0.3, "books": 0.1},
                2.5,
            ),
            segment(
                5.0,
                0.50,
                {"web": 0.2, "store": 0.1, "app": 0.7},
                8.0,
                {"electronics": 0.6, "music": 0.2, "sports": 0.2},
                4.0,
            ),
        ],
        [0.5, 0.3, 0.2],
    )


PROG = "make_sample_data"
SCHEMA = pa.schema(
    [
        ("amount", pa.float64()),
        ("channel", pa.string()),
        ("n_items", pa.int64()),
        ("tags", pa.list_(pa.string())),
    ]
)
MARKER = b"mixle_spark.sample"


_LIMIT = 1 << 26  # 64 MiB: what is read of an existing output to tell whether it is this job's


def _written_here(data: bytes) -> bool:
    """Whether Parquet bytes ``data`` are this job's: marked, or (written before the mark) of exactly
    the sample's columns."""
    try:
        schema = pq.read_schema(pa.BufferReader(data))
    except (OSError, pa.ArrowInvalid):
        return False
    return MARKER in (schema.metadata or {}) or schema.remove_metadata().equals(SCHEMA)


def write_sample(output: str, rows: int, seed: int) -> str:
    """Draw ``rows`` rows from the true model and write them (and the model) beside ``output`` (a
    local path or a URI); both places are checked before anything is drawn."""
    folder, slash, name = output.rpartition("/")
    truth = folder + slash + PurePosixPath(name).with_suffix(".truth.json").name
    claim = "is not a sample data file written by make_sample_data"
    check_file(output, what="--output", ours=_written_here, claim=claim, read_bytes=_LIMIT)
    check_file(
        truth, what="the true model's file", ours=is_model_file, claim="is not a mixle_spark model file"
    )
    model = true_model()
    table = pa.Table.from_pylist(model.sampler(seed).sample(rows), schema=SCHEMA)
    table = table.replace_schema_metadata({MARKER: b"1"})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    write_file(output, sink.getvalue().to_pybytes(), what="--output", ours=_written_here, read_bytes=_LIMIT)
    save_model(model, truth, overwrite=True)
    return f"wrote {table.num_rows} rows to {output} (true model in {truth})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument("--output", default="data/customers_sample.parquet")
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    return run_job(PROG, lambda: print(write_sample(args.output, args.rows, args.seed)))


if __name__ == "__main__":
    raise SystemExit(main())
