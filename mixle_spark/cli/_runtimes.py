"""The Dask cluster a job starts on this machine, admitting only the job.

- Dask (:func:`start_local_dask`): scheduler, nannies and workers listen on 127.0.0.1 and speak
  mutual TLS with a credential made for this cluster (``distributed.Security.temporary()``: a key
  and a self-signed certificate held in memory, given to the workers when they start); a peer
  without it is refused at the handshake. No dashboard: the job prints its own progress, and the
  HTTP servers Dask always starts (on loopback) answer health checks only, since TLS does not
  cover them.

``connect_dask`` joins a cluster at an address with dask's own TLS settings (docs/security.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["DaskCluster", "connect_dask", "start_local_dask"]

LOOPBACK = "127.0.0.1"
_HEALTH_ONLY = ["distributed.http.health"]


class DaskCluster:
    """A Dask client and the local cluster it was started with (``None`` for a cluster joined at an
    address); ``stop()`` closes the client, then the cluster if it is the job's."""

    def __init__(self, client: Any, cluster: Any = None) -> None:
        self.client, self.cluster = client, cluster

    def stop(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


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
        return DaskCluster(distributed.Client(cluster, security=security), cluster)
    except BaseException:
        cluster.close()
        raise


def connect_dask(address: str) -> DaskCluster:
    """A client of the cluster at ``address``, with dask's own settings: TLS from
    ``distributed.comm.tls.*``, the wait from ``distributed.comm.timeouts.connect``. ConnectionError
    naming the address and those settings when the scheduler cannot be reached or refuses us."""
    import dask
    import distributed

    timeout = dask.config.get("distributed.comm.timeouts.connect")
    try:
        client = distributed.Client(address, timeout=timeout)  # Security() reads distributed.comm.tls.*
    except (OSError, TypeError, ValueError) as err:  # refused, timed out, or TLS without a credential
        raise ConnectionError(
            f"cannot connect to the Dask scheduler at {address}: {err}. A scheduler that requires TLS "
            "needs a tls:// address and this client's credential in dask's settings "
            "(distributed.comm.tls.ca-file, distributed.comm.tls.client.cert, "
            "distributed.comm.tls.client.key; see docs/security.md)"
        ) from err
    return DaskCluster(client)
