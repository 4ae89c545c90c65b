"""The files of a store (EM checkpoints, model versions) in one directory, wherever it is: the few
operations a store makes (:class:`Files`), over a local directory (:class:`LocalFiles`: ``fsync``,
exclusive creation, links never followed), a :mod:`pyarrow.fs` filesystem (:class:`ArrowFiles`: object
stores, HDFS, ``mock://``) or the Spark session's Hadoop filesystem (:class:`RemoteStoreFiles`).
:func:`open_files` picks one for a path or URI (:func:`mixle_spark._locations.resolve`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import urllib.parse
import urllib.request
from typing import Any, Protocol

from mixle_spark._files import named_path
from mixle_spark._locations import ArrowFiles as _LocationArrowFiles
from mixle_spark._locations import resolve, scheme_of
from mixle_spark.errors import CheckpointStoreError

__all__ = ["Files", "fsync_or_skip", "join", "open_files"]

# fsync is not implemented by every filesystem (some FUSE mounts, directories on some platforms);
# there the rename alone is what we can get.
_FSYNC_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


def fsync_or_skip(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in _FSYNC_UNSUPPORTED:
            raise


class Files(Protocol):
    """The few file operations a store needs, over a local directory or a pyarrow filesystem."""

    def names(self) -> list[str]: ...  # file names in the directory; [] when it does not exist
    def path(self, name: str) -> str: ...
    def read(self, name: str) -> bytes: ...
    def write_atomic(self, name: str, temp_name: str, data: bytes) -> None: ...
    def delete(self, name: str) -> None: ...  # a missing file is not an error
    # write ``name`` only if no file has that name: False (nothing written) when one does
    def write_exclusive(self, name: str, temp_name: str, data: bytes) -> bool: ...


def _not_a_directory(directory: str, exists: bool) -> CheckpointStoreError:
    where = "it exists and is not a directory" if exists else "one of its parents is a file"
    return CheckpointStoreError(f"checkpoint directory {directory!r} is not usable: {where}")


class LocalFiles:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def names(self) -> list[str]:
        try:
            with os.scandir(self.directory) as entries:
                # a link is not a file the store wrote: never read, replaced or deleted through
                return [entry.name for entry in entries if entry.is_file(follow_symlinks=False)]
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise _not_a_directory(self.directory, os.path.exists(self.directory)) from None

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def read(self, name: str) -> bytes:
        with open(self.path(name), "rb") as handle:
            return handle.read()

    def write_atomic(self, name: str, temp_name: str, data: bytes) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise _not_a_directory(self.directory, os.path.exists(self.directory)) from None
        temp = self.path(temp_name)
        try:
            with open(temp, "xb") as handle:
                handle.write(data)
                handle.flush()
                fsync_or_skip(handle.fileno())
            os.replace(temp, self.path(name))
        except BaseException:
            # The original error matters; a temp file we fail to remove is removed by the next save.
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        if os.name == "posix":  # persist the rename itself; directories cannot be opened on Windows
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                fsync_or_skip(fd)
            finally:
                os.close(fd)

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(name))

    # What os.link raises on a filesystem without hard links (FAT, some FUSE and SMB mounts).
    _LINK_UNSUPPORTED = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})

    def write_exclusive(self, name: str, temp_name: str, data: bytes) -> bool:
        """Write ``data`` as ``name`` unless an entry of that name exists (then False, nothing written).

        The data goes to ``temp_name`` (created exclusively, fsynced), which is then hard-linked to
        ``name``: the link fails when ``name`` exists (even as a link), so no file is ever replaced,
        and a reader sees the whole file or none. The temporary name is removed either way. On a
        filesystem without hard links, ``name`` is created exclusively (``O_EXCL``) and written in
        place: still never replaced, but a reader may see a part of it while it is written.
        """
        try:
            os.makedirs(self.directory, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise _not_a_directory(self.directory, os.path.exists(self.directory)) from None
        temp, final = self.path(temp_name), self.path(name)
        try:
            with open(temp, "xb") as handle:
                handle.write(data)
                handle.flush()
                fsync_or_skip(handle.fileno())
            try:
                os.link(temp, final)
            except FileExistsError:
                return False
            except OSError as err:
                if err.errno not in self._LINK_UNSUPPORTED:
                    raise
                if not self._create_in_place(final, data):
                    return False
        finally:
            with contextlib.suppress(OSError):  # as in write_atomic: a leftover goes with a later sweep
                os.unlink(temp)
        if os.name == "posix":  # persist the new name, as write_atomic does
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                fsync_or_skip(fd)
            finally:
                os.close(fd)
        return True

    @staticmethod
    def _create_in_place(path: str, data: bytes) -> bool:
        """Create ``path`` exclusively and write ``data`` into it; False when it exists. A failed
        write removes the part written (the file is this call's own)."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                fsync_or_skip(handle.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        return True


class ArrowFiles:
    """Files in a pyarrow filesystem (object stores, HDFS); a URI is resolved on first use."""

    def __init__(self, location: str, filesystem: Any = None) -> None:
        self.location = location  # as the user names it: a URI, or a path inside ``filesystem``
        self._filesystem = filesystem
        self._root = location

    def _resolve(self) -> tuple[Any, str]:
        if self._filesystem is None:
            from pyarrow.fs import FileSystem

            self._filesystem, self._root = FileSystem.from_uri(self.location)
        return self._filesystem, self._root

    def _fs_path(self, name: str) -> tuple[Any, str]:
        filesystem, root = self._resolve()
        return filesystem, join(root, name)

    def names(self) -> list[str]:
        from pyarrow.fs import FileSelector, FileType

        filesystem, root = self._resolve()
        kind = filesystem.get_file_info(root).type
        if kind == FileType.NotFound:
            return []
        if kind != FileType.Directory:
            raise _not_a_directory(self.location, exists=True)
        listing = filesystem.get_file_info(FileSelector(root, allow_not_found=True, recursive=False))
        return [info.base_name for info in listing if info.type == FileType.File]

    def path(self, name: str) -> str:
        return join(self.location, name)

    def read(self, name: str) -> bytes:
        filesystem, path = self._fs_path(name)
        with filesystem.open_input_stream(path, compression=None) as stream:
            return bytes(stream.read())

    def write_atomic(self, name: str, temp_name: str, data: bytes) -> None:
        filesystem, root = self._resolve()
        try:
            filesystem.create_dir(root, recursive=True)
        except (FileExistsError, NotADirectoryError):
            raise _not_a_directory(self.location, exists=False) from None
        temp, final = join(root, temp_name), join(root, name)
        try:
            # Object stores publish an object only when its stream closes: readers never see a part.
            with filesystem.open_output_stream(temp, compression=None) as stream:
                stream.write(data)
            try:
                filesystem.move(temp, final)
            except NotImplementedError:  # no rename (e.g. Azure without HNS): a server-side copy
                filesystem.copy_file(temp, final)
                filesystem.delete_file(temp)
        except BaseException:
            with contextlib.suppress(OSError):  # as in LocalFiles.write_atomic
                filesystem.delete_file(temp)
            raise

    def delete(self, name: str) -> None:
        filesystem, path = self._fs_path(name)
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(path)

    def write_exclusive(self, name: str, temp_name: str, data: bytes) -> bool:
        """Write ``data`` as ``name`` unless a file of that name exists (then False), as well as
        pyarrow's filesystems allow: they have no create-if-absent, so ``name`` is checked before
        the write and read back after it (False when another writer's bytes are there). Two writers
        that write the same name within moments of each other on an object store can still replace
        one another's file: give such a directory one writer at a time."""
        from pyarrow.fs import FileType

        filesystem, root = self._resolve()
        if filesystem.get_file_info(join(root, name)).type != FileType.NotFound:
            return False
        self.write_atomic(name, temp_name, data)
        try:
            return self.read(name) == data
        except FileNotFoundError:  # removed by someone else meanwhile: not ours to claim
            return False


class RemoteStoreFiles:
    """Files in a filesystem of :mod:`mixle_spark._locations` (the Spark session's Hadoop one)."""

    def __init__(self, files: Any, uri: str, shown: str) -> None:
        self._remote, self._uri, self._shown = files, uri.rstrip("/"), shown

    def names(self) -> list[str]:
        kind = self._remote.kind(self._uri)
        if kind == "missing":
            return []
        if kind != "dir":
            raise _not_a_directory(self._shown, exists=True)
        return [name for name, entry in self._remote.list(self._uri) if entry == "file"]

    def path(self, name: str) -> str:
        return join(self._shown, name)

    def read(self, name: str) -> bytes:
        return bytes(self._remote.read(join(self._uri, name)))

    def write_atomic(self, name: str, temp_name: str, data: bytes) -> None:
        temp, final = join(self._uri, temp_name), join(self._uri, name)
        try:
            self._remote.write(temp, data, True)
            if self._remote.kind(final) != "missing":  # the same iteration saved again
                self._remote.delete(final)
            self._remote.rename(temp, final)
        except BaseException:
            with contextlib.suppress(Exception):
                self._remote.delete(temp)
            raise

    def write_exclusive(self, name: str, temp_name: str, data: bytes) -> bool:
        """Write ``data`` as ``name`` unless a file of that name exists (then False): a temporary
        file, renamed only onto a free name (a Hadoop rename never replaces a file)."""
        temp, final = join(self._uri, temp_name), join(self._uri, name)
        self._remote.write(temp, data, True)
        try:
            self._remote.rename(temp, final)
            return True
        except (FileExistsError, OSError):
            if self._remote.kind(final) == "missing":
                raise
            return False
        finally:
            with contextlib.suppress(Exception):
                if self._remote.kind(temp) != "missing":
                    self._remote.delete(temp)

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._remote.delete(join(self._uri, name))


def join(directory: str, name: str) -> str:
    """``directory/name`` for pyarrow paths and URIs (which always use ``/``)."""
    stripped = directory.rstrip("/")
    if not stripped and not directory:
        return name  # the root of a bucket-less filesystem such as mock://
    return f"{stripped}/{name}"


def _file_uri_to_path(uri: str) -> str:
    parts = urllib.parse.urlsplit(uri)
    if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
        raise CheckpointStoreError(
            f"checkpoint directory {uri!r}: expected a local file URI such as 'file:///tmp/ckpt' "
            f"(no host other than localhost, no query or fragment)"
        )
    return urllib.request.url2pathname(parts.path)


def open_files(directory: str | os.PathLike[str], filesystem: Any) -> tuple[str, Files]:
    """The normalised directory text and the file operations that serve it."""
    text = os.fspath(directory) if isinstance(directory, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise TypeError(f"checkpoint directory must be a str or os.PathLike[str], got {directory!r}")
    if not text:
        raise CheckpointStoreError("checkpoint directory must not be empty, got ''")
    is_file_uri = text[:5].lower() == "file:"
    if filesystem is not None:
        from pyarrow.fs import FileSystem

        if not isinstance(filesystem, FileSystem):
            raise TypeError(f"filesystem must be a pyarrow.fs.FileSystem, got {type(filesystem).__name__}")
        if scheme_of(text) not in (None, "file") and not is_file_uri:
            raise CheckpointStoreError(
                f"checkpoint directory {text!r} is a URI; with filesystem= pass the path inside that "
                f"filesystem (e.g. 'bucket/prefix'), or pass the URI alone"
            )
        path = _file_uri_to_path(text) if is_file_uri else text
        normalised = path.rstrip("/") or path
        return normalised, ArrowFiles(normalised, filesystem)
    if is_file_uri:
        text = _file_uri_to_path(text)
    elif scheme_of(text) is not None:
        location = resolve(text, "checkpoint directory")
        normalised = text.rstrip("/")
        if location.local is not None:  # dbfs:/x on a Databricks driver: its /dbfs mount
            text = str(location.local)
        elif isinstance(location.files, _LocationArrowFiles):
            return normalised, ArrowFiles(normalised)
        else:  # the Spark session's Hadoop filesystem
            return normalised, RemoteStoreFiles(location.remote, location.uri, normalised)
    named_path(text, "checkpoint directory")  # a link, or a '..' a link leads elsewhere: refused
    normalised = os.path.normpath(text)
    return normalised, LocalFiles(normalised)
