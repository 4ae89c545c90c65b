"""``em_fit --infer-spec``: a table nobody wrote a spec for is segmented (its spec inferred, written
beside the model, its reasons in the log and summary.json); what does not go with it is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import adjusted_rand_score

from mixle_spark.cli.fit import main
from mixle_spark.spec import load_model, load_spec

SEGMENTS = 4


def segment_table(seed: int, rows: int = 8000) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows drawn from a 4-segment record mixture (log-normal spend, Poisson visits, a channel, a
    flag, an optional rating), and each row's segment."""
    rng = np.random.default_rng(seed)
    segment = rng.choice(SEGMENTS, rows, p=[0.4, 0.3, 0.2, 0.1])
    spend_mu = np.array([1.0, 2.5, 4.0, 5.5])[segment]
    visits_lam = np.array([1.0, 6.0, 2.5, 12.0])[segment]
    channel_p = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.4, 0.3, 0.3]])
    u = rng.random(rows)[:, None]
    channel = np.array(["web", "app", "store"])[(u > np.cumsum(channel_p[segment], axis=1)).sum(axis=1)]
    rating = rng.normal(np.array([2.0, 3.0, 4.0, 1.0])[segment], 0.4)
    rating[rng.random(rows) < 0.15] = np.nan
    table = pd.DataFrame(
        {
            "spend": rng.lognormal(spend_mu, 0.4),
            "visits": rng.poisson(visits_lam),
            "channel": channel,
            "member": rng.random(rows) < np.array([0.1, 0.5, 0.9, 0.5])[segment],
            "rating": rating,
            "customer_id": rng.permutation(rows) + 1_000_000,
        }
    )
    return table, segment


def test_em_fit_infer_spec_finds_the_segments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table, segment = segment_table(seed=8231)
    data = tmp_path / "table.parquet"
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), data)
    out = tmp_path / "fit"
    argv = ["--backend", "local", "--input", str(data), "--infer-spec", "--k", "2:6", "--output", str(out)]
    code = main([*argv, "--seed", "2", "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["model.json", "spec.json", "summary.json", "trace.jsonl"]
    summary = json.loads((out / "summary.json").read_text())
    reasons = summary["inferred_spec"]["reasons"]
    assert [line.split(":")[0] for line in reasons] == list(table.columns)
    assert reasons[-1] == "customer_id: ignored (a different integer on every sampled row: an id)"
    assert all(f"  {line}" in captured.err.splitlines() for line in reasons)
    assert summary["model_selection"]["best_k"] == SEGMENTS
    assert [row["k"] for row in summary["model_selection"]["table"]] == [2, 3, 4, 5, 6]
    spec = load_spec(out / "spec.json")  # a spec file em_fit --model reads, at the k chosen
    written = json.loads((out / "spec.json").read_text())["estimator"]
    assert written["type"] == "mixture" and written["k"] == SEGMENTS
    assert written["component"]["fields"]["rating"] == {"type": "optional", "estimator": {"type": "gaussian"}}
    assert set(written["component"]["fields"]) == {"spend", "visits", "channel", "member", "rating"}
    assert len(spec.estimator.estimators) == SEGMENTS
    model = load_model(out / "model.json")
    assert len(model.components) == SEGMENTS
    assert adjusted_rand_score(segment, model.predict(table)) >= 0.9
    assert "wrote" in captured.out and "spec.json" in captured.out.splitlines()[-1]


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (["--model", "conf/models/sample.json"], "--infer-spec infers the spec that --model would give"),
        (["--label-column", "seg"], "--label-column needs a spec given with --model, not --infer-spec"),
        (["--forms", "all", "--init-model", "m.json"], "--init-model, --forms need a spec given with"),
        (["--backend", "dask"], "--infer-spec reads the input with --backend spark or local, not dask"),
        (["--update-from", "old"], "takes the model and its spec from old; --infer-spec applies to a fit"),
    ],
)
def test_what_does_not_go_with_infer_spec_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], line: str
) -> None:
    data = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1.0, 2.0]}), data)
    with pytest.raises(SystemExit) as exited:
        main(["--input", str(data), "--infer-spec", "--output", str(tmp_path / "o"), *extra])
    assert exited.value.code == 2
    assert line in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
