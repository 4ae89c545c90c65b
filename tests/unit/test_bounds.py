"""Bounded inputs: what would exhaust memory or the stack is refused first, in one line naming the value
and the bound; a model with more free parameters than rows is fitted with a warning."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mixle_spark import spec as spec_module
from mixle_spark.errors import ConvergenceWarning, ModelFormatError, ModelSizeWarning, TooLargeError
from mixle_spark.estimation import best_of, optimize
from mixle_spark.model_selection import select_k
from mixle_spark.parallel.backends import local as local_backend
from mixle_spark.spec import (
    MAX_COMPONENTS,
    MAX_NESTING,
    estimator_from_spec,
    load_model,
    load_spec,
    model_from_json,
    model_to_json,
)
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    MixtureEstimator,
    RecordEstimator,
)

ROOT = Path(__file__).resolve().parents[2]
DEEP = 1000
DEEP_SPEC = '{"type": "optional", "estimator": ' * DEEP + '"gaussian"' + "}" * DEEP
DEEP_MODEL = '{"format": "mixle_spark.model", "format_version": 1, "model": ' + DEEP_SPEC + "}"
TOO_DEEP = f"nests objects and arrays more than {MAX_NESTING} deep; the limit is {MAX_NESTING}"


def _job(prog: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The job on the local backend (em_fit), or failing before it starts Spark (em_score)."""
    args = ("--backend", "local", *args) if prog == "em_fit" else args
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / f"{prog}.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def _only_error_line(proc: subprocess.CompletedProcess[str], prog: str) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{prog}: error: ")
    return lines[0][len(f"{prog}: error: ") :]


def test_a_huge_k_is_refused_before_anything_is_built() -> None:
    started = time.perf_counter()
    with pytest.raises(
        TooLargeError, match=r"^mixture spec: k = 1,000,000,000 is more than the 100,000 components"
    ):
        estimator_from_spec({"type": "mixture", "k": 10**9, "component": "gaussian"})
    with pytest.raises(TooLargeError, match=r"^hidden_markov spec: k = 100,001 is more than the 100,000"):
        estimator_from_spec({"type": "hidden_markov", "k": MAX_COMPONENTS + 1, "emission": "categorical"})
    # shorthands inside shorthands multiply: each k is allowed, their product is not
    nested = {
        "type": "mixture",
        "k": 2000,
        "component": {"type": "mixture", "k": 2000, "component": "gaussian"},
    }
    with pytest.raises(TooLargeError, match=r"^the spec expands to 4,002,000 components \(its k shorthands "):
        estimator_from_spec(nested)
    assert time.perf_counter() - started < 1.0


def test_specs_and_models_nested_too_deep_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TooLargeError, match=f"^the spec {TOO_DEEP}$"):
        estimator_from_spec(json.loads(DEEP_SPEC[: 200 * 34] + '"gaussian"' + "}" * 200))
    with pytest.raises(TooLargeError, match=f"^model {TOO_DEEP}$"):
        model_from_json(DEEP_MODEL)  # too deep for the JSON parser itself
    path = tmp_path / "deep.json"
    path.write_text(DEEP_SPEC)
    with pytest.raises(TooLargeError, match=f"^model spec {path} {TOO_DEEP}$"):
        load_spec(path)
    # 150 deep: the parser reads it, the model is refused before it is built
    payload = '{"format": "mixle_spark.model", "format_version": 1, "model": ' + DEEP_SPEC[: 150 * 34]
    with pytest.raises(TooLargeError, match=f"^the model {TOO_DEEP}$"):
        model_from_json(payload + '"gaussian"' + "}" * 151)
    # a real model is far from the bound
    text = model_to_json(GaussianDistribution(1.0, 2.0))
    assert model_from_json(text) == GaussianDistribution(1.0, 2.0)


def test_model_and_spec_files_are_bounded_before_they_are_read(tmp_path: Path) -> None:
    model = tmp_path / "model.json"
    model.write_text(model_to_json(GaussianDistribution(1.0, 2.0)))
    size = model.stat().st_size
    with pytest.raises(TooLargeError, match=rf"^model {model} is {size:,} bytes; the limit is 100 bytes$"):
        load_model(model, max_bytes=100)
    assert load_model(model, max_bytes=size) == GaussianDistribution(1.0, 2.0)
    # a device that never ends is read up to the bound, then refused
    with pytest.raises(TooLargeError, match=r"^model /dev/zero is more than 1,000 bytes; the limit is 1,000"):
        load_model("/dev/zero", max_bytes=1000)
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:  # sparse: 300 MiB on paper, nothing read
        fh.truncate(300 * 2**20)
    with pytest.raises(TooLargeError, match=r"is 314,572,800 bytes; the limit is 268,435,456 bytes$"):
        load_model(big)
    spec = tmp_path / "spec.json"
    with open(spec, "wb") as fh:
        fh.truncate(spec_module.MAX_SPEC_BYTES + 1)
    with pytest.raises(
        TooLargeError, match=rf"^model spec {spec} is 16,777,217 bytes; the limit is 16,777,216"
    ):
        load_spec(spec)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b'{"format": "\x80"}')
    with pytest.raises(ModelFormatError, match=rf"^model {binary} is not UTF-8 text"):
        load_model(binary)


