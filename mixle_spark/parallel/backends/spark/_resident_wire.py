"""The wire protocol between the driver and its resident Spark tasks: authenticate, then talk.

The driver listens on a TCP port that other processes may reach, so nothing a peer sends is
deserialized, and no buffer is sized from what it sends, before the peer has proved it holds the fit's
secret (32 random bytes that reach the tasks inside the task closure, i.e. through Spark's own task
channel). The handshake is a fixed-size, pickle-free mutual challenge-response with HMAC-SHA256:

1. driver -> task: ``MAGIC || nonce_d`` (40 bytes)
2. task -> driver: ``MAGIC || hello || nonce_t || HMAC(secret, "task" || nonce_d || hello || nonce_t)``
   (96 bytes; ``hello`` = partition id, attempt number, pid as three signed 64-bit integers)
3. driver -> task: ``HMAC(secret, "driver" || nonce_t || nonce_d)`` (32 bytes)

Both MACs are checked with :func:`hmac.compare_digest`. The driver's side is a state machine fed with
whatever bytes arrive (:class:`DriverHandshake`), so one thread can run many handshakes at once and
refuse a peer at its first byte that is not ``MAGIC``. Afterwards every message is a frame
``length (8) || length MAC (32) || body MAC (32) || body``, both MACs under a per-connection key
``HMAC(secret, "session" || nonce_d || nonce_t)`` and covering the direction and a sequence number.
The length is verified (and bounded by :data:`MAX_FRAME`) before the body's buffer is allocated, and
the body before it is unpickled: a forged, replayed or reordered frame is refused, and a forged length
costs nothing. The channel authenticates, it does not encrypt: models and sufficient statistics cross
it in the clear.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
import socket
import struct
import time
from typing import Any

__all__ = [
    "CONNECT_TIMEOUT",
    "HANDSHAKE_TIMEOUT",
    "MAX_FRAME",
    "AuthenticationFailed",
    "Channel",
    "DriverHandshake",
    "Hello",
    "ProtocolError",
    "accept_task",
    "connect_driver",
    "new_secret",
]

MAGIC = b"MIXLRES2"  # 2: frames carry an authenticated length
_NONCE = 32
_MAC = 32
_HELLO = struct.Struct("!qqq")
_LENGTH = struct.Struct("!Q")
_SEQ = struct.Struct("!Q")
_GREETING = len(MAGIC) + _NONCE
TASK_REPLY = len(MAGIC) + _HELLO.size + _NONCE + _MAC  # bytes of the task's handshake reply
_HEADER = _LENGTH.size + 2 * _MAC
_CHUNK = 1 << 22

MAX_FRAME = 1 << 34
"""Largest message body in bytes (16 GiB): a longer authenticated length is refused, not allocated."""
HANDSHAKE_TIMEOUT = 2.0
"""Seconds a connected peer has to send its whole handshake reply (96 bytes): a task sends it as soon
as it reads the driver's challenge, so only a peer that is not a task needs longer."""
CONNECT_TIMEOUT = 10.0
"""Seconds a task waits to connect to the driver and for each step of the handshake."""


class ProtocolError(ConnectionError):
    """A peer broke the protocol (an oversized or undecodable message): that connection is unusable."""


class AuthenticationFailed(ProtocolError):
    """A peer did not prove it holds the fit's secret (or a frame's MAC did not verify)."""


class Hello(tuple[int, int, int]):
    """What a task says about itself in the handshake: (partition id, attempt number, pid)."""

    __slots__ = ()

    @property
    def partition(self) -> int:
        return self[0]

    @property
    def attempt(self) -> int:
        return self[1]

    @property
    def pid(self) -> int:
        return self[2]


