"""The resident engine's wire protocol: nothing a peer sends is unpickled before it authenticates."""

from __future__ import annotations

import logging
import os
import pickle
import queue
import socket
import struct
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from mixle_spark.parallel.backends.spark import _resident_wire as wire

SECRET = b"s" * 32


class _Touch:
    """Unpickling this creates a file: proof that bytes from the socket were deserialized."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.path}",))


_OPEN: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_sockets() -> Any:
    yield
    while _OPEN:
        _OPEN.pop().close()


def _pair() -> tuple[socket.socket, socket.socket]:
    driver, task = socket.socketpair()
    driver.settimeout(5)
    task.settimeout(5)
    _OPEN.extend((driver, task))
    return driver, task


def _in_thread(fn: Any, *args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except Exception as err:
            out["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    out["thread"] = thread
    return out


def test_handshake_then_framed_messages_both_ways() -> None:
    driver, task = _pair()
    side = _in_thread(wire.connect_driver, task, SECRET, (3, 1, 4242))
    hello, to_task = wire.accept_task(driver, SECRET)
    side["thread"].join(5)
    to_driver = side["value"]
    assert (hello.partition, hello.attempt, hello.pid) == (3, 1, 4242)
    to_task.send(("step", {"model": [1.0, 2.0]}))
    assert to_driver.recv() == ("step", {"model": [1.0, 2.0]})
    to_driver.send(("ok", b"x" * 100_000))
    assert to_task.recv() == ("ok", b"x" * 100_000)


def test_wrong_secret_is_refused_by_both_sides() -> None:
    driver, task = _pair()
    side = _in_thread(wire.connect_driver, task, b"t" * 32, (0, 0, 1))
    with pytest.raises(wire.AuthenticationFailed, match="did not prove it holds the fit's secret"):
        wire.accept_task(driver, SECRET)
    driver.close()
    side["thread"].join(5)
    assert isinstance(side["error"], ConnectionError)

    driver, task = _pair()  # a fake driver: the task refuses it before reading any request
    driver.sendall(wire.MAGIC + os.urandom(32))
    side = _in_thread(lambda: (wire.recv_exact(driver, 96), driver.sendall(os.urandom(32))))
    with pytest.raises(wire.AuthenticationFailed, match="the driver did not prove"):
        wire.connect_driver(task, SECRET, (0, 0, 1))
    side["thread"].join(5)
    assert "error" not in side


@pytest.mark.parametrize("framed", [False, True])
def test_a_pickle_instead_of_the_handshake_is_never_loaded(tmp_path: Path, framed: bool) -> None:
    marker = tmp_path / "pwned"
    bomb = pickle.dumps(_Touch(marker))
    message = struct.pack("!Q", len(bomb)) + bomb
    if framed:  # as an authenticated frame would look, MAC of zeros
        message = struct.pack("!Q", len(bomb)) + b"\0" * 32 + bomb
    driver, task = _pair()
    task.sendall(message + b"\0" * 96)
    with pytest.raises(wire.AuthenticationFailed, match="does not speak the resident protocol"):
        wire.accept_task(driver, SECRET)
    assert not marker.exists()


def test_garbage_and_silence_are_refused(tmp_path: Path) -> None:
    driver, task = _pair()
    task.sendall(os.urandom(96))
    with pytest.raises(wire.AuthenticationFailed):
        wire.accept_task(driver, SECRET)
    driver, task = _pair()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        wire.accept_task(driver, SECRET, timeout=0.3)
    assert time.monotonic() - started < 2.0
    driver, task = _pair()
    task.sendall(wire.MAGIC + b"\0" * 10)
    task.close()  # a peer that vanishes mid-handshake
    with pytest.raises(ConnectionError, match=r"Broken pipe|connection closed after 18 of 96 bytes"):
        wire.accept_task(driver, SECRET)


def test_forged_and_replayed_frames_are_refused_before_unpickling(tmp_path: Path) -> None:
    driver, task = _pair()
    side = _in_thread(wire.connect_driver, task, SECRET, (0, 0, 1))
    _hello, to_task = wire.accept_task(driver, SECRET)
    side["thread"].join(5)
    to_driver = side["value"]

    marker = tmp_path / "pwned"
    bomb = pickle.dumps(_Touch(marker))
    driver.sendall(struct.pack("!Q", len(bomb)) + b"\1" * 64 + bomb)  # a forged frame
    with pytest.raises(wire.AuthenticationFailed, match="length did not verify"):
        to_driver.recv()
    assert not marker.exists()

    driver, task = _pair()  # a frame whose length verifies, its body swapped for the pickle
    side = _in_thread(wire.connect_driver, task, SECRET, (0, 0, 1))
    _hello, to_task = wire.accept_task(driver, SECRET)
    side["thread"].join(5)
    to_driver = side["value"]
    frame = to_task.frame(b"\0" * len(bomb))
    driver.sendall(frame[: -len(bomb)] + bomb)
    with pytest.raises(wire.AuthenticationFailed, match="MAC did not verify"):
        to_driver.recv()
    assert not marker.exists()

    driver, task = _pair()
    side = _in_thread(wire.connect_driver, task, SECRET, (0, 0, 1))
    _hello, to_task = wire.accept_task(driver, SECRET)
    side["thread"].join(5)
    to_driver = side["value"]
    frame = to_task.frame(pickle.dumps(("step", 1)))
    driver.sendall(frame)
    assert to_driver.recv() == ("step", 1)
    driver.sendall(frame)  # the same bytes again: the sequence number no longer matches
    with pytest.raises(wire.AuthenticationFailed, match="length did not verify"):
        to_driver.recv()


def _channels() -> tuple[wire.Channel, wire.Channel, socket.socket]:
    """(driver's channel, task's channel, the driver's raw socket) after a real handshake."""
    driver, task = _pair()
    side = _in_thread(wire.connect_driver, task, SECRET, (0, 0, 1))
    _hello, to_task = wire.accept_task(driver, SECRET)
    side["thread"].join(5)
    return to_task, side["value"], driver


def test_an_absurd_frame_length_is_refused() -> None:
    to_task, to_driver, driver = _channels()
    length = struct.pack("!Q", 1 << 40)
    seq = struct.pack("!Q", 0)
    tag = wire._mac(to_task._key, b"D", b"L", seq, length)  # even with a valid MAC, from the key
    driver.sendall(length + tag + b"\0" * 32)
    with pytest.raises(wire.ProtocolError, match=r"frame of 1099511627776 bytes announced, over the"):
        to_driver.recv()


@pytest.mark.parametrize("size", [1 << 28, (1 << 36) - 1, (1 << 64) - 1])
def test_a_forged_frame_length_allocates_nothing_and_waits_for_nothing(size: int) -> None:
    """Without the key, a peer that announces a huge frame gets no buffer of that size: the length is
    refused at once, before the body is read (the old code allocated it, then waited for the bytes)."""
    _to_task, to_driver, driver = _channels()
    driver.sendall(struct.pack("!Q", size) + os.urandom(64))
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(wire.AuthenticationFailed, match="length did not verify; nothing was read"):
            to_driver.recv()
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    assert time.monotonic() - started < 1.0


def test_a_message_that_cannot_be_loaded_is_a_connection_error_of_that_peer() -> None:
    to_task, to_driver, _driver = _channels()
    to_task.send_pickled(b"not a pickle")  # authenticated, but not a message
    with pytest.raises(wire.ProtocolError, match="could not be loaded"):
        to_driver.recv()
    assert issubclass(wire.ProtocolError, OSError)  # callers that catch OSError lose this peer only


def test_the_handshake_refuses_a_peer_at_its_first_wrong_byte() -> None:
    handshake = wire.DriverHandshake(SECRET)
    assert not handshake.feed(wire.MAGIC[:3])
    with pytest.raises(wire.AuthenticationFailed, match="does not speak the resident protocol"):
        handshake.feed(b"\xff")
    handshake = wire.DriverHandshake(SECRET)  # an old-style length prefix is refused on its first byte
    with pytest.raises(wire.AuthenticationFailed, match="does not speak the resident protocol"):
        handshake.feed(struct.pack("!Q", 1 << 40)[:1])
    with pytest.raises(wire.AuthenticationFailed, match="more than the handshake"):
        wire.DriverHandshake(SECRET).feed(b"\0" * (wire.TASK_REPLY + 1))


def test_a_task_authenticating_while_the_listener_closes_is_hung_up_on() -> None:
    """A channel that authenticates while the driver closes its listener is either taken before the
    close or closed by it: never left open in the queue (the task would wait on it for good)."""
    from mixle_spark.parallel.backends.spark._resident import _Listener

    server = socket.create_server(("127.0.0.1", 0))
    listener = _Listener(server, SECRET)
    queueing, go_on = threading.Event(), threading.Event()

    class SlowQueue(queue.Queue):  # the handshake thread is paused as it queues its channel
        def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
            queueing.set()
            go_on.wait(5)
            super().put(item, block, timeout)

    listener.accepted = SlowQueue()
    task = socket.create_connection(server.getsockname(), timeout=5)
    _OPEN.append(task)
    wire.connect_driver(task, SECRET, (0, 0, 1))
    assert queueing.wait(5)
    closing = _in_thread(listener.close)
    time.sleep(0.2)  # close() runs while the channel is being queued
    go_on.set()
    closing["thread"].join(10)
    assert "error" not in closing and not closing["thread"].is_alive()
    assert task.recv(1) == b""  # the driver's end is closed: the task sees end of stream


# -- the driver's listener: nobody but a task gets in, and nobody keeps a task out -------------------


def _listener(**options: Any) -> tuple[Any, tuple[str, int]]:
    from mixle_spark.parallel.backends.spark._resident import _Listener

    server = socket.create_server(("127.0.0.1", 0), backlog=socket.SOMAXCONN)
    return _Listener(server, SECRET, **options), server.getsockname()


def _connect(address: tuple[str, int], payload: bytes = b"") -> socket.socket:
    sock = socket.create_connection(address, timeout=5)
    _OPEN.append(sock)
    if payload:
        sock.sendall(payload)
    return sock


def _hung_up_within(sock: socket.socket, seconds: float) -> bool:
    """True when the driver closes ``sock`` within ``seconds`` (end of stream or reset)."""
    deadline = time.monotonic() + seconds
    try:
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 1e-3))
            if not sock.recv(1 << 16):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _task_gets_in(listener: Any, address: tuple[str, int], part: int = 0) -> bool:
    task = _connect(address)
    wire.connect_driver(task, SECRET, (part, 0, os.getpid()))
    hello, channel = listener.accepted.get(timeout=2)
    channel.close()
    return bool(hello.partition == part)