def _mixture_rows(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"x": rng.normal(size=n)})


def test_a_mixture_that_cannot_fit_in_memory_is_refused_before_the_first_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(local_backend, "machine_memory", lambda: 100 * 2**20)  # a 100 MiB worker
    estimator = MixtureEstimator([RecordEstimator({"x": GaussianEstimator()})] * 500)
    refused = (
        r"^MixtureEstimator with 500 components needs about 610 MiB to score a fold of 20,000 rows "
        r"\(64 bytes per row and component\), more than the 100 MiB of memory a worker has; use fewer "
        r"components$"
    )
    data = _mixture_rows(20_000)
    for fit in (
        lambda: optimize(data, estimator, max_its=2),
        lambda: best_of(data, estimator, trials=2, max_its=2),
        lambda: optimize(data, estimator, max_its=2, num_workers=2),  # threaded by ModelParallelEstimator
    ):
        started = time.perf_counter()
        with pytest.raises(TooLargeError, match=refused):
            fit()
        assert time.perf_counter() - started < 10.0  # no pass over the data was made
    # smaller chunks fit: 500 x 2,000 rows x 64 bytes = 61 MiB
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = optimize(data, estimator, max_its=1, chunk_size=2_000)
    assert len(model.components) == 500


def _id_rows(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame({"amount": rng.normal(size=n), "customer": [f"c{i}" for i in range(n)]})


ID_ESTIMATOR = MixtureEstimator(
    [RecordEstimator({"amount": GaussianEstimator(), "customer": CategoricalEstimator()})] * 2
)
OVER = (
    r"^the model has {} free parameters for 300 rows \(field 'customer' has {} of them\): it "
    r"describes these rows, not a population$"
)


@pytest.mark.parametrize(
    ("fit", "counts"),
    [
        (lambda data: optimize(data, ID_ESTIMATOR, max_its=3, seed=1), ("603", "598")),
        (lambda data: best_of(data, ID_ESTIMATOR, trials=2, max_its=3, seed=1), ("603", "598")),
        # k=1 has the lower AIC: 2 + 299 parameters
        (
            lambda data: select_k(data, ID_ESTIMATOR, [1, 2], max_its=3, seed=1, criterion="aic"),
            ("301", "299"),
        ),
    ],
    ids=["optimize", "best_of", "select_k"],
)
def test_more_free_parameters_than_rows_warns_naming_the_field(fit: Any, counts: tuple[str, str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with pytest.warns(ModelSizeWarning, match=OVER.format(*counts)) as caught:
            fit(_id_rows(300))
    mine = [w for w in caught if w.category is ModelSizeWarning]
    assert len(mine) == 1 and mine[0].filename == __file__  # once, pointing at the caller


def test_em_fit_writes_the_parameters_warning_to_stderr_and_the_summary(tmp_path: Path) -> None:
    data = tmp_path / "ids.parquet"
    _id_rows(300).to_parquet(data)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"type": "mixture", "k": 2, "component": {"type": "record", "fields": {
        "amount": "gaussian", "customer": "categorical"}}}))  # fmt: skip
    out = tmp_path / "out"
    proc = _job("em_fit", "--input", str(data), "--model", str(spec), "--output", str(out), "--quiet",
                "--max-its", "3", "--trials", "1", "--seed", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "free parameters" in line]
    assert len(warned) == 1 and re.match(OVER.format("603", "598"), warned[0][len("em_fit: warning: ") :])
    summary = json.loads((out / "summary.json").read_text())
    assert [w for w in summary["warnings"] if "free parameters" in w] == [
        warned[0][len("em_fit: warning: ") :]
    ]


@pytest.mark.parametrize(
    ("prog", "write", "message"),
    [
        ("em_fit", lambda p: p.write_text('{"type": "mixture", "k": 1000000000, "component": "gaussian"}'),
         r"^mixture spec: k = 1,000,000,000 is more than the 100,000 components allowed$"),
        ("em_fit", lambda p: p.write_text(DEEP_SPEC), rf"^model spec \S+ {TOO_DEEP}$"),
        ("em_score", lambda p: p.write_text(DEEP_MODEL), rf"^model \S+ {TOO_DEEP}$"),
    ],
    ids=["huge-k", "deep-spec", "deep-model"],
)  # fmt: skip
def test_jobs_refuse_unbounded_specs_and_models_with_exit_2(
    tmp_path: Path, prog: str, write: Any, message: str
) -> None:
    source = tmp_path / "given.json"
    write(source)
    data = tmp_path / "rows.parquet"
    _mixture_rows(50).to_parquet(data)
    proc = _job(prog, "--input", str(data), "--model", str(source), "--output", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert re.match(message, _only_error_line(proc, prog)), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["given.json", "rows.parquet"]  # nothing written
