"""Storage of EM checkpoints: one verified JSON file per saved iteration, written atomically.

The EM driver hands :class:`CheckpointStore` a JSON-able ``state`` after every few iterations and, on
restart, asks for the newest checkpoint that verifies. Each checkpoint is a file
``em-checkpoint-{iteration:09d}.json`` holding::

    {"format": "mixle_spark.em_checkpoint", "version": 1, "iteration": 12,
     "sha256": "<hex digest of the canonical JSON of the state>", "state": {...}}

The sha256 finds *damage* (a truncated or corrupted file), not *tampering*: anyone who can write the
directory can change a state and recompute its hash. With a ``key`` (the fit's ``checkpoint_key``,
``em_fit --checkpoint-key-file``, or the environment variable :data:`KEY_VARIABLE`) every file also
carries ``"hmac_sha256"``, an HMAC-SHA256 under that key of the format, iteration and state; a file
whose HMAC is missing or does not verify is skipped like a damaged one, so a fit resumes only from
checkpoints written by someone holding the key.

A file is written under a temporary ``.tmp-em-checkpoint-...`` name and renamed into place, so a crash
leaves at most a temporary file, which readers ignore and the next save removes. The store reads,
replaces and deletes only files of these two names (never a link, never another file), in a local
directory named without a symbolic link. Floats round-trip
bit-exactly (``repr`` precision; +/-inf as JSON's ``Infinity``; every NaN as ``NaN``).

Local paths (including Databricks ``/dbfs/...`` and ``file:`` URIs) use :mod:`os` directly with
``fsync``; any other URI (``s3://``, ``gs://``, ``hdfs://``, ...) goes through
:meth:`pyarrow.fs.FileSystem.from_uri`, imported on first use.

>>> import tempfile
>>> tmp = tempfile.TemporaryDirectory()
>>> store = CheckpointStore(tmp.name, keep=2)
>>> for iteration in (5, 10, 15):
...     _ = store.save(iteration, {"ll": -1.5 * iteration, "w": [0.25, 0.75]})
>>> [iteration for iteration, _ in store.list()]
[15, 10]
>>> store.latest()
(15, {'ll': -22.5, 'w': [0.25, 0.75]})
>>> store.clear()
>>> store.latest() is None
True
>>> tmp.cleanup()
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
import numbers
import os
import re
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

from mixle_spark.em._store_files import Files, open_files
from mixle_spark.errors import CheckpointStoreError, CorruptCheckpointWarning, describe_value

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "KEY_VARIABLE",
    "CheckpointStore",
    "CheckpointStoreError",
    "CorruptCheckpointWarning",
    "checkpoint_key",
]

CHECKPOINT_FORMAT = "mixle_spark.em_checkpoint"
CHECKPOINT_VERSION = 1
KEY_VARIABLE = "MIXLE_SPARK_CHECKPOINT_KEY"
"""The environment variable holding the checkpoint key when none is given (its UTF-8 bytes)."""

_CHECKPOINT_NAME = re.compile(r"em-checkpoint-(\d{9,})\.json")
_TEMP_NAME = re.compile(r"\.tmp-em-checkpoint-\d{9,}-\d+-[0-9a-f]{32}\.json")


def checkpoint_key(key: bytes | str | None) -> bytes | None:
    """``key`` as bytes (a str as UTF-8); when None, the environment's :data:`KEY_VARIABLE`, if set."""
    if key is None:
        key = os.environ.get(KEY_VARIABLE) or None
    if isinstance(key, str):
        key = key.encode("utf-8")
    if key is not None and not isinstance(key, bytes):
        raise TypeError(f"checkpoint_key must be bytes or a str, got {describe_value(key)}")
    if key is not None and len(key) < 16:
        raise CheckpointStoreError(f"checkpoint_key must be at least 16 bytes long, got {len(key)}")
    return key


class _Invalid(Exception):
    """Internal: why a checkpoint file does not verify (turned into a warning, never raised out)."""


def _canonical_json(state: Any) -> str:
    return json.dumps(state, sort_keys=True, separators=(",", ":"), allow_nan=True)


def _checkpoint_name(iteration: int) -> str:
    return f"em-checkpoint-{iteration:09d}.json"


def _parse_name(name: str) -> int | None:
    """The iteration of a checkpoint file name, or None for any other name."""
    match = _CHECKPOINT_NAME.fullmatch(name)
    if match is None:
        return None
    iteration = int(match.group(1))
    return iteration if _checkpoint_name(iteration) == name else None


