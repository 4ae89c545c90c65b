"""Checkpointed EM: an interrupted fit resumes to exactly the estimates of an uninterrupted one."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mixle_spark.em.resilient import (
    CheckpointMismatchError,
    CheckpointStore,
    CorruptCheckpointWarning,
    checkpointed_fold,
)
from mixle_spark.estimation import best_of, optimize
from mixle_spark.spec import model_from_dict, model_to_dict
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianEstimator,
    PoissonEstimator,
    RecordEstimator,
)

ROOT = Path(__file__).resolve().parents[2]


class Interrupt(Exception):
    """Stands in for the driver dying: raised from the progress stream at one iteration."""


class StopAt:
    """A progress stream that raises when iteration ``at`` is reported (after its checkpoint is due)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def write(self, text: str) -> int:
        if text.startswith(f"iteration {self.at:4d} "):
            raise Interrupt(text)
        return len(text)

    def flush(self) -> None:
        pass


def _gaussian_data() -> list[float]:
    start = MixtureDistribution([GaussianDistribution(-2.0, 1.0), GaussianDistribution(3.0, 0.5)], [0.3, 0.7])
    return list(np.asarray(start.sampler(11).sample(3000)))


def _record_data() -> list[dict]:
    rng = np.random.default_rng(5)
    n = 2000
    z = rng.random(n) < 0.4
    return [
        {"x": float(v), "k": int(c), "color": str(s)}
        for v, c, s in zip(
            np.where(z, rng.normal(-1, 1, n), rng.normal(2, 0.5, n)),
            np.where(z, rng.poisson(2, n), rng.poisson(9, n)),
            np.where(z, rng.choice(["red", "green"], n), rng.choice(["green", "blue"], n)),
            strict=True,
        )
    ]