def test_the_listener_hangs_up_on_a_forged_length_or_garbage_at_once_and_keeps_serving() -> None:
    listener, address = _listener()
    try:
        tracemalloc.start()
        forged = _connect(address, struct.pack("!Q", (1 << 36) - 1))  # a huge "length" for a handshake
        garbage = _connect(address, os.urandom(4096))
        assert _hung_up_within(forged, 1.0) and _hung_up_within(garbage, 1.0)
        _now, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 1 << 20, peak
        assert _task_gets_in(listener, address)
    finally:
        tracemalloc.stop()
        listener.close()


def test_idle_peers_neither_keep_a_task_out_nor_stay_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "HANDSHAKE_TIMEOUT", 0.5)
    listener, address = _listener()
    try:
        idle = [_connect(address) for _ in range(200)]
        started = time.monotonic()
        assert _task_gets_in(listener, address)
        assert time.monotonic() - started < 1.0
        assert all(_hung_up_within(sock, 3.0) for sock in idle)  # each closed at its deadline
    finally:
        listener.close()


def test_a_full_listener_closes_its_oldest_pending_peer_to_make_room() -> None:
    listener, address = _listener(capacity=4, timeout=30.0)
    try:
        idle = [_connect(address) for _ in range(10)]
        assert _task_gets_in(listener, address)
        assert all(_hung_up_within(sock, 1.0) for sock in idle[:7])  # 6 for the idle, 1 for the task
        assert not any(_hung_up_within(sock, 0.2) for sock in idle[7:])
        assert listener.refused.total == 7
    finally:
        listener.close()


