"""On a real standalone cluster (a master and two 1-core workers on localhost, executors in their own
JVMs): default options lay the data out for the 2 slots (not spark.default.parallelism=8, not the 12
input partitions), E-steps run resident, the package reaches executors that are not given it, and a
worker killed mid-fit changes nothing but the time: the step is recomputed and resident tasks restart."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.spark._standalone import StandaloneCluster

pytestmark = [pytest.mark.spark, pytest.mark.cluster]


def test_default_fit_on_a_standalone_cluster_survives_a_lost_worker(tmp_path: Path) -> None:
    output = tmp_path / "result.json"
    script = Path(__file__).with_name("_cluster_fit.py")
    with StandaloneCluster(tmp_path, workers=2) as cluster:
        run = subprocess.run(
            [sys.executable, str(script), cluster.url, str(cluster.worker_pid(1)), str(output)],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,  # not the checkout: executors must get mixle_spark from the driver
        )
    assert run.returncode == 0, run.stderr[-5000:]
    got = json.loads(output.read_text())

    assert got["slots"] == 2 and got["default_parallelism"] == 8 and got["input_partitions"] == 12
    assert all(".zip/mixle_spark/__init__.py" in f for f in got["executor_files"]), got["executor_files"]
    local = np.array(got["local"]["params"])

    calm = got["calm"]
    assert calm["layout"] == 2 and calm["resident_starts"] == 1 and calm["resident_off"] is None
    # the k-means|| seeding's passes, 12 iterations, the final score
    assert calm["resident_steps"] == _seeding_passes(calm) + 12 + 1
    np.testing.assert_allclose(calm["params"], local, rtol=1e-9)
    assert calm["ll"] == pytest.approx(got["local"]["ll"], rel=1e-12)
    assert calm["seconds"] < 120  # spark.default.parallelism=8 > 2 cores does not stall the start

    killed = got["killed"]
    np.testing.assert_allclose(killed["params"], local, rtol=1e-9)
    events = [e for record in killed["events"].values() for e in record]
    lost = [e for e in events if e.startswith("resident E-steps lost: ")]
    # the loss (and, should the scheduler not have dropped the dead executor yet, a failed restart)
    # costs one step each, recomputed by a Spark job; the fit then goes on resident
    steps = _seeding_passes(killed) + 12 + 1
    assert 1 <= len(lost) <= 2 and killed["resident_steps"] == steps - len(lost), killed
    assert lost[0].startswith("resident E-steps lost: lost the resident task of partition"), lost
    assert killed["resident_starts"] == 2 and killed["resident_off"] is None, killed
    assert got["slots_after"] == 1 and killed["partitions_after"] == 1  # laid out again for 1 slot
    assert any(
        e.startswith("encoded data laid out again for 1 task slot(s) (was 2 partitions)") for e in events
    )
    assert any(
        e.startswith("resident E-steps restarted (1 of at most 3): 1 task holds 20,000 rows") for e in events
    )


def _seeding_passes(fit: dict[str, Any]) -> int:
    """Passes the k-means|| seeding made (its summary line is an event of iteration 0)."""
    line = " ".join(fit["events"].get("0", []))
    found = re.search(r"kmeans\|\| seeding: \d+ centres in (\d+) passes", line)
    assert found, fit["events"]
    return int(found.group(1))
