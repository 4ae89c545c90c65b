"""CheckpointStore: atomic, verified EM checkpoints on local paths and pyarrow filesystems."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyarrow import fs as pafs

from mixle_spark.em._checkpoint_store import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    CheckpointStore,
    CheckpointStoreError,
    CorruptCheckpointWarning,
)

TEMP_LEFTOVER = ".tmp-em-checkpoint-000000007-4242-0123456789abcdef0123456789abcdef.json"


class RecordingFileSystem(pafs.LocalFileSystem):
    """A local pyarrow filesystem that records renames, to prove the pyarrow code path ran."""

    def __init__(self) -> None:
        super().__init__()
        self.moves: list[tuple[str, str]] = []

    def move(self, src: str, dest: str) -> None:
        self.moves.append((src, dest))
        super().move(src, dest)


class FailingMoveFileSystem(pafs.LocalFileSystem):
    """A local pyarrow filesystem whose rename fails, like a crash between write and rename."""

    def move(self, src: str, dest: str) -> None:
        raise OSError(f"simulated crash moving {src}")


@pytest.fixture(params=["local", "file-uri", "pyarrow"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., CheckpointStore]:
    """Stores over ``tmp_path / "ckpt"``: a plain path, a file:// URI, and file:// through pyarrow.fs."""
    directory = tmp_path / "ckpt"

    def make(**kwargs: Any) -> CheckpointStore:
        if request.param == "local":
            return CheckpointStore(directory, **kwargs)
        if request.param == "file-uri":
            return CheckpointStore(directory.as_uri(), **kwargs)
        kwargs.setdefault("filesystem", RecordingFileSystem())
        return CheckpointStore(directory.as_uri(), **kwargs)

    return make


def checkpoint_file(store: CheckpointStore, iteration: int) -> Path:
    return Path(store.directory) / f"em-checkpoint-{iteration:09d}.json"


