"""The Ray runtime a ``--backend ray`` job starts (``cli/_runtimes.py``, also the runtime of every
`ray` test) admits only the job: its token is made for it (a client holding the token Ray keeps in
``~/.ray/auth_token`` is refused, one holding the runtime's is not) and its files are in a private
directory."""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.ray

# Ray's own client of the runtime's control service (GCS), as ray.init(address=...) makes it first;
# it fails in a second where ray.init retries for half a minute.
_PROBE = """
import sys
from ray._raylet import GcsClient
GcsClient(address=sys.argv[1], cluster_id=None).internal_kv_get(b"probe", None)
print("connected")
"""


def _probe(gcs_address: str, token: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    return subprocess.Popen(
        [sys.executable, "-c", _PROBE, gcs_address],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def test_only_a_client_holding_the_runtimes_own_token_is_admitted(ray_runtime: Any) -> None:
    gcs = ray_runtime.get_runtime_context().gcs_address
    default_file = Path.home() / ".ray" / "auth_token"  # Ray's token for every runtime of this user
    other = default_file.read_text().strip() if default_file.is_file() else secrets.token_hex(32)
    own = os.environ.get("RAY_AUTH_TOKEN", "")  # set by the runtime's start, for its processes
    refused, admitted = _probe(gcs, other), _probe(gcs, own)  # in parallel: a second or two each
    out, err = refused.communicate(timeout=120)
    assert refused.returncode != 0 and "connected" not in out
    assert "Authentication token is missing or incorrect" in err, err
    out, err = admitted.communicate(timeout=120)
    assert admitted.returncode == 0 and out.strip() == "connected", err


def test_the_runtimes_files_are_in_a_private_directory(ray_runtime: Any) -> None:
    temp = Path(ray_runtime.get_runtime_context().get_temp_dir())
    private = [p for p in [temp, *temp.parents] if stat.S_IMODE(p.stat().st_mode) == 0o700]
    assert private, f"no directory above {temp} is private (mode 0700)"
    assert private[0].stat().st_uid == os.getuid() and private[0].name.startswith("mixle-")
