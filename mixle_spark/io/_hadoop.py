"""Files through the Hadoop filesystem of the running Spark session: how a classic Spark driver writes
``dbfs:/``, ``s3a://``, ``abfss://``, ``gs://`` or ``hdfs://`` paths with the credentials the cluster
is configured with (a Databricks cluster's, an instance profile's, a service principal's).

Only a classic session has one (Spark Connect has no JVM on the client): :func:`hadoop_files` returns
None there, and the caller tries another filesystem or refuses the scheme. Each method takes a URI
and does one filesystem call; names are those of :class:`mixle_spark._locations.RemoteFiles`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HadoopFiles", "hadoop_files"]

_MISSING = ("java.io.FileNotFoundException",)


def _java_class(err: BaseException) -> str:
    java = getattr(err, "java_exception", None)
    return "" if java is None else str(java.getClass().getName())


class HadoopFiles:
    """One Hadoop ``FileSystem`` of the session (the one serving a URI's scheme and authority)."""

    def __init__(self, jvm: Any, filesystem: Any) -> None:
        self._jvm, self._fs = jvm, filesystem
        self.name = f"Hadoop {filesystem.getClass().getSimpleName()}"

    def _path(self, uri: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def kind(self, uri: str) -> str:
        """``"missing"``, ``"file"`` or ``"dir"``."""
        try:
            status = self._fs.getFileStatus(self._path(uri))
        except Exception as err:
            if _java_class(err) in _MISSING:
                return "missing"
            raise
        return "dir" if status.isDirectory() else "file"

    def list(self, uri: str) -> list[tuple[str, str]]:
        """``(name, "file" | "dir")`` of every entry of directory ``uri``."""
        return [
            (str(s.getPath().getName()), "dir" if s.isDirectory() else "file")
            for s in self._fs.listStatus(self._path(uri))
        ]

    def size(self, uri: str) -> int:
        return int(self._fs.getFileStatus(self._path(uri)).getLen())

    def read(self, uri: str) -> bytes:
        stream = self._fs.open(self._path(uri))
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write(self, uri: str, data: bytes, exclusive: bool) -> None:
        """Write ``data`` to ``uri`` (parents made); ``exclusive``: fail if it exists
        (FileExistsError)."""
        try:
            stream = self._fs.create(self._path(uri), not exclusive)
        except Exception as err:
            if _java_class(err) == "org.apache.hadoop.fs.FileAlreadyExistsException":
                raise FileExistsError(f"{uri} exists") from None
            raise
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def rename(self, source: str, target: str) -> None:
        """Move ``source`` to ``target``, which must not exist (FileExistsError if it does)."""
        if self.kind(target) != "missing":
            raise FileExistsError(f"{target} exists")
        if not self._fs.rename(self._path(source), self._path(target)):
            raise OSError(f"the filesystem did not rename {source} to {target}")

    def delete(self, uri: str, recursive: bool = False) -> None:
        self._fs.delete(self._path(uri), recursive)

    def mkdirs(self, uri: str) -> None:
        if not self._fs.mkdirs(self._path(uri)):
            raise OSError(f"the filesystem did not make directory {uri}")


def hadoop_files(uri: str) -> HadoopFiles | None:
    """The session's Hadoop filesystem for ``uri``; None without a classic Spark session, or when its
    Hadoop configuration knows no filesystem for the scheme."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return None
    context = SparkContext._active_spark_context
    if context is None:
        return None
    jvm: Any = context._jvm
    try:
        filesystem = jvm.org.apache.hadoop.fs.Path(uri).getFileSystem(context._jsc.hadoopConfiguration())
    except Exception as err:
        if _java_class(err) == "org.apache.hadoop.fs.UnsupportedFileSystemException" or _missing_class(err):
            return None  # no filesystem for the scheme, or its class is not on this cluster's classpath
        raise
    return HadoopFiles(jvm, filesystem)


def _missing_class(err: BaseException) -> bool:
    """Whether Hadoop knows the scheme's filesystem by name but its jar is absent (``adl:`` without
    hadoop-azure-datalake): a ClassNotFoundException, possibly wrapped."""
    java = getattr(err, "java_exception", None)
    while java is not None:
        if str(java.getClass().getName()) == "java.lang.ClassNotFoundException":
            return True
        java = java.getCause()
    return False