def new_secret() -> bytes:
    """A fresh per-fit secret."""
    return secrets.token_bytes(32)


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes from ``sock`` (ConnectionError when the peer closes first).

    The buffer is allocated at once, so ``size`` must be fixed by the protocol or an authenticated
    length, never a number the peer chose before proving the secret.
    """
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], min(size - got, _CHUNK))
        if n == 0:
            raise ConnectionError(f"connection closed after {got} of {size} bytes")
        got += n
    return bytes(buf)


class Channel:
    """An authenticated, framed, pickling connection (one per task, after the handshake).

    :meth:`recv` raises only :class:`OSError` subclasses, whatever the peer sends, so a caller that
    catches OSError loses that one connection and nothing else.
    """

    def __init__(self, sock: socket.socket, key: bytes, outgoing: bytes, incoming: bytes) -> None:
        self.sock = sock
        self._key = key
        self._out, self._in = outgoing, incoming
        self._sent = self._received = 0

    def frame(self, body: bytes) -> bytes:
        """A pickled message as the next outgoing frame (sequence numbers advance: send it, once)."""
        if len(body) > MAX_FRAME:
            raise ProtocolError(f"a message of {len(body)} bytes is over the {MAX_FRAME}-byte limit")
        seq = _SEQ.pack(self._sent)
        length = _LENGTH.pack(len(body))
        self._sent += 1
        return (
            length
            + _mac(self._key, self._out, b"L", seq, length)
            + _mac(self._key, self._out, b"B", seq, body)
            + body
        )

    def send_pickled(self, body: bytes) -> None:
        """Send a message pickled by the caller (once for many channels, or with cloudpickle)."""
        self.sock.sendall(self.frame(body))

    def send(self, obj: Any) -> None:
        self.send_pickled(pickle.dumps(obj, protocol=5))

    def recv(self) -> Any:
        """The next message. The length is verified and bounded before anything is allocated for the
        body, and the body before it is unpickled (AuthenticationFailed, ProtocolError otherwise)."""
        header = recv_exact(self.sock, _HEADER)
        length, length_tag, body_tag = header[: _LENGTH.size], header[_LENGTH.size : -_MAC], header[-_MAC:]
        seq = _SEQ.pack(self._received)
        if not hmac.compare_digest(length_tag, _mac(self._key, self._in, b"L", seq, length)):
            raise AuthenticationFailed("a frame's length did not verify; nothing was read or allocated")
        (size,) = _LENGTH.unpack(length)
        if size > MAX_FRAME:
            raise ProtocolError(f"frame of {size} bytes announced, over the {MAX_FRAME}-byte limit")
        try:
            body = recv_exact(self.sock, size)
        except MemoryError:
            raise ProtocolError(f"a frame of {size} bytes does not fit in memory") from None
        if not hmac.compare_digest(body_tag, _mac(self._key, self._in, b"B", seq, body)):
            raise AuthenticationFailed("a frame's MAC did not verify; nothing was deserialized")
        self._received += 1
        try:
            return pickle.loads(body)
        except Exception as err:  # authenticated, yet not a message this side can load
            raise ProtocolError(
                f"an authenticated message could not be loaded ({type(err).__name__}: {err})"
            ) from err

    def close(self) -> None:
        self.sock.close()


class DriverHandshake:
    """The driver's side of one handshake, fed with whatever bytes arrive (no I/O of its own).

    Send :attr:`greeting`, then :meth:`feed` the peer's bytes, reading at most :attr:`missing` at a
    time, until it returns True; then :meth:`finish`. A peer whose bytes stop matching ``MAGIC`` is
    refused at once, not after the deadline.
    """

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._nonce = os.urandom(_NONCE)
        self.greeting = MAGIC + self._nonce
        self._reply = bytearray()

    @property
    def received(self) -> int:
        return len(self._reply)

    @property
    def missing(self) -> int:
        """Bytes of the peer's reply still to come (read no more: nothing after it is the handshake's)."""
        return TASK_REPLY - len(self._reply)

    def feed(self, data: bytes) -> bool:
        """Take the next bytes of the reply; True once it is complete. AuthenticationFailed as soon as
        the bytes are not the protocol's."""
        if len(data) > self.missing:
            raise AuthenticationFailed("the peer sent more than the handshake")
        start = len(self._reply)
        self._reply += data
        end = min(len(self._reply), len(MAGIC))
        if start < end and self._reply[start:end] != MAGIC[start:end]:
            raise AuthenticationFailed("the peer does not speak the resident protocol")
        return self.missing == 0

    def finish(self) -> tuple[Hello, bytes, bytes]:
        """(the task's hello, the proof to send it, the session key) once the reply is complete;
        AuthenticationFailed when the peer does not hold the secret."""
        if self.missing:
            raise AuthenticationFailed(f"the handshake is {self.missing} bytes short")
        reply = bytes(self._reply)
        at = len(MAGIC)
        hello_bytes = reply[at : at + _HELLO.size]
        nonce_t = reply[at + _HELLO.size : at + _HELLO.size + _NONCE]
        tag = reply[at + _HELLO.size + _NONCE :]
        if not hmac.compare_digest(tag, _mac(self._secret, b"task", self._nonce, hello_bytes, nonce_t)):
            raise AuthenticationFailed("the peer did not prove it holds the fit's secret")
        proof = _mac(self._secret, b"driver", nonce_t, self._nonce)
        key = _mac(self._secret, b"session", self._nonce, nonce_t)
        return Hello(_HELLO.unpack(hello_bytes)), proof, key


