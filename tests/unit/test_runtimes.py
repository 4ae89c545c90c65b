"""What the jobs' Ray runtime start decides before Ray runs: an old Ray is refused (no token
authentication), and the private directory goes where Ray's own files would, unless that path is too
long for Ray's Unix sockets. (The runtimes themselves: tests/dask, tests/ray.)"""

from __future__ import annotations

import os
import sys
import types

import pytest

from mixle_spark.cli import _runtimes


def test_a_ray_without_token_authentication_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old = types.SimpleNamespace(__version__="2.51.1", init=lambda **kw: pytest.fail("ray.init called"))
    monkeypatch.setattr(_runtimes.tempfile, "mkdtemp", lambda **kw: pytest.fail("a directory was made"))
    before = dict(os.environ)
    with pytest.raises(RuntimeError) as info:
        _runtimes.start_local_ray(old, 2)
    assert str(info.value) == (
        "--backend ray starts a local Ray runtime with token authentication, which needs ray>=2.52; "
        "installed: ray 2.51.1 (pip install 'mixle-spark[ray]', or pass --ray-address)"
    )
    assert dict(os.environ) == before


@pytest.mark.parametrize(
    ("version", "expected"), [("2.60.0", (2, 60)), ("2.52.0rc1", (2, 52)), ("3.0", (3, 0)), ("3", (3, 0))]
)
def test_ray_version(version: str, expected: tuple[int, int]) -> None:
    assert _runtimes.ray_version(types.SimpleNamespace(__version__=version)) == expected


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TMPDIR is Ray's base on Linux only")
def test_the_private_directory_goes_where_ray_would_put_its_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    assert _runtimes._ray_temp_base() == "/var/tmp"
    monkeypatch.setenv("RAY_TMPDIR", "/scratch")
    assert _runtimes._ray_temp_base() == "/scratch"
    # too long for the runtime's socket paths (at most 103 bytes): /tmp
    monkeypatch.setenv("RAY_TMPDIR", "/home/someone/a/rather/long/scratch")
    assert _runtimes._ray_temp_base() == "/tmp"
