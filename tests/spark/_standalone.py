"""A Spark standalone cluster on localhost for tests: a master and 1-core workers, each a JVM of its
own (started from pyspark's ``bin/spark-class``), each worker's executors in further JVMs."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import pyspark


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (pyspark's daemon puts itself in a process group of its own)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending += children.get(pid, [])
    return tree


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StandaloneCluster:
    """``with StandaloneCluster(tmp, workers=2) as cluster: cluster.url``; every process is killed with
    its process group on exit."""

    def __init__(self, root: Path, workers: int = 2, worker_memory: str = "2g") -> None:
        self.root = root
        self.workers = workers
        self.worker_memory = worker_memory
        self.url = ""
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: list[BinaryIO] = []
        spark_home = Path(pyspark.__file__).parent
        self.spark_class = str(spark_home / "bin" / "spark-class")
        self.env = {
            **os.environ,
            "SPARK_HOME": str(spark_home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_CONF_DIR": str(root / "conf"),
        }

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "wb")
        self.logs.append(log)
        proc = subprocess.Popen(
            [self.spark_class, *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, killed with its children on exit
        )
        self.processes.append(proc)
        return proc

    def _wait_for(self, name: str, pattern: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        path = self.root / f"{name}.log"
        while time.monotonic() < deadline:
            text = path.read_text(errors="replace") if path.exists() else ""
            if len(re.findall(pattern, text)) >= count:
                return
            if any(p.poll() is not None for p in self.processes):
                break
            time.sleep(0.2)
        raise RuntimeError(f"standalone cluster: {pattern!r} not seen in {path}:\n{path.read_text()[-3000:]}")

    def __enter__(self) -> StandaloneCluster:
        (self.root / "conf").mkdir(parents=True, exist_ok=True)
        port = _free_port()
        self.url = f"spark://127.0.0.1:{port}"
        master = ("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port))
        self._start("master", *master, "--webui-port", "0")
        self._wait_for("master", r"I have been elected leader", 1, 60)
        for i in range(self.workers):
            work = self.root / f"worker{i}"
            work.mkdir(exist_ok=True)
            self._start(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                self.worker_memory,
                "--webui-port",
                "0",
                "--work-dir",
                str(work),
            )
        self._wait_for("master", r"Registering worker", self.workers, 60)
        return self

    def worker_pid(self, i: int) -> int:
        """The process of worker ``i`` (its executors and their Python workers are its descendants)."""
        return self.processes[1 + i].pid

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        for proc in reversed(self.processes):
            for pid in process_tree(proc.pid) if proc.poll() is None else ():
                with contextlib.suppress(ProcessLookupError):  # already gone
                    os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for log in self.logs:
            log.close()
