"""A directory of model versions, each published once and never replaced: what a stream of updates writes.

Version ``N`` is the file ``model-v{N:09d}.json``: the model file :func:`~mixle_spark.spec.save_model`
writes (with its statistics, which record the last micro-batch folded in and the streaming query it
belongs to), readable by :func:`~mixle_spark.spec.load_model`.

Publishing is safe with several writers in one directory (an overlapping retry of a job, a second
stream): a version number is never handed to two writers and a version file is never replaced. A
version is written to a temporary file ``.tmp-model-v{N}-{HOST}-{PID}-{random}.json``, then claimed
under its final name with a hard link, which fails when another writer took that number first (the
next number is tried then); a reader sees a whole version or none. On a local filesystem without hard
links the final name is created exclusively and written in place (never replaced, but a reader may
see a part of it while it is written). Through :mod:`pyarrow.fs` (``s3://``, ``gs://``, ``hdfs://``,
...) there is no exclusive create: the name is checked before and read back after the write, and two
writers within moments of each other on an object store can still replace one another's version;
give such a directory one writer at a time.

Publishing also removes the temporary files of writers that were killed: only those named for this
host whose process no longer runs (never a live process's, never a link). Nothing else in the
directory is read, replaced or deleted, and a local directory named through a symbolic link is
refused, as for checkpoints. Local paths (Databricks ``/dbfs/...``, ``file:`` URIs) and any URI
:mod:`pyarrow.fs` understands work.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any

from mixle_spark._files import host_name, process_alive
from mixle_spark.em._store_files import open_files
from mixle_spark.errors import CheckpointStoreError, ModelFormatError, TooLargeError
from mixle_spark.spec import MAX_MODEL_BYTES, model_from_json, model_to_json
from mixle_spark.stats.base import Distribution

__all__ = ["ModelVersions"]

_NAMES = re.compile(r"^model-v(\d{9})\.json$", re.MULTILINE)  # over a listing joined by newlines
# a writer's temporary file: version, host ('-' replaced by '_'), process id, 32 random hex digits
_TEMP_NAME = re.compile(r"\.tmp-model-v\d{9}-([^-]+)-(\d+)-[0-9a-f]{32}\.json")


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
    >>> versions.publish(GaussianDistribution(0.5, 1.0), after=1)
    2
    >>> version, model = versions.latest()
    >>> version, model.mu
    (2, 0.5)
    >>> tmp.cleanup()
    """

    def __init__(self, directory: str | os.PathLike[str], *, filesystem: Any = None) -> None:
        self.directory, self._files = open_files(directory, filesystem)

    def __repr__(self) -> str:
        return f"ModelVersions({self.directory!r})"

    def versions(self) -> list[int]:
        """The versions present, oldest first."""
        return _versions(self._files.names())

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

    def publish(self, model: Distribution, *, after: int | None = None) -> int:
        """Write ``model`` as a new version and return its number.

        Parameters
        ----------
        model : Distribution
            The model (with its statistics, if it has them).
        after : int, optional
            The version ``model`` was derived from (0: none): it is published as ``after + 1``, and
            when another writer has taken that number meanwhile a
            :class:`~mixle_spark.errors.CheckpointStoreError` says so (publishing it later would
            drop that writer's rows from the line of versions). Default: the next free number,
            whatever other writers publish meanwhile.
        """
        if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
            raise TypeError(f"after must be a version number >= 0 or None, got {after!r}")
        data = (model_to_json(model, indent=None) + "\n").encode("utf-8")
        names = self._files.names()
        self._sweep(names)
        present = _versions(names)
        version = after + 1 if after is not None else (present[-1] if present else 0) + 1
        while not self._files.write_exclusive(version_name(version), self._temp_name(version), data):
            if after is not None:
                raise CheckpointStoreError(
                    f"model version {self.path(version)} was published by another writer after version "
                    f"{after}, which this model was derived from: two writers in {self.directory}; "
                    "give each stream its own output"
                )
            present = self.versions()  # another writer took it: the number after the newest now
            version = max(version, present[-1] if present else 0) + 1
        return version

    @staticmethod
    def _temp_name(version: int) -> str:
        return f".tmp-model-v{version:09d}-{host_name()}-{os.getpid()}-{uuid.uuid4().hex}.json"

    def _sweep(self, names: list[str]) -> list[str]:
        """Delete the temporary files among ``names`` that writers of this host left when they were
        killed (their process no longer runs); the names deleted. Links are not listed as files."""
        host, gone = host_name(), []
        for name in names:
            found = _TEMP_NAME.fullmatch(name) if name.startswith(".tmp-model-v") else None
            if found is not None and found.group(1) == host and not process_alive(int(found.group(2))):
                self._files.delete(name)
                gone.append(name)
        return gone


def _versions(names: list[str]) -> list[int]:
    """The version numbers among ``names``, oldest first (one scan: a stream's directory grows)."""
    listing = "\n".join(name for name in names if "\n" not in name)
    return sorted(map(int, _NAMES.findall(listing)))