def _mac(key: bytes, iteration: int, body: str) -> str:
    """HMAC-SHA256 of a checkpoint's format, iteration and canonical state text under ``key``."""
    message = f"{CHECKPOINT_FORMAT}\n{iteration}\n".encode() + body.encode("utf-8")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _encode(iteration: int, state: Mapping[str, Any], key: bytes | None = None) -> bytes:
    try:
        body = _canonical_json(dict(state))
    except (TypeError, ValueError, RecursionError) as err:
        raise TypeError(f"checkpoint state of iteration {iteration} is not JSON-able: {err}") from err
    header: dict[str, Any] = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "iteration": iteration,
        "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest(),
    }
    if key is not None:
        header["hmac_sha256"] = _mac(key, iteration, body)
    # Splice the canonical text in rather than dumping the state twice (states can be large).
    return (json.dumps(header, separators=(",", ":"))[:-1] + ',"state":' + body + "}\n").encode("utf-8")


def _decode(iteration: int, data: bytes, key: bytes | None = None) -> dict[str, Any]:
    """The verified (with ``key``: authenticated) state of a checkpoint file named for ``iteration``;
    raises :class:`_Invalid`."""
    if not data.strip():
        raise _Invalid("empty file")
    try:
        payload = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise _Invalid(f"not UTF-8 text ({err})") from None
    except (ValueError, RecursionError) as err:
        raise _Invalid(f"not valid JSON, truncated or damaged ({err})") from None
    if not isinstance(payload, dict):
        raise _Invalid(f"not a JSON object but {type(payload).__name__}")
    found = payload.get("format")
    if found != CHECKPOINT_FORMAT:
        raise _Invalid(f"not a mixle_spark EM checkpoint (format {found!r}, expected {CHECKPOINT_FORMAT!r})")
    version = payload.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _Invalid(f"bad checkpoint version {version!r}")
    if version > CHECKPOINT_VERSION:
        raise _Invalid(
            f"written by a newer mixle_spark (checkpoint version {version}; this mixle_spark reads "
            f"versions up to {CHECKPOINT_VERSION})"
        )
    found = payload.get("iteration")
    if type(found) is not int or found != iteration:
        raise _Invalid(f"iteration {found!r} in the file does not match {iteration} in its name")
    state = payload.get("state")
    if not isinstance(state, dict):
        raise _Invalid(f"'state' is {describe_value(state)}, expected a JSON object")
    try:
        body = _canonical_json(state)
    except (ValueError, RecursionError) as err:
        raise _Invalid(f"state cannot be re-serialised ({err})") from None
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    if digest != payload.get("sha256"):
        raise _Invalid(
            f"sha256 mismatch, the state is damaged (file says {payload.get('sha256')!r}, "
            f"state hashes to {digest!r})"
        )
    if key is not None:
        tag = payload.get("hmac_sha256")
        if not isinstance(tag, str):
            raise _Invalid("it carries no HMAC, and a checkpoint key is set: not written with the key")
        if not hmac.compare_digest(tag, _mac(key, iteration, body)):
            raise _Invalid("its HMAC does not verify under the checkpoint key: changed, or another key")
    return state


def _newest_first(names: list[str]) -> list[tuple[int, str]]:
    """(iteration, name) of the checkpoint files among ``names``, newest first."""
    found = [(iteration, name) for name in names if (iteration := _parse_name(name)) is not None]
    return sorted(found, reverse=True)