def accept_task(sock: socket.socket, secret: bytes, timeout: float | None = None) -> tuple[Hello, Channel]:
    """Driver side of the handshake on one blocking socket (closed by the caller on failure); the
    driver's listener runs :class:`DriverHandshake` for many sockets at once instead.

    The peer has ``timeout`` seconds (default :data:`HANDSHAKE_TIMEOUT`) for its whole reply. Raises
    AuthenticationFailed for a wrong secret or malformed reply, TimeoutError / ConnectionError for a
    silent or vanished peer; nothing the peer sent is deserialized unless it authenticated.
    """
    deadline = time.monotonic() + (HANDSHAKE_TIMEOUT if timeout is None else timeout)
    handshake = DriverHandshake(secret)
    sock.settimeout(max(deadline - time.monotonic(), 1e-3))
    sock.sendall(handshake.greeting)
    done = False
    while not done:
        left = deadline - time.monotonic()
        if left <= 0:  # a peer trickling its bytes does not extend its time
            raise TimeoutError(f"timed out after {handshake.received} of {TASK_REPLY} bytes")
        sock.settimeout(left)
        data = sock.recv(handshake.missing)
        if not data:
            raise ConnectionError(f"connection closed after {handshake.received} of {TASK_REPLY} bytes")
        done = handshake.feed(data)
    hello, proof, key = handshake.finish()
    sock.sendall(proof)
    return hello, Channel(sock, key, b"D", b"T")


def connect_driver(sock: socket.socket, secret: bytes, hello: tuple[int, int, int]) -> Channel:
    """Task side of the handshake on a socket connected to the driver; verifies the driver too."""
    greeting = recv_exact(sock, _GREETING)
    if greeting[: len(MAGIC)] != MAGIC:
        raise AuthenticationFailed("the driver address answered with something else")
    nonce_d = greeting[len(MAGIC) :]
    nonce_t = os.urandom(_NONCE)
    hello_bytes = _HELLO.pack(*hello)
    sock.sendall(MAGIC + hello_bytes + nonce_t + _mac(secret, b"task", nonce_d, hello_bytes, nonce_t))
    proof = recv_exact(sock, _MAC)
    if not hmac.compare_digest(proof, _mac(secret, b"driver", nonce_t, nonce_d)):
        raise AuthenticationFailed("the driver did not prove it holds the fit's secret")
    key = _mac(secret, b"session", nonce_d, nonce_t)
    return Channel(sock, key, b"T", b"D")
