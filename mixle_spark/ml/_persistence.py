"""Saving and loading the Spark ML stages through the DataFrame API only (so Spark Connect works).

Layout under ``path`` (the layout of pyspark's ``DefaultParamsWriter``, so ``Pipeline`` /
``PipelineModel`` persistence and ``DefaultParamsReader.loadParamsInstance`` handle our stages)::

    path/metadata/part-...   one line of JSON: class, uid, sparkVersion, paramMap, defaultParamMap,
                             and "mixleSpark": {"version": ..., "hasModel": ...}
    path/model/part-...      the fitted model as mixle_spark JSON (models only; never pickle)

The model is written before the metadata, so a directory with metadata is complete.
``write().overwrite()`` replaces both parts with the writer's ``overwrite`` mode instead of
pyspark's JVM helper, which Spark Connect does not have.

``path`` is checked first (:data:`STAGE_OUTPUT`): ``save`` writes only into a path that is absent or
empty, and ``overwrite()`` replaces only a stage this writer saved (``metadata/`` and ``model/``,
nothing else), never a folder of other files, never through a symbolic link. A URI is checked through
the session's Hadoop filesystem (:func:`mixle_spark._locations.resolve`); where no filesystem here
can list it (a remote URI under Spark Connect), Spark's own writer modes are all there is.
"""

from __future__ import annotations

import os
from typing import Any, Generic, TypeVar

from pyspark.ml.param import Params
from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReadable, MLReader, MLWriter
from pyspark.sql import SparkSession

from mixle_spark._files import Folder, OutputLayout, folder_entries, holds
from mixle_spark._locations import resolve
from mixle_spark._outputs import check_location_free
from mixle_spark._version import __version__
from mixle_spark.errors import ModelFormatError, UnsupportedLocationError

__all__ = ["MixleReader", "MixleWriter"]

T = TypeVar("T", bound=MLReadable[Any])

METADATA_DIR = "metadata"
MODEL_DIR = "model"


def _not_a_stage(directory: Folder) -> str | None:
    """Why ``directory`` is not a stage this writer saved: entries besides ``metadata/`` and
    ``model/``, or no ``metadata/``."""
    entries = folder_entries(directory)
    odd = [
        e for e in entries if e.name not in (METADATA_DIR, MODEL_DIR) or not e.is_dir(follow_symlinks=False)
    ]
    if odd:
        return holds(odd)
    return None if any(e.name == METADATA_DIR for e in entries) else "it has no metadata/"


STAGE_OUTPUT = OutputLayout(
    "was not saved by a mixle_spark ML writer", _not_a_stage, "write().overwrite()", "path"
)
"""What a saved stage's directory holds: what ``overwrite()`` may replace."""


def check_stage_path(path: str) -> None:
    """Refuse (FileExistsError, UnsafePathError) a ``path`` a stage may not be saved to: a link, or a
    folder holding anything but a stage this writer saved (see the module docstring). A stage of
    ours without ``overwrite()`` is refused by Spark's writer (its "already exists")."""
    try:
        location = resolve(path, "path")
    except UnsupportedLocationError:  # a URI only Spark's writer reaches (Spark Connect)
        return
    check_location_free(location, True, STAGE_OUTPUT)


def _write_text(spark: SparkSession, text: str, path: str, mode: str) -> None:
    frame = spark.createDataFrame([(text,)], schema="value string")
    frame.coalesce(1).write.mode(mode).text(path)


def _read_text(spark: SparkSession, path: str) -> str:
    rows = spark.read.option("wholetext", "true").text(path).collect()
    return "".join(row[0] for row in rows)


class MixleWriter(MLWriter):
    """Writes a stage's Params as Spark ML metadata and, for a model, its JSON.

    Parameters
    ----------
    instance : Params
        The estimator or model to save.
    model_json : str, optional
        The fitted model as :func:`mixle_spark.spec.model_to_json` text.
    """

    def __init__(self, instance: Params, model_json: str | None = None) -> None:
        super().__init__()
        self.instance = instance
        self.model_json = model_json

    def save(self, path: str) -> None:
        """Save to ``path`` (an error if it exists, unless ``overwrite()`` was called)."""
        if not isinstance(path, str):
            raise TypeError(f"path should be a string, got {type(path).__name__}")
        check_stage_path(path)
        self.saveImpl(path)

    def saveImpl(self, path: str) -> None:
        """Write ``path/model`` (models), then ``path/metadata``."""
        spark = self.sparkSession
        mode = "overwrite" if self.shouldOverwrite else "error"  # Connect knows "error", not "errorifexists"
        extra = {"mixleSpark": {"version": __version__, "hasModel": self.model_json is not None}}
        if self.model_json is not None:
            _write_text(spark, self.model_json, os.path.join(path, MODEL_DIR), mode)
        metadata = DefaultParamsWriter._get_metadata_to_save(self.instance, spark, extra)
        _write_text(spark, metadata, os.path.join(path, METADATA_DIR), mode)


def _stage_class(name: str, base: type, path: str) -> type:
    """The class ``name`` (as pyspark writes it, ``module.ClassName``) among ``base`` and its subclasses
    defined in this process.

    Nothing is imported: a saved stage is data, and a metadata file naming any module (``this``,
    ``unittest.__main__``, ...) would otherwise run that module's code when it is loaded.
    """
    known: dict[str, type] = {}
    stack = [base]
    while stack:
        cls = stack.pop()
        known.setdefault(f"{cls.__module__}.{cls.__name__}", cls)
        stack.extend(cls.__subclasses__())
    found = known.get(name)
    if found is None:
        raise ModelFormatError(
            f"{path} holds a stage of class {name!r}, which is not {base.__module__}.{base.__name__} or a "
            "subclass of it defined in this process (saved stages never import modules: import the "
            "module that defines a subclass before loading it)"
        )
    return found


class MixleReader(MLReader[T], Generic[T]):
    """Reads what :class:`MixleWriter` wrote; the saved class must be ``cls`` or a subclass."""

    def __init__(self, cls: type[T]) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> T:
        """Load the stage saved at ``path``."""
        if not isinstance(path, str):
            raise TypeError(f"path should be a string, got {type(path).__name__}")
        spark = self.sparkSession
        metadata = DefaultParamsReader.loadMetadata(path, spark)
        py_type = _stage_class(str(metadata.get("class")), self.cls, path)
        instance: Any = py_type()
        instance._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(instance, metadata)
        if metadata.get("mixleSpark", {}).get("hasModel"):
            instance._load_model_json(_read_text(spark, os.path.join(path, MODEL_DIR)))
        return instance  # type: ignore[no-any-return]
