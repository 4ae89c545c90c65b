"""A directory of model versions, each published atomically: what a stream of updates writes.

Version ``N`` is the file ``model-v{N:09d}.json``: the model file :func:`~mixle_spark.spec.save_model`
writes (with its statistics, which record the last micro-batch folded in), readable by
:func:`~mixle_spark.spec.load_model`. A version is written under a temporary name and renamed into
place, so a reader never sees a part of one; a version is never replaced (publishing one that exists
is an error: two writers share the directory). Nothing else in the directory is read, replaced or
deleted, and a local directory named through a symbolic link is refused, as for checkpoints. Local
paths (Databricks ``/dbfs/...``, ``file:`` URIs) and any URI :mod:`pyarrow.fs` understands
(``s3://``, ``gs://``, ...) work.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any

from mixle_spark.em._checkpoint_store import _open_files
from mixle_spark.errors import CheckpointStoreError, ModelFormatError, TooLargeError
from mixle_spark.spec import MAX_MODEL_BYTES, model_from_json, model_to_json
from mixle_spark.stats.base import Distribution

__all__ = ["ModelVersions"]

_NAME = re.compile(r"model-v(\d{9})\.json")


def version_name(version: int) -> str:
    return f"model-v{version:09d}.json"


class ModelVersions:
    """The model versions under ``directory`` (see the module docstring).

    >>> import tempfile
    >>> from mixle_spark.stats import GaussianDistribution
    >>> tmp = tempfile.TemporaryDirectory()
    >>> versions = ModelVersions(tmp.name)
    >>> versions.latest() is None
    True
    >>> versions.publish(GaussianDistribution(0.0, 1.0))
    1
    >>> versions.publish(GaussianDistribution(0.5, 1.0))
    2
    >>> version, model = versions.latest()
    >>> version, model.mu
    (2, 0.5)
    >>> tmp.cleanup()
    """

    def __init__(self, directory: str | os.PathLike[str], *, filesystem: Any = None) -> None:
        self.directory, self._files = _open_files(directory, filesystem)

    def __repr__(self) -> str:
        return f"ModelVersions({self.directory!r})"

    def versions(self) -> list[int]:
        """The versions present, oldest first."""
        found = (_NAME.fullmatch(name) for name in self._files.names())
        return sorted(int(m.group(1)) for m in found if m is not None)

    def path(self, version: int) -> str:
        return self._files.path(version_name(version))

    def load(self, version: int) -> Distribution:
        """Version ``version`` (a damaged file is an error naming it: the stream stops rather than
        go on from an older model and lose the batches since)."""
        name = version_name(version)
        where = self._files.path(name)
        data = self._files.read(name)
        if len(data) > MAX_MODEL_BYTES:
            raise TooLargeError(
                f"model version {where} is {len(data):,} bytes; the limit is {MAX_MODEL_BYTES:,}"
            )
        try:
            return model_from_json(data, f"model version {where}")
        except ModelFormatError as err:
            raise ModelFormatError(f"{err} (the stream's newest model: restore or remove it)") from None

    def latest(self) -> tuple[int, Distribution] | None:
        """``(version, model)`` of the newest version, or None when there is none."""
        present = self.versions()
        return None if not present else (present[-1], self.load(present[-1]))

    def publish(self, model: Distribution) -> int:
        """Write ``model`` as the next version atomically and return its number."""
        present = self.versions()
        version = (present[-1] if present else 0) + 1
        name = version_name(version)
        if name in self._files.names():  # pragma: no cover - a second writer between the two lists
            raise CheckpointStoreError(f"model version {self._files.path(name)} exists: two writers?")
        temp = f".tmp-model-v{version:09d}-{os.getpid()}-{uuid.uuid4().hex}.json"
        self._files.write_atomic(name, temp, (model_to_json(model, indent=None) + "\n").encode("utf-8"))
        return version