def test_a_peer_that_breaks_the_listener_in_any_way_loses_only_its_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = wire.DriverHandshake.feed
    failures = [MemoryError(), ValueError("bad"), struct.error("unpack")]

    def feed(self: wire.DriverHandshake, data: bytes) -> bool:
        if data.startswith(b"BOOM"):
            raise failures.pop(0)
        return original(self, data)

    monkeypatch.setattr(wire.DriverHandshake, "feed", feed)
    listener, address = _listener()
    try:
        peers = [_connect(address, b"BOOM") for _ in range(3)]
        assert all(_hung_up_within(sock, 1.0) for sock in peers) and not failures
        assert _task_gets_in(listener, address, part=1)
        assert sorted(listener.refused.reasons) == ["MemoryError", "ValueError: bad", "error: unpack"]
    finally:
        listener.close()


def test_refused_peers_are_reported_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="mixle_spark.parallel.backends.spark")
    listener, address = _listener(timeout=0.3)
    peers = [_connect(address, os.urandom(100)) for _ in range(5)]
    peers += [_connect(address) for _ in range(3)]
    wrong = _connect(address)
    with pytest.raises(ConnectionError):
        wire.connect_driver(wrong, b"w" * 32, (0, 0, 1))
    assert all(_hung_up_within(sock, 2.0) for sock in peers)
    listener.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    line = warnings[0]
    assert line.startswith(f"resident E-steps: refused 9 connections to the resident port {address[1]}")
    assert "the peer does not speak the resident protocol: 5" in line
    assert "did not complete the handshake in 0.3 s (0 of 96 bytes): 3" in line
    assert "the peer did not prove it holds the fit's secret: 1" in line
    assert "from 127.0.0.1 (9)" in line
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert sum("refused a connection from 127.0.0.1:" in m for m in debug) == 9