def float_bits(value: Any) -> Any:
    """The structure with every float replaced by its IEEE-754 bit pattern (so -0.0 != 0.0, nan == nan)."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value).hex())
    if isinstance(value, dict):
        return {key: float_bits(item) for key, item in value.items()}
    if isinstance(value, list):
        return [float_bits(item) for item in value]
    return (type(value).__name__, value)


EXACT_FLOATS = [0.1 + 0.2, 1e-308, 5e-324, -0.0, 0.0, math.inf, -math.inf, math.nan, 1.7976931348623157e308]

NESTED_STATE = {
    "model": {
        "components": [
            {"mu": [0.1 + 0.2, -1e-308], "covar": [[1.0, 0.5], [0.5, 2.0 / 3.0]]},
            {"mu": EXACT_FLOATS, "covar": [[5e-324]]},
        ],
        "w": [1.0 / 3.0, 2.0 / 3.0],
    },
    "ll_history": [-1234.5678901234567, -1200.0000000000002],
    "rng_state": 2**70 + 1,
    "converged": False,
    "note": "ünïcode ✓",
    "missing": None,
}


def test_round_trip_keeps_nested_state_and_every_float_bit(
    make_store: Callable[..., CheckpointStore],
) -> None:
    store = make_store()
    store.save(4, NESTED_STATE)
    found = store.latest()
    assert found is not None
    iteration, state = found
    assert iteration == 4
    assert float_bits(state) == float_bits(NESTED_STATE)
    assert struct.pack("<d", state["model"]["components"][1]["mu"][3]).hex() == "0000000000000080"  # -0.0


def test_file_content_is_the_documented_envelope(make_store: Callable[..., CheckpointStore]) -> None:
    store = make_store()
    path = store.save(12, {"b": [1.5, math.nan], "a": 1})
    assert path == str(checkpoint_file(store, 12))
    payload = json.loads(Path(path).read_text())
    canonical = json.dumps(payload["state"], sort_keys=True, separators=(",", ":"), allow_nan=True)
    assert canonical == '{"a":1,"b":[1.5,NaN]}'
    assert payload == {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "iteration": 12,
        "sha256": hashlib.sha256(canonical.encode()).hexdigest(),
        "state": payload["state"],
    }
    assert CHECKPOINT_FORMAT == "mixle_spark.em_checkpoint" and CHECKPOINT_VERSION == 1


def test_negative_nan_comes_back_as_nan(make_store: Callable[..., CheckpointStore]) -> None:
    store = make_store()
    negative_nan = math.inf - math.inf  # x86 produces the NaN with the sign bit set
    store.save(1, {"x": negative_nan})
    found = store.latest()
    assert found is not None and math.isnan(found[1]["x"])


def test_directory_is_created_by_the_first_save_not_by_init(
    make_store: Callable[..., CheckpointStore],
) -> None:
    store = make_store()
    assert not Path(store.directory).exists()
    assert store.latest() is None
    assert store.list() == []
    store.clear()
    assert not Path(store.directory).exists()
    store.save(0, {"x": 1})
    assert sorted(os.listdir(store.directory)) == ["em-checkpoint-000000000.json"]


def test_latest_and_list_order_by_iteration_number_not_name(
    make_store: Callable[..., CheckpointStore],
) -> None:
    store = make_store(keep=10)
    for iteration in (999_999_999, 3, 1_000_000_000, 12):  # 10 digits sorts before 9 as text
        store.save(iteration, {"it": iteration})
    assert [iteration for iteration, _ in store.list()] == [1_000_000_000, 999_999_999, 12, 3]
    assert store.list()[-1] == (3, str(checkpoint_file(store, 3)))
    assert store.latest() == (1_000_000_000, {"it": 1_000_000_000})


def test_save_replaces_a_checkpoint_of_the_same_iteration(make_store: Callable[..., CheckpointStore]) -> None:
    store = make_store()
    store.save(5, {"ll": -3.0})
    store.save(5, {"ll": -2.0})
    assert store.latest() == (5, {"ll": -2.0})
    assert [iteration for iteration, _ in store.list()] == [5]


def test_save_prunes_to_the_newest_keep(make_store: Callable[..., CheckpointStore]) -> None:
    store = make_store(keep=2)
    for iteration in range(1, 6):
        store.save(iteration, {"it": iteration})
    assert [iteration for iteration, _ in store.list()] == [5, 4]
    assert sorted(os.listdir(store.directory)) == [
        "em-checkpoint-000000004.json",
        "em-checkpoint-000000005.json",
    ]


def test_prune_never_deletes_the_checkpoint_just_written(make_store: Callable[..., CheckpointStore]) -> None:
    store = make_store(keep=1)
    store.save(10, {"it": 10})
    store.save(20, {"it": 20})
    store.save(15, {"it": 15})  # older than what is on disk, still kept
    assert [iteration for iteration, _ in store.list()] == [20, 15]
    store.save(25, {"it": 25})
    assert [iteration for iteration, _ in store.list()] == [25]


def _flip_bit(marker: bytes, offset: int) -> Callable[[bytes], bytes]:
    """Flip the lowest bit of the byte ``offset`` bytes after the start of ``marker``."""

    def corrupt(data: bytes) -> bytes:
        at = data.index(marker) + offset
        return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]

    return corrupt


def _envelope(**changes: Any) -> Callable[[bytes], bytes]:
    def corrupt(data: bytes) -> bytes:
        payload = json.loads(data)
        payload.update(changes)
        return json.dumps({k: v for k, v in payload.items() if v is not ...}).encode()

    return corrupt


CORRUPTIONS = {
    "truncated": (lambda data: data[: len(data) // 2], r"not valid JSON, truncated or damaged"),
    "trailing garbage": (lambda data: data + b"}x", r"not valid JSON, truncated or damaged"),
    "flipped byte in the state": (_flip_bit(b"-123.456", 7), r"sha256 mismatch"),
    "flipped byte in the digest": (_flip_bit(b'"sha256":"', 10), r"sha256 mismatch"),
    "empty": (lambda data: b"", r"empty file"),
    "not utf-8": (lambda data: b"\xff\xfe" + data, r"not UTF-8 text"),
    "json array": (lambda data: b"[1, 2]", r"not a JSON object but list"),
    "other format": (
        _envelope(format="sklearn.pickle"),
        r"not a mixle_spark EM checkpoint \(format 'sklearn.pickle'",
    ),
    "no format": (lambda data: b'{"state": {}}', r"not a mixle_spark EM checkpoint \(format None"),
    "bad version": (_envelope(version="1"), r"bad checkpoint version '1'"),
    "iteration mismatch": (_envelope(iteration=7), r"iteration 7 in the file does not match 2 in its name"),
    "iteration not int": (
        _envelope(iteration=2.0),
        r"iteration 2.0 in the file does not match 2 in its name",
    ),
    "no state": (_envelope(state=...), r"'state' is null, expected a JSON object"),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_a_corrupt_checkpoint_is_skipped_for_the_previous_good_one(
    make_store: Callable[..., CheckpointStore], kind: str
) -> None:
    corrupt, reason = CORRUPTIONS[kind]
    store = make_store()
    store.save(1, {"ll": -200.5})
    store.save(2, {"ll": -123.456})
    target = checkpoint_file(store, 2)
    target.write_bytes(corrupt(target.read_bytes()))
    with pytest.warns(CorruptCheckpointWarning, match=rf"em-checkpoint-000000002\.json: {reason}"):
        assert store.latest() == (1, {"ll": -200.5})
    assert [iteration for iteration, _ in store.list()] == [2, 1]  # list does not verify


def test_a_checkpoint_from_a_newer_version_is_skipped(make_store: Callable[..., CheckpointStore]) -> None:
    store = make_store()
    store.save(1, {"ll": -2.0})
    store.save(2, {"ll": -1.0})
    target = checkpoint_file(store, 2)
    payload = json.loads(target.read_text())
    payload["version"] = CHECKPOINT_VERSION + 1  # digest still valid: only the version is in the way
    target.write_text(json.dumps(payload))
    message = r"em-checkpoint-000000002\.json: written by a newer mixle_spark \(checkpoint version 2"
    with pytest.warns(CorruptCheckpointWarning, match=message):
        assert store.latest() == (1, {"ll": -2.0})


def test_all_corrupt_gives_none_with_a_warning_per_file(make_store: Callable[..., CheckpointStore]) -> None:
    store = make_store()
    store.save(1, {"ll": -2.0})
    store.save(2, {"ll": -1.0})
    checkpoint_file(store, 1).write_bytes(b"")
    checkpoint_file(store, 2).write_bytes(b'{"format": "mixle_spark.em_checkpoint", "vers')
    with pytest.warns(CorruptCheckpointWarning) as caught:
        assert store.latest() is None
    messages = [str(warning.message) for warning in caught]
    assert len(messages) == 2
    assert re.search(r"em-checkpoint-000000002\.json: not valid JSON", messages[0])
    assert re.search(r"em-checkpoint-000000001\.json: empty file", messages[1])
    assert all(warning.category is CorruptCheckpointWarning for warning in caught)


def test_files_with_other_names_are_ignored(make_store: Callable[..., CheckpointStore]) -> None:
    store = make_store()
    store.save(3, {"ll": -1.0})
    directory = Path(store.directory)
    (directory / "em-checkpoint-9.json").write_text("short name")
    (directory / "em-checkpoint-0000000009.json").write_text("zero-padded past 9 digits")
    (directory / "em-checkpoint-000000009.json.bak").write_text("backup")
    (directory / "em-checkpoint-000000008.json").mkdir()  # a directory, not a checkpoint file
    assert store.latest() == (3, {"ll": -1.0})
    assert store.list() == [(3, str(checkpoint_file(store, 3)))]


def test_leftover_temp_file_is_ignored_then_removed_by_save(
    make_store: Callable[..., CheckpointStore],
) -> None:
    store = make_store()
    store.save(5, {"ll": -1.0})
    leftover = Path(store.directory) / TEMP_LEFTOVER
    leftover.write_bytes(b'{"format": "mixle_spark.em_checkpoint", "version": 1, "iter')
    assert store.latest() == (5, {"ll": -1.0})  # no warning: a temp file is never a checkpoint
    assert [iteration for iteration, _ in store.list()] == [5]
    store.save(6, {"ll": -0.5})
    assert not leftover.exists()
    assert sorted(os.listdir(store.directory)) == [
        "em-checkpoint-000000005.json",
        "em-checkpoint-000000006.json",
    ]


def test_clear_removes_only_this_stores_files(make_store: Callable[..., CheckpointStore]) -> None:
    store = make_store()
    for iteration in (1, 2):
        store.save(iteration, {"it": iteration})
    directory = Path(store.directory)
    foreign = ["notes.txt", ".tmp-other-tool", "em-checkpoint-000000003.json.bak", "model.json"]
    for name in foreign:
        (directory / name).write_text("not ours")
    (directory / "sub").mkdir()
    (directory / TEMP_LEFTOVER).write_text("partial")
    store.clear()
    assert sorted(os.listdir(directory)) == sorted([*foreign, "sub"])
    assert store.list() == []
    assert store.latest() is None


def test_failed_rename_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    store.save(5, {"ll": -5.0})

    def crash(src: str, dst: str) -> None:
        raise OSError(f"simulated crash renaming {src}")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match=r"simulated crash renaming .*tmp-em-checkpoint-000000010-"):
        store.save(10, {"ll": -1.0})
    monkeypatch.undo()
    assert store.latest() == (5, {"ll": -5.0})
    assert os.listdir(store.directory) == ["em-checkpoint-000000005.json"]  # no partial, no temp file


def test_hard_crash_leaves_only_a_temp_file_that_the_next_save_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    store.save(5, {"ll": -5.0})

    def crash(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    monkeypatch.setattr(os, "unlink", lambda path: None)  # a killed process cleans nothing up
    with pytest.raises(KeyboardInterrupt):
        store.save(10, {"ll": -1.0})
    monkeypatch.undo()
    names = sorted(os.listdir(store.directory))
    assert len(names) == 2 and names[1] == "em-checkpoint-000000005.json"
    assert re.fullmatch(rf"\.tmp-em-checkpoint-000000010-{os.getpid()}-[0-9a-f]{{32}}\.json", names[0])
    assert store.latest() == (5, {"ll": -5.0})
    store.save(15, {"ll": -0.5})
    assert sorted(os.listdir(store.directory)) == [
        "em-checkpoint-000000005.json",
        "em-checkpoint-000000015.json",
    ]


def test_failed_pyarrow_move_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    CheckpointStore(directory.as_uri(), filesystem=pafs.LocalFileSystem()).save(5, {"ll": -5.0})
    store = CheckpointStore(directory.as_uri(), filesystem=FailingMoveFileSystem())
    with pytest.raises(OSError, match=r"simulated crash moving .*tmp-em-checkpoint-000000010-"):
        store.save(10, {"ll": -1.0})
    assert store.latest() == (5, {"ll": -5.0})
    assert os.listdir(directory) == ["em-checkpoint-000000005.json"]


def test_pyarrow_filesystem_does_the_io(tmp_path: Path) -> None:
    filesystem = RecordingFileSystem()
    directory = tmp_path / "ckpt"
    store = CheckpointStore(directory.as_uri() + "/", filesystem=filesystem, keep=1)
    assert store.directory == str(directory)
    path = store.save(3, {"ll": -1.0})
    assert path == str(directory / "em-checkpoint-000000003.json")
    assert len(filesystem.moves) == 1
    src, dest = filesystem.moves[0]
    assert Path(src).parent == directory and Path(src).name.startswith(".tmp-em-checkpoint-000000003-")
    assert dest == path
    assert CheckpointStore(directory).latest() == (3, {"ll": -1.0})  # same bytes as the local path


def test_uri_store_resolves_its_filesystem_with_from_uri() -> None:
    store = CheckpointStore("mock:///ckpt/run-1/", keep=2)  # pyarrow's in-memory test filesystem
    assert store.directory == "mock:///ckpt/run-1"
    assert store.latest() is None
    for iteration in (1, 2, 3):
        store.save(iteration, {"ll": -1.0 / iteration})
    assert store.list() == [
        (3, "mock:///ckpt/run-1/em-checkpoint-000000003.json"),
        (2, "mock:///ckpt/run-1/em-checkpoint-000000002.json"),
    ]
    assert store.latest() == (3, {"ll": -1.0 / 3})
    store.clear()
    assert store.list() == []


def test_local_path_is_normalised(tmp_path: Path) -> None:
    assert CheckpointStore(f"{tmp_path}/a/../ckpt/").directory == str(tmp_path / "ckpt")
    assert CheckpointStore((tmp_path / "ckpt").as_uri()).directory == str(tmp_path / "ckpt")
    assert repr(CheckpointStore(tmp_path, keep=2)) == f"CheckpointStore({str(tmp_path)!r}, keep=2)"


def _call(store: CheckpointStore, method: str) -> Any:
    return store.save(1, {"x": 1}) if method == "save" else getattr(store, method)()


@pytest.mark.parametrize("method", ["latest", "list", "clear", "save"])
@pytest.mark.parametrize("filesystem", [None, pafs.LocalFileSystem()], ids=["local", "pyarrow"])
def test_a_directory_path_that_is_a_file_raises(tmp_path: Path, method: str, filesystem: Any) -> None:
    regular_file = tmp_path / "ckpt"
    regular_file.write_text("I am a file")
    store = CheckpointStore(regular_file, filesystem=filesystem)
    message = re.escape(f"checkpoint directory {str(regular_file)!r} is not usable: it exists and is not a")
    with pytest.raises(CheckpointStoreError, match=message):
        _call(store, method)
    assert regular_file.read_text() == "I am a file"


@pytest.mark.parametrize("method", ["latest", "list", "clear", "save"])
def test_a_local_directory_below_a_file_raises(tmp_path: Path, method: str) -> None:
    (tmp_path / "ckpt").write_text("I am a file")
    below = tmp_path / "ckpt" / "run-1"
    message = re.escape(f"checkpoint directory {str(below)!r} is not usable: one of its parents is a file")
    with pytest.raises(CheckpointStoreError, match=message):
        _call(CheckpointStore(below), method)


def test_a_pyarrow_directory_below_a_file_is_empty_until_save_raises(tmp_path: Path) -> None:
    (tmp_path / "ckpt").write_text("I am a file")
    store = CheckpointStore(tmp_path / "ckpt" / "run-1", filesystem=pafs.LocalFileSystem())
    assert store.latest() is None and store.list() == []  # object stores cannot tell this from missing
    message = re.escape(f"{str(tmp_path / 'ckpt' / 'run-1')!r} is not usable: one of its parents is a file")
    with pytest.raises(CheckpointStoreError, match=message):
        store.save(1, {"x": 1})


@pytest.mark.parametrize("keep", [0, -1])
def test_keep_below_one_raises(tmp_path: Path, keep: int) -> None:
    with pytest.raises(ValueError, match=rf"keep must be >= 1 \(checkpoints to retain\), got {keep}"):
        CheckpointStore(tmp_path, keep=keep)
    assert issubclass(CheckpointStoreError, ValueError)


@pytest.mark.parametrize("keep", ["3", 2.0, True])
def test_keep_of_the_wrong_type_raises(tmp_path: Path, keep: Any) -> None:
    with pytest.raises(TypeError, match="keep must be an integer >= 1, got"):
        CheckpointStore(tmp_path, keep=keep)


def test_bad_directory_arguments_raise(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"checkpoint directory must be a str or os\.PathLike"):
        CheckpointStore(42)  # type: ignore[arg-type]
    with pytest.raises(CheckpointStoreError, match="checkpoint directory must not be empty, got ''"):
        CheckpointStore("")
    with pytest.raises(CheckpointStoreError, match="'file://otherhost/ckpt': expected a local file URI"):
        CheckpointStore("file://otherhost/ckpt")
    with pytest.raises(CheckpointStoreError, match=r"'s3://bucket/ckpt' is a URI; with filesystem="):
        CheckpointStore("s3://bucket/ckpt", filesystem=pafs.LocalFileSystem())
    with pytest.raises(TypeError, match=r"filesystem must be a pyarrow\.fs\.FileSystem, got str"):
        CheckpointStore(tmp_path, filesystem="local")


def test_bad_save_arguments_raise_and_write_nothing(make_store: Callable[..., CheckpointStore]) -> None:
    store = make_store()
    with pytest.raises(CheckpointStoreError, match="iteration must be an integer >= 0, got -1"):
        store.save(-1, {"x": 1})
    with pytest.raises(CheckpointStoreError, match="iteration must be an integer >= 0, got boolean True"):
        store.save(True, {"x": 1})
    with pytest.raises(TypeError, match="checkpoint state must be a mapping, got list"):
        store.save(1, [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"checkpoint state of iteration 1 is not JSON-able: .*set"):
        store.save(1, {"x": {1, 2}})
    assert not Path(store.directory).exists()
