"""The engines a job reads Parquet through besides Spark (``--backend dask`` / ``--backend ray``):
the job's cluster or runtime (started locally, or the one at ``--dask-scheduler`` /
``--ray-address``), the Parquet input as that engine's frame, and ``stop()`` when the job ends."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from mixle_spark.cli._runtimes import RayRuntime, connect_dask, start_local_dask, start_local_ray

__all__ = [
    "ENGINE_BACKENDS",
    "add_engine_addresses",
    "check_engine_addresses",
    "engine_error",
    "open_engine_input",
    "parquet_input",
]

ENGINE_BACKENDS = ("dask", "ray")
_ADDRESSES = (("dask_scheduler", "dask"), ("ray_address", "ray"))


def add_engine_addresses(group: Any) -> None:
    """``--dask-scheduler`` and ``--ray-address`` on ``group`` (an argparse parser or group)."""
    group.add_argument(
        "--dask-scheduler",
        metavar="ADDRESS",
        help="with --backend dask: the scheduler address, tls://... with dask's distributed.comm.tls "
        "settings (docs/security.md) (default: a local cluster of --num-workers processes, TLS on loopback)",
    )
    group.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="with --backend ray: the cluster's address, its token from RAY_AUTH_TOKEN[_PATH] or "
        "~/.ray/auth_token (default: a local runtime of --num-workers CPUs with a token of its own)",
    )


def check_engine_addresses(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error (exit 2) for an engine's address given with another backend."""
    for flag, owner in _ADDRESSES:
        if getattr(args, flag, None) is not None and args.backend != owner:
            parser.error(f"--{flag.replace('_', '-')} only applies to --backend {owner}")


def engine_error(err: BaseException) -> BaseException:
    """The error a task raised, out of the engine's wrapper (Ray's ``RayTaskError`` keeps it as
    ``cause``), so the job's one line names the value and the row, not the task."""
    while isinstance(getattr(err, "cause", None), BaseException):
        err = err.cause  # type: ignore[attr-defined]
    return err


def parquet_input(args: argparse.Namespace) -> Path:
    """``args.input`` as a path the ``dask`` and ``ray`` backends read: Parquet (a file or a
    directory of files); FileNotFoundError (exit 2) for a missing path or another format."""
    path = Path(args.input)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {args.input!r}")
    if path.suffix.lower() in (".csv", ".json", ".jsonl", ".ndjson") or (path / "_delta_log").is_dir():
        raise FileNotFoundError(
            f"{args.input}: --backend {args.backend} reads Parquet "
            "(--backend spark reads CSV, JSON and Delta too)"
        )
    return path


def open_engine_input(args: argparse.Namespace, extra: dict[str, Any]) -> tuple[Any, Any, bool]:
    """``(frame of the Parquet input, the job's cluster or runtime, True)`` for ``--backend dask``
    or ``ray``; the summary's ``extra[backend]`` describes the cluster. ``stop()`` ends it."""
    return (open_dask_input if args.backend == "dask" else open_ray_input)(args, extra)


def open_dask_input(args: argparse.Namespace, extra: dict[str, Any]) -> tuple[Any, Any, bool]:
    """``(Dask DataFrame of the Parquet input, the job's cluster, True)``: the cluster at
    ``--dask-scheduler``, else a local one (``--num-workers`` worker processes, one thread each)."""
    from mixle_spark.parallel.backends.dask import require_dask

    dd, _ = require_dask()
    path = parquet_input(args)
    if args.dask_scheduler:
        session = connect_dask(args.dask_scheduler)
    else:
        session = start_local_dask(
            args.num_workers or os.cpu_count() or 1, silence_logs=10 if args.verbose else 50
        )
    client = session.client
    try:
        extra["dask"] = {"scheduler": client.scheduler.address, "workers": len(client.nthreads())}
        # Arrow-backed columns: list and struct columns keep their types (scores write back as read)
        return dd.read_parquet(str(path), dtype_backend="pyarrow"), session, True
    except BaseException:
        session.stop()
        raise


def open_ray_input(args: argparse.Namespace, extra: dict[str, Any]) -> tuple[Any, Any, bool]:
    """``(Ray Dataset of the Parquet input, the job's runtime, True)``: the cluster at
    ``--ray-address``, else a local runtime of ``--num-workers`` CPUs (default: this machine's)."""
    from mixle_spark.parallel.backends.ray import require_ray

    ray = require_ray()
    path = parquet_input(args)
    if ray.is_initialized():  # a runtime this process already uses is not the job's to stop
        raise RuntimeError("a Ray runtime is already initialised in this process; run the job on its own")
    if not args.verbose:  # Ray's notices at start ("Token authentication is enabled ...")
        logging.getLogger("ray").setLevel(logging.ERROR)
    quiet = {"include_dashboard": False, "log_to_driver": bool(args.verbose), "configure_logging": False}
    if args.ray_address:  # its token: Ray's own RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH / ~/.ray/auth_token
        ray.init(address=args.ray_address, **quiet)
        runtime = RayRuntime(ray)
    else:
        runtime = start_local_ray(ray, args.num_workers or os.cpu_count() or 1, **quiet)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = bool(args.verbose)
        if not args.verbose:  # Ray Data's own progress lines ("Data sink Parquet finished ...")
            logging.getLogger("ray.data").setLevel(logging.CRITICAL)  # and its copies of our errors
        resources = ray.cluster_resources()
        extra["ray"] = {
            "address": args.ray_address or "local",
            "nodes": sum(1 for node in ray.nodes() if node.get("Alive")),
            "cpus": int(resources.get("CPU", 0)),
        }
        return ray.data.read_parquet(str(path)), runtime, True
    except BaseException:
        runtime.stop()
        raise
