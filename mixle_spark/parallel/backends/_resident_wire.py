"""The wire protocol between the driver and its resident Spark tasks: authenticate, then talk.

The driver listens on a TCP port that anyone on the cluster's network can reach, so nothing a peer
sends is deserialized before the peer has proved it holds the fit's secret (32 random bytes that reach
the tasks inside the task closure, i.e. through Spark's own task channel). The handshake is a fixed-size,
pickle-free mutual challenge-response with HMAC-SHA256:

1. driver -> task: ``MAGIC || nonce_d`` (40 bytes)
2. task -> driver: ``MAGIC || hello || nonce_t || HMAC(secret, "task" || nonce_d || hello || nonce_t)``
   (96 bytes; ``hello`` = partition id, attempt number, pid as three signed 64-bit integers)
3. driver -> task: ``HMAC(secret, "driver" || nonce_t || nonce_d)`` (32 bytes)

Both MACs are checked with :func:`hmac.compare_digest`. Afterwards every message is a frame
``length (8 bytes) || MAC (32) || body`` where the MAC covers the direction, a sequence number and the
body under a per-connection key ``HMAC(secret, "session" || nonce_d || nonce_t)``; a frame is
unpickled only after its MAC verifies, so a forged, replayed or reordered frame is refused too. The
channel authenticates, it does not encrypt: models and sufficient statistics cross it in the clear.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
import socket
import struct
from typing import Any

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "AuthenticationFailed",
    "Channel",
    "Hello",
    "accept_task",
    "connect_driver",
    "new_secret",
]

MAGIC = b"MIXLRES1"
_NONCE = 32
_MAC = 32
_HELLO = struct.Struct("!qqq")
_LENGTH = struct.Struct("!Q")
_SEQ = struct.Struct("!Q")
_TASK_REPLY = len(MAGIC) + _HELLO.size + _NONCE + _MAC
_MAX_FRAME = 1 << 36  # 64 GiB: larger lengths can only come from a corrupted stream

HANDSHAKE_TIMEOUT = 10.0
"""Seconds a connecting peer has to complete the handshake before the driver closes it."""


class AuthenticationFailed(ConnectionError):
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
    """Exactly ``size`` bytes from ``sock`` (ConnectionError when the peer closes first)."""
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], min(size - got, 1 << 22))
        if n == 0:
            raise ConnectionError(f"connection closed after {got} of {size} bytes")
        got += n
    return bytes(buf)


class Channel:
    """An authenticated, framed, pickling connection (one per task, after the handshake)."""

    def __init__(self, sock: socket.socket, key: bytes, outgoing: bytes, incoming: bytes) -> None:
        self.sock = sock
        self._key = key
        self._out, self._in = outgoing, incoming
        self._sent = self._received = 0

    def frame(self, body: bytes) -> bytes:
        """A pickled message as the next outgoing frame (sequence numbers advance: send it, once)."""
        tag = _mac(self._key, self._out, _SEQ.pack(self._sent), body)
        self._sent += 1
        return _LENGTH.pack(len(body)) + tag + body

    def send_pickled(self, body: bytes) -> None:
        """Send a message pickled by the caller (once for many channels, or with cloudpickle)."""
        self.sock.sendall(self.frame(body))

    def send(self, obj: Any) -> None:
        self.send_pickled(pickle.dumps(obj, protocol=5))

    def recv(self) -> Any:
        """The next message; AuthenticationFailed (before any unpickling) when its MAC is wrong."""
        (size,) = _LENGTH.unpack(recv_exact(self.sock, _LENGTH.size))
        if size > _MAX_FRAME:
            raise AuthenticationFailed(f"frame of {size} bytes announced: the stream is corrupt")
        tag = recv_exact(self.sock, _MAC)
        body = recv_exact(self.sock, size)
        want = _mac(self._key, self._in, _SEQ.pack(self._received), body)
        if not hmac.compare_digest(tag, want):
            raise AuthenticationFailed("a frame's MAC did not verify; nothing was deserialized")
        self._received += 1
        return pickle.loads(body)

    def close(self) -> None:
        self.sock.close()


def accept_task(
    sock: socket.socket, secret: bytes, timeout: float = HANDSHAKE_TIMEOUT
) -> tuple[Hello, Channel]:
    """Driver side of the handshake on a freshly accepted socket (closed by the caller on failure).

    Raises AuthenticationFailed for a wrong secret or malformed reply, TimeoutError / ConnectionError
    for a silent or vanished peer; nothing the peer sent is deserialized unless it authenticated.
    """
    sock.settimeout(timeout)
    nonce_d = os.urandom(_NONCE)
    sock.sendall(MAGIC + nonce_d)
    reply = recv_exact(sock, _TASK_REPLY)
    if not hmac.compare_digest(reply[: len(MAGIC)], MAGIC):
        raise AuthenticationFailed("the peer does not speak the resident protocol")
    at = len(MAGIC)
    hello_bytes = reply[at : at + _HELLO.size]
    nonce_t = reply[at + _HELLO.size : at + _HELLO.size + _NONCE]
    tag = reply[at + _HELLO.size + _NONCE :]
    if not hmac.compare_digest(tag, _mac(secret, b"task", nonce_d, hello_bytes, nonce_t)):
        raise AuthenticationFailed("the peer did not prove it holds the fit's secret")
    sock.sendall(_mac(secret, b"driver", nonce_t, nonce_d))
    key = _mac(secret, b"session", nonce_d, nonce_t)
    return Hello(_HELLO.unpack(hello_bytes)), Channel(sock, key, b"D", b"T")


def connect_driver(sock: socket.socket, secret: bytes, hello: tuple[int, int, int]) -> Channel:
    """Task side of the handshake on a socket connected to the driver; verifies the driver too."""
    greeting = recv_exact(sock, len(MAGIC) + _NONCE)
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