class _Session:
    """As much of a SparkSession as listen_addresses reads."""

    def __init__(self, master: str, **conf: str) -> None:
        self.sparkContext = type("Context", (), {"master": master})()
        self.conf = type(
            "Conf", (), {"get": staticmethod(lambda key, default=None: conf.get(key, default))}
        )()


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,2]", "local-cluster[2,1,1024]"])
def test_a_local_master_listens_on_loopback_whatever_the_driver_host(master: str) -> None:
    from mixle_spark.parallel.backends.spark._resident_listener import listen_addresses

    session = _Session(master, **{"spark.driver.host": "node-7.example.com"})
    assert listen_addresses(session) == ("127.0.0.1", "127.0.0.1")


def test_a_cluster_master_listens_where_the_executors_reach_the_driver() -> None:
    from mixle_spark.parallel.backends.spark._resident_listener import listen_addresses

    host = {"spark.driver.host": "10.0.0.5"}
    assert listen_addresses(_Session("spark://m:7077", **host)) == ("10.0.0.5", "10.0.0.5")
    both = {**host, "spark.driver.bindAddress": "0.0.0.0"}  # a container: bind all, advertise the host
    assert listen_addresses(_Session("yarn", **both)) == ("0.0.0.0", "10.0.0.5")
    local = {"spark.driver.host": "localhost"}
    assert listen_addresses(_Session("k8s://https://api:6443", **local)) == ("127.0.0.1", "127.0.0.1")
