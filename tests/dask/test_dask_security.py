"""The Dask cluster a ``--backend dask`` job starts (``cli/_engines.py``) admits only the job's own
client: mutual TLS with a credential made for that cluster, every listener on loopback, no dashboard
(its HTTP server answers health checks only); a job joining a cluster at ``--dask-scheduler``
connects with dask's own TLS settings, and says what it needs when it cannot."""

from __future__ import annotations

import argparse
import operator
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mixle_spark.cli._engines import open_dask_input

pytestmark = pytest.mark.dask

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "customers_sample.parquet"


def _wait_for(condition: Callable[[], bool], seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _connecting_clients() -> list[Any]:
    """The ``distributed.Client`` objects still alive (garbage included) in state "connecting"."""
    import gc

    from distributed.client import Client  # the class, also while a test replaces distributed.Client

    return [c for c in gc.get_objects() if isinstance(c, Client) and c.status == "connecting"]


def _args(scheduler: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(
        input=str(SAMPLE), backend="dask", dask_scheduler=scheduler, num_workers=1, verbose=False
    )


@pytest.fixture(scope="module")
def job_cluster() -> Iterator[Any]:
    """The cluster and client the job starts (one worker process), through the job's own code."""
    pytest.importorskip("distributed")
    _, session, _ = open_dask_input(_args(), {})
    yield session
    session.stop()


def test_a_client_without_the_clusters_credential_is_refused(job_cluster: Any) -> None:
    from distributed import Client, Security

    address = job_cluster.client.scheduler.address
    host_port = address.split("://", 1)[1]
    # another credential over TLS, and no TLS at all: the scheduler hangs up on both
    for target, security in [(f"tls://{host_port}", Security.temporary()), (f"tcp://{host_port}", None)]:
        with pytest.raises(OSError):  # distributed's CommClosedError: never a client that can run code
            Client(target, security=security, timeout="10s").close()
    assert address.startswith("tls://127.0.0.1:")
    assert job_cluster.client.submit(operator.add, 1, 2).result() == 3  # the job's own client works


def _listening_hosts() -> set[str]:
    """The hosts this process's listening sockets are bound to (run in each worker process)."""
    import psutil

    return {c.laddr.ip for c in psutil.Process().net_connections("inet") if c.status == psutil.CONN_LISTEN}


def test_every_listener_of_the_cluster_is_on_loopback(job_cluster: Any) -> None:
    from distributed.comm import get_address_host
    from distributed.comm.utils import get_tcp_server_addresses

    scheduler = job_cluster.cluster.scheduler  # the scheduler and the nannies run in this process
    hosts = {get_address_host(scheduler.address)}
    hosts |= {address[0] for address in get_tcp_server_addresses(scheduler.http_server)}
    hosts |= {get_address_host(nanny.address) for nanny in job_cluster.cluster.workers.values()}
    worker_hosts = job_cluster.client.run(_listening_hosts)  # every socket of every worker process
    assert len(worker_hosts) == 1
    hosts |= set().union(*worker_hosts.values())
    assert hosts == {"127.0.0.1"}


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_the_http_servers_answer_health_checks_only(job_cluster: Any) -> None:
    scheduler = job_cluster.cluster.scheduler
    ports = [scheduler.http_server.port]
    ports += job_cluster.client.run(lambda dask_worker: dask_worker.http_server.port).values()
    for port in ports:
        base = f"http://127.0.0.1:{port}"
        assert _status(f"{base}/health") == 200
        # no dashboard, worker list, logs, call stacks or metrics for whoever else is on the machine
        for page in ("/status", "/info/main/workers.html", "/json/identity.json", "/metrics"):
            assert _status(base + page) == 404, f"{base}{page} is served"


def _client_tls_files(security: Any, folder: Path) -> dict[str, str]:
    """The cluster's credential as the files dask's ``distributed.comm.tls`` settings name."""
    folder.mkdir(mode=0o700)
    paths = {}
    for key, pem in [
        ("ca-file", security.tls_ca_file),
        ("client.cert", security.tls_client_cert),
        ("client.key", security.tls_client_key),
    ]:
        path = folder / key.replace(".", "-")
        path.write_text(pem)
        path.chmod(0o600)
        paths[f"distributed.comm.tls.{key}"] = str(path)
    return paths


def test_a_job_at_dask_scheduler_uses_dasks_tls_settings(job_cluster: Any, tmp_path: Path) -> None:
    import dask

    address = job_cluster.client.scheduler.address
    extra: dict[str, Any] = {}
    with dask.config.set(_client_tls_files(job_cluster.cluster.security, tmp_path / "tls")):
        _, joined, _ = open_dask_input(_args(address), extra)
    try:
        assert joined.cluster is None  # not the job's to stop
        assert joined.client.submit(operator.add, 2, 3).result() == 5
        assert extra["dask"] == {"scheduler": address, "workers": 1}
    finally:
        joined.stop()
    assert job_cluster.client.submit(operator.add, 1, 1).result() == 2  # the cluster runs on
    # without them: one error naming the address and what the scheduler expects
    with dask.config.set({"distributed.comm.timeouts.connect": "5s"}):
        with pytest.raises(ConnectionError) as info:
            open_dask_input(_args(address), {})
    message = str(info.value)
    assert message.startswith(f"cannot connect to the Dask scheduler at {address}: ")
    assert "distributed.comm.tls.client.cert" in message and "docs/security.md" in message
    # the refused client is closed now, not by some later garbage collection: one that ran inside
    # distributed's loop start (the next cluster's) would close it there and hang on the loop's lock
    del info
    assert _connecting_clients() == []


def _freeze() -> int:
    """Stops the worker process that runs it (SIGSTOP): it answers nothing, SIGTERM included."""
    import signal

    pid = os.getpid()
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_a_cluster_slow_to_stop_has_its_workers_killed(caplog: pytest.LogCaptureFixture) -> None:
    import psutil

    from mixle_spark.cli._runtimes import start_local_dask

    session = start_local_dask(1, silence_logs=50)
    (pid,) = session.client.run(os.getpid).values()
    worker = psutil.Process(pid)
    frozen = session.client.submit(_freeze, pure=False)  # never answers
    assert _wait_for(lambda: worker.status() == psutil.STATUS_STOPPED) and not frozen.done()
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="mixle_spark.cli._runtimes"):
        session.stop(timeout=1)  # dask's own close waits 4-5 s for a worker that does not answer
    assert time.monotonic() - started < 10
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    assert "the Dask cluster did not stop within 1 s; killed 1 worker process(es)\n" in caplog.text + "\n"
    assert session.cluster.status.name == "closed"  # the close went on (not cancelled) and finished


_REFUSED_THEN_NEW_CLUSTER = """
import gc, sys, threading
from mixle_spark.cli._runtimes import connect_dask, start_local_dask

def main():
    first = start_local_dask(1, silence_logs=50)
    try:
        connect_dask(first.client.scheduler.address)  # no credential in dask's settings: refused
    except ConnectionError:
        pass
    start = threading.Thread.start

    def collecting_start(thread):  # a garbage collection that happens to run as a thread starts
        gc.collect()
        start(thread)

    threading.Thread.start = collecting_start  # ... as distributed starts the next cluster's loop
    second = start_local_dask(1, silence_logs=50)
    threading.Thread.start = start
    print("started", flush=True)
    second.stop()
    first.stop()

if __name__ == "__main__":
    main()
"""


def test_a_refused_connection_cannot_hang_the_next_cluster_start(tmp_path: Path) -> None:
    """The stall behind a CI run stopped at 90 minutes: a client refused at connection, left to the
    garbage collector, was closed by a collection that ran inside distributed's loop start, under
    the class-wide lock its close waits for."""
    import subprocess
    import sys

    script = tmp_path / "refused_then_new_cluster.py"
    script.write_text(_REFUSED_THEN_NEW_CLUSTER)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0 and done.stdout.splitlines() == ["started"], done.stderr[-2000:]


def test_a_client_that_cannot_join_the_new_cluster_is_collected_with_it_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import distributed
    import psutil

    from mixle_spark.cli._runtimes import start_local_dask

    real = distributed.Client

    def without_the_credential(cluster: Any, security: Any = None, **kwargs: Any) -> Any:
        return real(cluster, security=distributed.Security(), **kwargs)  # no credential: cannot join

    monkeypatch.setattr(distributed, "Client", without_the_credential)
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match=r"its client could not connect to it: TypeError: .*TLS"):
        start_local_dask(1, silence_logs=50)
    assert _connecting_clients() == []
    new = [p for p in psutil.Process().children(recursive=True) if p.pid not in children]
    workers = [p for p in new if "resource_tracker" not in " ".join(p.cmdline())]  # the tracker stays
    assert _wait_for(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in workers))