class CheckpointStore:
    """Checkpoints of one EM fit under ``directory``, newest ``keep`` retained.

    Parameters
    ----------
    directory : str or os.PathLike
        A local path (Databricks ``/dbfs/...`` paths are local), a ``file://`` URI, or any URI that
        :meth:`pyarrow.fs.FileSystem.from_uri` understands (``s3://``, ``gs://``, ``hdfs://``, ...).
        It is created by the first :meth:`save`, not here. One writer per directory: :meth:`save`
        removes the temporary files of interrupted saves. Only the store's own files (its
        checkpoint and temporary names, not links) are ever replaced or deleted; a local directory
        that is a symbolic link, or that a ``..`` after a link makes lead elsewhere, is refused
        (:class:`~mixle_spark.errors.UnsafePathError`): the store never deletes through a link.
    keep : int, default 3
        How many checkpoint files to keep (>= 1); older ones are deleted after each save.
    filesystem : pyarrow.fs.FileSystem, optional
        Do all I/O through this filesystem; ``directory`` is then a path inside it (or a ``file:``
        URI, for a local-like filesystem).
    key : bytes or str, optional
        Authenticate the checkpoints (HMAC-SHA256; a str is taken as UTF-8): files are written with
        an HMAC and only files whose HMAC verifies are read. Default: the environment variable
        :data:`KEY_VARIABLE` when it is set, else none (the sha256 then finds damage only).

    Attributes
    ----------
    directory : str
        The directory as given, normalised (``file:`` URIs become local paths, trailing ``/`` dropped).
    keep : int
        How many checkpoint files are kept.
    """

    directory: str
    keep: int
    _files: Files

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep: int = 3,
        filesystem: Any = None,
        key: bytes | str | None = None,
    ) -> None:
        self._key = checkpoint_key(key)
        if isinstance(keep, bool) or not isinstance(keep, numbers.Integral):
            raise TypeError(f"keep must be an integer >= 1, got {describe_value(keep)}")
        if keep < 1:
            raise CheckpointStoreError(f"keep must be >= 1 (checkpoints to retain), got {int(keep)}")
        self.keep = int(keep)
        self.directory, self._files = open_files(directory, filesystem)

    def __repr__(self) -> str:  # never the key
        keyed = ", keyed" if self._key is not None else ""
        return f"CheckpointStore({self.directory!r}, keep={self.keep}{keyed})"

    def save(self, iteration: int, state: Mapping[str, Any]) -> str:
        """Write the checkpoint of ``iteration`` atomically, then prune to the newest ``keep``.

        Parameters
        ----------
        iteration : int
            The EM iteration the state belongs to (>= 0); an existing checkpoint of it is replaced.
        state : Mapping[str, Any]
            JSON-able data. It is read back as JSON parses it (tuples become lists, non-string
            keys strings); floats, including +/-inf and -0.0, come back bit-exactly, and any NaN
            comes back as the canonical ``float("nan")`` (JSON keeps no NaN sign or payload).

        Returns
        -------
        str
            The path (or URI) of the file written.
        """
        if isinstance(iteration, bool) or not isinstance(iteration, numbers.Integral) or iteration < 0:
            raise CheckpointStoreError(f"iteration must be an integer >= 0, got {describe_value(iteration)}")
        iteration = int(iteration)
        if not isinstance(state, Mapping):
            raise TypeError(f"checkpoint state must be a mapping, got {type(state).__name__}")
        data = _encode(iteration, state, self._key)
        names = self._files.names()
        for name in names:  # leftovers of interrupted saves: never valid, and they take space
            if _TEMP_NAME.fullmatch(name):
                self._files.delete(name)
        name = _checkpoint_name(iteration)
        temp_name = f".tmp-{name[:-5]}-{os.getpid()}-{uuid.uuid4().hex}.json"
        self._files.write_atomic(name, temp_name, data)
        entries = _newest_first([*names, name])
        for old_iteration, old_name in entries[self.keep :]:
            if old_iteration != iteration:
                self._files.delete(old_name)
        return self._files.path(name)

    def latest(self) -> tuple[int, dict[str, Any]] | None:
        """The newest checkpoint that verifies, as ``(iteration, state)``; None when there is none.

        Files that fail verification (unreadable, empty, truncated, damaged, another format, a newer
        version, an iteration that does not match the name) are skipped with a
        :class:`CorruptCheckpointWarning` naming the file and the reason, and the next older one is
        tried. Only an unusable directory raises (:class:`CheckpointStoreError`).
        """
        for iteration, name in _newest_first(self._files.names()):
            try:
                return iteration, _decode(iteration, self._files.read(name), self._key)
            except FileNotFoundError:
                continue  # pruned by a save since the listing: not damage
            except (OSError, _Invalid) as err:
                reason = f"cannot be read ({err})" if isinstance(err, OSError) else str(err)
                warnings.warn(
                    f"skipping checkpoint {self._files.path(name)}: {reason}",
                    CorruptCheckpointWarning,
                    stacklevel=2,
                )
        return None

    def list(self) -> builtins.list[tuple[int, str]]:
        """``(iteration, path)`` of the checkpoint files present, newest first (not verified)."""
        return [(iteration, self._files.path(name)) for iteration, name in _newest_first(self._files.names())]

    def clear(self) -> None:
        """Delete this store's checkpoint and temporary files; other files and the directory stay."""
        for name in self._files.names():
            if _parse_name(name) is not None or _TEMP_NAME.fullmatch(name):
                self._files.delete(name)