CASES = {
    "gaussian": (_gaussian_data, lambda: MixtureEstimator([GaussianEstimator()] * 2)),
    "mvn": (
        lambda: list(
            np.random.default_rng(3).normal(size=(1500, 3)) + np.repeat([[0, 0, 0], [3, 3, 0]], 750, axis=0)
        ),
        lambda: MixtureEstimator([MultivariateGaussianEstimator(3)] * 3),
    ),
    "record": (
        _record_data,
        lambda: MixtureEstimator(
            [
                RecordEstimator(
                    {"x": GaussianEstimator(), "k": PoissonEstimator(), "color": CategoricalEstimator()}
                )
            ]
            * 2
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("delta", [None])
def test_interrupted_fit_resumes_to_identical_estimates(
    tmp_path: Path, name: str, delta: float | None
) -> None:
    make_data, make_est = CASES[name]
    data = make_data()
    want = optimize(data, make_est(), max_its=12, delta=delta, seed=4, num_chunks=3)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(Interrupt):
        optimize(
            data,
            make_est(),
            max_its=12,
            delta=delta,
            seed=4,
            num_chunks=3,
            checkpoint_dir=ckpt,
            out=StopAt(5),
        )
    assert [it for it, _ in CheckpointStore(ckpt).list()] == [5, 4, 3]  # keep=3, newest first
    got = optimize(data, make_est(), max_its=12, delta=delta, seed=4, num_chunks=3, checkpoint_dir=ckpt)
    assert got.fit_result.resumed_from == 5
    assert got.to_dict() == want.to_dict()  # exact: every float bit
    assert [r.log_likelihood for r in got.fit_result.history] == [
        r.log_likelihood for r in want.fit_result.history
    ]
    assert got.fit_result.n_iter == want.fit_result.n_iter
    assert got.fit_result.converged == want.fit_result.converged
    assert [t.iteration for t in got.fit_result.trace] == [r.iteration for r in want.fit_result.history]


def test_a_corrupt_newest_checkpoint_is_skipped_and_the_fit_still_resumes_exactly(tmp_path: Path) -> None:
    data = _gaussian_data()
    est = MixtureEstimator([GaussianEstimator()] * 2)
    want = optimize(data, est, max_its=9, delta=None, seed=2)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(Interrupt):
        optimize(data, est, max_its=9, delta=None, seed=2, checkpoint_dir=ckpt, out=StopAt(6))
    newest = Path(CheckpointStore(ckpt).list()[0][1])
    newest.write_bytes(newest.read_bytes()[: len(newest.read_bytes()) // 2])  # a partial write
    with pytest.warns(CorruptCheckpointWarning, match=rf"{newest.name}"):
        got = optimize(data, est, max_its=9, delta=None, seed=2, checkpoint_dir=ckpt)
    assert got.fit_result.resumed_from == 5
    assert got.to_dict() == want.to_dict()


def test_a_finished_fit_returns_at_once_and_a_larger_max_its_continues_it(tmp_path: Path) -> None:
    data = _gaussian_data()
    est = MixtureEstimator([GaussianEstimator()] * 2)
    ckpt = tmp_path / "ckpt"
    first = optimize(data, est, max_its=4, delta=None, seed=1, checkpoint_dir=ckpt)
    again = optimize(data, est, max_its=4, delta=None, seed=1, checkpoint_dir=ckpt)
    assert again.to_dict() == first.to_dict()
    assert again.fit_result.resumed_from == 4 and again.fit_result.n_iter == 4
    longer = optimize(data, est, max_its=7, delta=None, seed=1, checkpoint_dir=ckpt)
    want = optimize(data, est, max_its=7, delta=None, seed=1)
    assert longer.to_dict() == want.to_dict()
    assert [r.iteration for r in longer.fit_result.history] == list(range(8))


def test_a_resumed_fit_says_so_once_and_a_finished_one_is_returned_without_encoding(
    tmp_path: Path,
) -> None:
    """``optimize`` first asks the checkpoint whether the fit had finished (no encoding then), and
    says it resumes only once, from the run that does; ``on_encoded`` sees each encoding."""
    data = _gaussian_data()
    est = MixtureEstimator([GaussianEstimator()] * 2)
    ckpt, encoded = tmp_path / "ckpt", []
    optimize(data, est, max_its=3, delta=None, seed=1, checkpoint_dir=ckpt, on_encoded=encoded.append)
    assert [len(h) for h in encoded] == [3000]
    out = io.StringIO()
    longer = optimize(
        data, est, max_its=5, delta=None, seed=1, checkpoint_dir=ckpt, out=out, on_encoded=encoded.append
    )
    said = [line for line in out.getvalue().splitlines() if "checkpoint" in line]
    assert said == [f"resuming from checkpoint {ckpt} at iteration 3"]
    assert len(encoded) == 2 and longer.fit_result.resumed_from == 3
    out = io.StringIO()
    again = optimize(
        data, est, max_its=5, delta=None, seed=1, checkpoint_dir=ckpt, out=out, on_encoded=encoded.append
    )
    assert len(encoded) == 2  # the finished fit came from its checkpoint: the data was not encoded
    assert out.getvalue().splitlines() == [
        f"resuming from checkpoint {ckpt} at iteration 5",
        f"the fit in {ckpt} had finished; returning its model",
    ]
    assert again.to_dict() == longer.to_dict() and again.fit_result.resumed_from == 5


def test_a_checkpoint_of_another_fit_is_refused(tmp_path: Path) -> None:
    data = _gaussian_data()
    est = MixtureEstimator([GaussianEstimator()] * 2)
    ckpt = tmp_path / "ckpt"
    optimize(data, est, max_its=2, delta=None, seed=1, checkpoint_dir=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"different fit \(the seed: checkpoint 1, now 2\)"):
        optimize(data, est, max_its=2, delta=None, seed=2, checkpoint_dir=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"the number of rows: checkpoint 3000, now 2999"):
        optimize(data[:-1], est, max_its=2, delta=None, seed=1, checkpoint_dir=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"the estimator \(model spec\) differs"):
        optimize(
            data,
            MixtureEstimator([GaussianEstimator()] * 3),
            max_its=2,
            delta=None,
            seed=1,
            checkpoint_dir=ckpt,
        )
    fresh = optimize(data, est, max_its=2, delta=None, seed=2, checkpoint_dir=ckpt, resume=False)
    assert fresh.fit_result.resumed_from is None
    assert CheckpointStore(ckpt).latest()[1]["fingerprint"]["seed"] == 2


def test_best_of_checkpoints_each_trial(tmp_path: Path) -> None:
    data = _gaussian_data()
    est = MixtureEstimator([GaussianEstimator()] * 2)
    want_ll, want = best_of(data, est, trials=3, max_its=4, delta=None, seed=9)
    ckpt = tmp_path / "ckpt"
    got_ll, got = best_of(data, est, trials=3, max_its=4, delta=None, seed=9, checkpoint_dir=ckpt)
    assert sorted(p.name for p in ckpt.iterdir()) == ["trial-0", "trial-1", "trial-2"]
    again_ll, again = best_of(data, est, trials=3, max_its=4, delta=None, seed=9, checkpoint_dir=ckpt)
    assert got_ll == want_ll == again_ll
    assert got.to_dict() == want.to_dict() == again.to_dict()
    assert again.fit_result.resumed_from == 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"checkpoint_every": 0}, r"checkpoint_every must be an integer >= 1, got 0"),
        ({"resume": "yes"}, r"resume must be True or False, got 'yes'"),
        (
            {"on_degenerate": "ignore"},
            r"on_degenerate must be one of 'stop', 'floor', 'reseed', got 'ignore'",
        ),
        ({"audit": 3}, r"audit must be an SDCAudit, True or None, got 3"),
        ({"mlflow": "on"}, r"mlflow must be True, False or None, got 'on'"),
    ],
)
def test_bad_reliability_options_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        optimize([1.0, 2.0, 3.0], GaussianEstimator(), **kwargs)


def test_checkpointed_fold_equals_the_uninterrupted_fold() -> None:
    est = MixtureEstimator([GaussianEstimator()] * 2)
    model = MixtureDistribution([GaussianDistribution(-1.0, 1.0), GaussianDistribution(2.0, 1.0)], [0.5, 0.5])
    data = _gaussian_data()
    enc = est.encoder()
    values = []
    for part in np.array_split(np.asarray(data), 5):
        acc = est.accumulator_factory().make()
        x = enc.from_arrow(__import__("pyarrow").array(part))
        acc.seq_update(x, np.ones(len(part)), model)
        values.append(acc.value())
    whole = checkpointed_fold(est, values)
    for after in (1, 3, 5):
        cut = checkpointed_fold(est, values, checkpoint_after=after)
        assert np.array_equal(cut[0], whole[0])
        for a, b in zip(cut[1], whole[1], strict=True):
            assert np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float))


