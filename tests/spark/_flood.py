"""Peers that flood the driver's resident port, from their own process (as an attacker would be: its
sockets cost the driver's process no threads and no GIL), for tests/spark/test_resident_security.py.

    python _flood.py IDLE GARBAGE

Prints ``ready``, reads ``HOST PORT`` on stdin, connects IDLE peers that say nothing and GARBAGE
peers that each send 4 KiB of random bytes, prints ``open``; then reads a line and prints how many of
them the driver has hung up on (end of stream or reset) within 5 s, and exits.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys
import time


def main() -> None:
    idle, garbage = int(sys.argv[1]), int(sys.argv[2])
    print("ready", flush=True)
    host, port = sys.stdin.readline().split()
    peers = []
    for i in range(idle + garbage):
        sock = socket.create_connection((host, int(port)), timeout=30)
        if i >= idle:
            sock.sendall(os.urandom(4096))
        peers.append(sock)
    print("open", flush=True)
    sys.stdin.readline()
    selector = selectors.DefaultSelector()
    for sock in peers:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    closed, deadline = 0, time.monotonic() + 5.0
    while closed < len(peers) and time.monotonic() < deadline:
        for key, _events in selector.select(max(deadline - time.monotonic(), 0.0)):
            try:
                if key.fileobj.recv(1 << 16):  # type: ignore[union-attr]
                    continue  # the driver's challenge: keep reading until it hangs up
            except BlockingIOError:
                continue
            except ConnectionResetError:
                pass
            selector.unregister(key.fileobj)
            closed += 1
    print(closed, flush=True)


if __name__ == "__main__":
    main()
