"""The Dask cluster and the Ray runtime a job starts on this machine, each admitting only the job.

- Dask (:func:`start_local_dask`): scheduler, nannies and workers listen on 127.0.0.1 and speak
  mutual TLS with a credential made for this cluster (``distributed.Security.temporary()``: a key
  and a self-signed certificate held in memory, given to the workers when they start); a peer
  without it is refused at the handshake. No dashboard: the job prints its own progress, and the
  HTTP servers Dask always starts (on loopback) answer health checks only, since TLS does not
  cover them.
- Ray (:func:`start_local_ray`): token authentication (``RAY_AUTH_MODE=token``, Ray >= 2.52) with
  a token made for this runtime, held only in the environment of the runtime's processes (never in
  ``~/.ray/auth_token``, which Ray writes readable by every user), and the runtime's files (session,
  logs, sockets, spilled objects) under a new directory of mode 0700, removed when it stops.
  Ray's servers listen on every interface whatever it is told (it maps 127.0.0.1 to the machine's
  address); the token is what keeps other users and hosts out.

``connect_dask`` joins a cluster at an address with dask's own TLS settings (docs/security.md).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import secrets
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "DaskCluster",
    "RayRuntime",
    "connect_dask",
    "start_local_dask",
    "start_local_ray",
]

LOOPBACK = "127.0.0.1"
STOP_TIMEOUT = 60.0
"""Seconds a job waits for its Dask client, then its cluster, to close before killing the workers."""
logger = logging.getLogger(__name__)
_HEALTH_ONLY = ["distributed.http.health"]
RAY_TOKEN_AUTH = (2, 52)
"""The first Ray release with token authentication."""


class DaskCluster:
    """A Dask client and the local cluster it was started with (``None`` for a cluster joined at an
    address); ``stop()`` closes the client, then the cluster if it is the job's."""

    def __init__(self, client: Any, cluster: Any = None) -> None:
        self.client, self.cluster = client, cluster

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Close the client, then the job's cluster, waiting at most ``timeout`` seconds for each. A
        cluster that has not stopped by then has its worker processes killed (only this process's
        own children), is given ``timeout`` more seconds, and a warning is logged: a job never hangs
        on its way out."""
        workers = _worker_processes(self.cluster)
        if not _Closing(self.client.close).wait(timeout):
            logger.warning("the Dask client did not close within %.0f s", timeout)
        if self.cluster is None:
            return
        closing = _Closing(self.cluster.close)
        if closing.wait(timeout):
            return
        killed = _kill_alive(workers)
        logger.warning(
            "the Dask cluster did not stop within %.0f s; killed %d worker process(es)%s",
            timeout,
            killed,
            "" if closing.wait(timeout) else ", and it has still not stopped",
        )


class _Closing:
    """``close()`` run in a thread of its own, so that waiting for it can end without cancelling it
    (a Dask close cancelled half-way never finishes, and its exit handler then waits for it)."""

    def __init__(self, close: Callable[[], Any]) -> None:
        self._done = threading.Event()
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(close,), name="mixle-dask-close", daemon=True).start()

    def _run(self, close: Callable[[], Any]) -> None:
        try:
            close()
        except BaseException as err:  # re-raised by wait(), in the caller's thread
            self._error = err
        finally:
            self._done.set()

    def wait(self, timeout: float) -> bool:
        """True once the close has finished (raising what it raised); False after ``timeout`` s."""
        if not self._done.wait(timeout):
            return False
        if self._error is not None:
            raise self._error
        return True


def _worker_processes(cluster: Any) -> list[Any]:
    """The worker processes a local cluster's nannies started (children of this process), as
    psutil handles taken now, so that a pid the system reuses later is never mistaken for them."""
    if cluster is None:
        return []
    import psutil

    mine = {child.pid: child for child in psutil.Process().children(recursive=True)}
    pids = []
    for nanny in getattr(cluster, "workers", {}).values():
        process = getattr(getattr(nanny, "process", None), "process", None)
        pid = getattr(process, "pid", None)
        if pid in mine:
            pids.append(mine[pid])
    return pids


def _kill_alive(processes: list[Any]) -> int:
    """Kill those of ``processes`` still running; their nannies (in this process) reap them."""
    import psutil

    killed = 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running():  # the same process: psutil compares its start time too
                process.kill()
                killed += 1
    return killed


def start_local_dask(workers: int, *, silence_logs: int = 50) -> DaskCluster:
    """A cluster of ``workers`` processes (one thread each) on 127.0.0.1 speaking TLS with a new
    credential, and a client holding it (the only one that does)."""
    import dask
    import distributed

    try:
        security = distributed.Security.temporary()
    except ImportError as err:
        raise ImportError(
            "a local Dask cluster speaks TLS with a credential of its own, made by the cryptography "
            f"package: pip install 'mixle-spark[dask]' ({err})"
        ) from err
    http = {"distributed.scheduler.http.routes": _HEALTH_ONLY, "distributed.worker.http.routes": _HEALTH_ONLY}
    with dask.config.set(http):  # read by the scheduler, and by each nanny for its worker, as they start
        cluster = distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host=LOOPBACK,
            protocol="tls://",
            security=security,
            dashboard_address=f"{LOOPBACK}:0",  # where the HTTP server listens (a free port) ...
            scheduler_kwargs={"dashboard": False},  # ... without the dashboard
            silence_logs=silence_logs,
        )
    try:
        client, reason = _new_client(lambda: distributed.Client(cluster, security=security), Exception)
    except BaseException:
        cluster.close()
        raise
    if reason is None:
        return DaskCluster(client, cluster)
    cluster.close()
    raise RuntimeError(f"the local Dask cluster started, but its client could not connect to it: {reason}")


def _new_client(make: Callable[[], Any], refused: Any) -> tuple[Any, str | None]:
    """``(make(), None)``, or ``(None, "Type: message")`` when ``make`` raises one of ``refused``.

    A ``distributed.Client`` whose constructor failed stays in a reference cycle with its exception's
    frames, and a later garbage collection would close it wherever that collection runs. Inside
    distributed's loop start (a new client or cluster) the close waits for a lock that same thread
    holds, and the process hangs. So the exception is let go here and the failed client collected
    at once, where nothing holds that lock; the caller raises its own error from the reason."""
    try:
        return make(), None
    except refused as err:
        reason = f"{type(err).__name__}: {err}"
    gc.collect()
    return None, reason


def connect_dask(address: str) -> DaskCluster:
    """A client of the cluster at ``address``, with dask's own settings: TLS from
    ``distributed.comm.tls.*``, the wait from ``distributed.comm.timeouts.connect``. ConnectionError
    naming the address and those settings when the scheduler cannot be reached or refuses us."""
    import dask
    import distributed

    timeout = dask.config.get("distributed.comm.timeouts.connect")
    # Security() reads distributed.comm.tls.*; refused, timed out, or TLS without a credential:
    refused = (OSError, TypeError, ValueError)
    client, reason = _new_client(lambda: distributed.Client(address, timeout=timeout), refused)
    if reason is not None:
        raise ConnectionError(
            f"cannot connect to the Dask scheduler at {address}: {reason}. A scheduler that requires "
            "TLS needs a tls:// address and this client's credential in dask's settings "
            "(distributed.comm.tls.ca-file, distributed.comm.tls.client.cert, "
            "distributed.comm.tls.client.key; see docs/security.md)"
        )
    return DaskCluster(client)


class RayRuntime:
    """The Ray runtime of a job (started by it, or joined); ``stop()`` disconnects, stopping a runtime
    the job started, removing its private directory and restoring the environment it changed."""

    def __init__(
        self, ray: Any, private_dir: str | None = None, saved_env: dict[str, str | None] | None = None
    ):
        self.ray, self.private_dir, self._saved_env = ray, private_dir, saved_env or {}

    def stop(self) -> None:
        try:
            self.ray.shutdown()
        finally:
            if self._saved_env:
                _set_environment(self._saved_env)
                self._saved_env = {}
            if self.private_dir is not None:
                shutil.rmtree(self.private_dir, ignore_errors=True)
                self.private_dir = None


def ray_version(ray: Any) -> tuple[int, int]:
    """``(major, minor)`` of the installed Ray."""
    major, minor = [*str(ray.__version__).split("."), "0"][:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def start_local_ray(ray: Any, num_cpus: int, **options: Any) -> RayRuntime:
    """``ray.init(num_cpus=..., **options)`` for a runtime only this job can use: token authentication
    with a new token (in the environment of this process and the runtime's, not in a file) and the
    runtime's files under a new private directory. RuntimeError for a Ray without token authentication."""
    if ray_version(ray) < RAY_TOKEN_AUTH:
        raise RuntimeError(
            f"--backend ray starts a local Ray runtime with token authentication, which needs "
            f"ray>={'.'.join(map(str, RAY_TOKEN_AUTH))}; installed: ray {ray.__version__} "
            "(pip install 'mixle-spark[ray]', or pass --ray-address)"
        )
    private_dir = tempfile.mkdtemp(prefix="mixle-", dir=_ray_temp_base())  # mode 0700
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    saved = _set_environment(token)
    runtime = RayRuntime(ray, private_dir, saved)
    try:
        # Ray makes its temp directory world-writable (0777): a directory inside the private one
        ray.init(num_cpus=num_cpus, _temp_dir=os.path.join(private_dir, "ray"), **options)
    except BaseException:
        runtime.stop()
        raise
    return runtime


_SOCKET_PATH_MAX = 103  # bytes in a Unix socket's path (macOS; Linux allows 107)
_SOCKET_PATH_ROOM = len("/mixle-XXXXXXXX/ray/session_2026-01-01_00-00-00_000000_1234567/sockets/plasma_store")


def _ray_temp_base() -> str:
    """Where Ray itself would put its files (``RAY_TMPDIR``, else ``TMPDIR`` on Linux, else /tmp),
    or /tmp if the runtime's socket paths under it would be too long for Unix sockets."""
    if "RAY_TMPDIR" in os.environ:
        base = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        base = os.environ["TMPDIR"]
    else:
        base = "/tmp" if sys.platform.startswith(("linux", "darwin")) else tempfile.gettempdir()
    if len(base.encode()) + _SOCKET_PATH_ROOM > _SOCKET_PATH_MAX and os.path.isdir("/tmp"):
        return "/tmp"
    return base


def _set_environment(values: Mapping[str, str | None]) -> dict[str, str | None]:
    """Set (a value) or unset (``None``) environment variables, and make an imported Ray read them
    again (Ray caches its auth mode and token when first asked); return the previous values."""
    previous = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if "ray._raylet" in sys.modules:
        raylet = sys.modules["ray._raylet"]
        with contextlib.suppress(AttributeError):  # what ray.init does when it turns token auth on
            raylet.Config.initialize("")
            raylet.AuthenticationTokenLoader.instance().reset_cache()
    return previous