_KILL_SCRIPT = """
import sys, time, numpy as np
from mixle_spark.estimation import optimize
from mixle_spark.stats import GaussianDistribution, GaussianEstimator, MixtureDistribution, MixtureEstimator

class Slow:  # progress to stdout, slowly, so the parent can kill the fit mid-way
    def write(self, text):
        sys.stdout.write(text); sys.stdout.flush(); time.sleep(0.3); return len(text)
    def flush(self): pass

start = MixtureDistribution([GaussianDistribution(-2.0, 1.0), GaussianDistribution(3.0, 0.5)], [0.3, 0.7])
data = list(np.asarray(start.sampler(11).sample(3000)))
optimize(data, MixtureEstimator([GaussianEstimator()] * 2), max_its=40, delta=None, seed=4,
         checkpoint_dir=sys.argv[1], out=Slow())
print("FINISHED", flush=True)
"""


def test_a_sigkilled_driver_resumes_to_identical_estimates(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, str(ckpt)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("iteration    3 "):
            proc.send_signal(signal.SIGKILL)
            break
        assert time.monotonic() < deadline, seen
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, seen
    saved = CheckpointStore(ckpt).latest()
    assert saved is not None and 3 <= saved[0] <= 5  # killed mid-fit, after iteration 3
    start = MixtureDistribution([GaussianDistribution(-2.0, 1.0), GaussianDistribution(3.0, 0.5)], [0.3, 0.7])
    data = list(np.asarray(start.sampler(11).sample(3000)))
    est = MixtureEstimator([GaussianEstimator()] * 2)
    got = optimize(data, est, max_its=40, delta=None, seed=4, checkpoint_dir=ckpt)
    want = optimize(data, est, max_its=40, delta=None, seed=4)
    assert got.fit_result.resumed_from == saved[0]
    assert got.to_dict() == want.to_dict()
    assert json.loads(json.dumps(model_to_dict(got))) == model_to_dict(want)
    assert model_from_dict(model_to_dict(got)).to_dict() == want.to_dict()


def _forge_finished_checkpoint(ckpt: Path) -> None:
    """Change the finished model's first mean to 99 and recompute the file's sha256, as anyone who
    can write the directory can."""
    import hashlib

    newest = max(ckpt.glob("em-checkpoint-*.json"))
    payload = json.loads(newest.read_text())
    final = json.loads(payload["state"]["final"]["model"])
    final["model"]["components"][0]["mu"] = 99.0
    payload["state"]["final"]["model"] = json.dumps(final)
    canonical = json.dumps(payload["state"], sort_keys=True, separators=(",", ":"), allow_nan=True)
    payload["sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    newest.write_text(json.dumps(payload))


def test_a_keyed_checkpoint_refuses_a_forged_finished_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unkeyed, the sha256 finds damage only: a forged model with its hash recomputed is returned as
    finished without reading the data (what the docs say). With a key (given, or from the
    environment) the forged file fails its HMAC, is skipped with a warning naming it, and the fit is
    made again from the data."""
    data = _gaussian_data()
    est = MixtureEstimator([GaussianEstimator()] * 2)
    want = optimize(data, est, max_its=4, delta=None, seed=1)
    unkeyed, keyed = tmp_path / "unkeyed", tmp_path / "keyed"
    optimize(data, est, max_its=4, delta=None, seed=1, checkpoint_dir=unkeyed)
    _forge_finished_checkpoint(unkeyed)
    forged = optimize(data, est, max_its=4, delta=None, seed=1, checkpoint_dir=unkeyed)
    assert forged.components[0].mu == 99.0  # integrity, not authenticity

    key = b"k" * 32
    optimize(data, est, max_its=4, delta=None, seed=1, checkpoint_dir=keyed, checkpoint_key=key)
    _forge_finished_checkpoint(keyed)
    newest = max(keyed.glob("em-checkpoint-*.json")).name
    with pytest.warns(
        CorruptCheckpointWarning, match=rf"{newest}: its HMAC does not verify under the checkpoint key"
    ):
        again = optimize(data, est, max_its=4, delta=None, seed=1, checkpoint_dir=keyed, checkpoint_key=key)
    assert again.to_dict() == want.to_dict()

    # the environment's key, and a store that has one reads no unkeyed (or otherwise keyed) files
    monkeypatch.setenv("MIXLE_SPARK_CHECKPOINT_KEY", "e" * 20)
    with pytest.warns(CorruptCheckpointWarning, match=r"carries no HMAC, and a checkpoint key is set"):
        assert CheckpointStore(unkeyed).latest() is None
    with pytest.warns(CorruptCheckpointWarning, match=r"HMAC does not verify"):
        assert CheckpointStore(keyed).latest() is None
    assert CheckpointStore(keyed, key=key).latest() is not None
    assert "keyed" in repr(CheckpointStore(keyed)) and "eeee" not in repr(CheckpointStore(keyed))
    with pytest.raises(ValueError, match=r"checkpoint_key must be at least 16 bytes long, got 5"):
        optimize(data, est, max_its=1, checkpoint_dir=keyed, checkpoint_key="short")
