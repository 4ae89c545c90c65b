"""The ``dask`` backend: a Dask DataFrame encoded once into partitions held by the workers of a
``dask.distributed`` cluster.

Each non-empty partition is validated and encoded once, on the worker that holds it, and stays
there as a future for the life of the handle (the vocabularies come from one scan whose per-partition
results, small sets of labels, are merged on the client). An E-step is one task per partition
returning one payload ``(weight, log-likelihood, statistics)`` (the same fold as every backend,
:func:`~mixle_spark.parallel.fold.accumulate_chunks`); payloads are merged pairwise in a
binary tree of tasks on the workers, in partition order, so only the merged statistics reach the
client and results do not depend on timing. Row ids are global (each partition starts at the number
of rows before it), so one seed draws the same initial rows as the local and Spark backends.

A worker lost during a fit loses its partitions; the scheduler recomputes them from their lineage
(reading or slicing the source again and encoding it again) and the E-step gives the same payload.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mixle_spark._frames import frame_engine
from mixle_spark._identity import MultisetDigest, frame_row_hashes, frame_schema
from mixle_spark.engines import Compute
from mixle_spark.errors import EmptyDataError
from mixle_spark.parallel.backends._handle import (
    bind_estimator,
    encode_part,
    scan_part,
)
from mixle_spark.parallel.backends._scoring import BatchScorer
from mixle_spark.parallel.backends.controls import take_controls
from mixle_spark.parallel.fold import Payload, PayloadHandle, Request, accumulate_chunks, merge_payloads
from mixle_spark.stats._tables import as_table
from mixle_spark.stats.base import Distribution, Encoder, Estimator

__all__ = ["DASK_CONTROLS", "DaskEncodedData", "add_scores", "make_dask", "require_dask"]

DASK_CONTROLS = ("encoder", "client", "resources", "num_chunks", "engine", "precision")
_INSTALL_HINT = "the 'dask' backend needs dask and distributed: pip install 'mixle-spark[dask]'"


def require_dask() -> tuple[Any, Any]:
    """``(dask.dataframe, distributed)``, or ImportError naming the ``dask`` extra."""
    try:
        import dask.dataframe as dd
        import distributed
    except ImportError as err:
        raise ImportError(f"{_INSTALL_HINT} ({err})") from err
    return dd, distributed


# -- what runs on the workers (module-level functions: shipped by reference) ------------------------
def _request(request: Request) -> Request:
    return request


def _estep_partition(chunks: list[Any], request: Request, part: int) -> Payload:
    return accumulate_chunks(chunks, request, part)


def _merge(request: Request, a: Payload | None, b: Payload | None) -> Payload | None:
    return merge_payloads(request[0], a, b)


class DaskEncodedData(PayloadHandle):
    """Encoded data held by the workers of a Dask cluster (the ``dask`` backend).

    Parameters
    ----------
    data : dask DataFrame
        The rows; each partition is encoded where it lives. (A pandas DataFrame or a pyarrow Table is
        split into one partition per worker thread first.)
    estimator, model, encoder : what the data is encoded for.
    client : distributed.Client, optional
        The cluster to use (default: the current client, ``distributed.get_client()``).
    weights : str, optional
        A non-negative weight column (dropped from the rows).
    column : str, optional
        The column a non-Record model reads from a multi-column frame.
    num_chunks : int, optional
        Chunks per partition (default: chunks of at most 262,144 rows).
    compute : Compute, optional
        The engine and precision asked for (``engine`` / ``precision``): each partition's chunks are
        stored at that precision by the worker that encodes them, and folded on that engine.
    """

    def __init__(
        self,
        data: Any,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        *,
        client: Any = None,
        encoder: Encoder | None = None,
        weights: str | None = None,
        column: str | None = None,
        num_chunks: int | None = None,
        compute: Compute | None = None,
    ) -> None:
        dd, distributed = require_dask()
        if estimator is None and model is None and encoder is None:
            raise TypeError("DaskEncodedData needs an estimator, a model or an encoder")
        if weights is not None and not isinstance(weights, str):
            raise TypeError(
                f"weights must be the name of a weight column for the dask backend, got {weights!r}"
            )
        self.client = client if client is not None else _current_client(distributed)
        self.compute = compute
        frame = data if frame_engine(data) == "dask" else _as_dask(dd, data, self.client)
        base = encoder or (estimator.encoder() if estimator is not None else model.encoder())  # type: ignore[union-attr]
        parts = self.client.compute(frame.to_delayed())  # the source partitions, on the workers
        sizes = [int(s) for s in self.client.gather(self.client.map(len, parts, pure=False))]
        self.n = int(sum(sizes))
        if self.n == 0:
            raise EmptyDataError("no rows to encode: the data is empty")
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(int).tolist()
        keep = [i for i, size in enumerate(sizes) if size > 0]
        parts, starts = [parts[i] for i in keep], [starts[i] for i in keep]
        self._scan: Any = None
        self.encoder = base
        if estimator is not None and base.needs_scan:
            scans = self.client.gather(
                [
                    self.client.submit(scan_part, p, base, weights, column, s, self.n, pure=False)
                    for p, s in zip(parts, starts, strict=True)
                ]
            )
            for i, scan in enumerate(scans):
                self._scan = scan if i == 0 else base.merge_scans(self._scan, scan)
            self.encoder = estimator.with_scan(self._scan).encoder()
        self._parts = [
            self.client.submit(
                encode_part, p, self.encoder, weights, column, s, self.n, num_chunks, compute, pure=False
            )
            for p, s in zip(parts, starts, strict=True)
        ]
        distributed.wait(self._parts)
        for future in self._parts:  # a bad value: raised here, at its row in the whole data set
            if future.status == "error":
                future.result()
        self._closed = False

    def bind(self, estimator: Estimator) -> Estimator:
        """``estimator`` with the scanned vocabularies / ranges fixed."""
        return bind_estimator(estimator, self._scan, self.encoder)

    def partition_ids(self) -> range:
        """The ids partitions report in ``last_parts``: the non-empty partitions, in order."""
        return range(len(self._parts))

    def _estep(self, request: Request) -> Payload:
        if self._closed:
            raise ValueError("this encoded-data handle is closed")
        # The request as a task (not scattered data): a worker that dies holding it loses nothing,
        # the scheduler runs the task again; the other workers fetch it from one another.
        shipped = self.client.submit(_request, request, pure=False)
        level = [
            self.client.submit(_estep_partition, part, shipped, i, pure=False)
            for i, part in enumerate(self._parts)
        ]
        while len(level) > 1:  # pairwise, in partition order, on the workers
            level = [
                self.client.submit(_merge, shipped, level[i], level[i + 1], pure=False)
                if i + 1 < len(level)
                else level[i]
                for i in range(0, len(level), 2)
            ]
        return level[0].result()  # type: ignore[no-any-return]

    def close(self) -> None:
        """Release the encoded partitions (idempotent); the cluster is the caller's."""
        if not self._closed:
            self._closed = True
            self.client.cancel(self._parts)
            self._parts = []


def _current_client(distributed: Any) -> Any:
    try:
        return distributed.get_client()
    except ValueError:
        raise ValueError(
            "the dask backend needs a Dask client: pass client=distributed.Client(...) or create one "
            "first (distributed.Client() starts a local cluster)"
        ) from None


def _as_dask(dd: Any, data: Any, client: Any) -> Any:
    table = as_table(data)
    if table is None:
        raise TypeError(
            "the dask backend reads a Dask DataFrame (or a pandas DataFrame / pyarrow Table), "
            f"got {type(data).__name__}"
        )
    import pandas as pd

    threads = max(1, sum(client.nthreads().values()))
    frame = table.to_pandas(types_mapper=pd.ArrowDtype)  # keeps list / map / struct columns as Arrow
    return dd.from_pandas(frame, npartitions=max(1, min(threads, table.num_rows)))


def make_dask(data: Any, estimator: Any = None, model: Any = None, **options: Any) -> DaskEncodedData:
    """Registry factory of the ``dask`` backend: honours :data:`DASK_CONTROLS` (``resources``: one
    partition per device, e.g. ``Resources.from_dask(client)``); ``weights=`` (a column name) and
    ``column=`` pass through."""
    controls = take_controls("dask", options, DASK_CONTROLS, computes=True)
    resources = controls.pop("resources", None)
    if resources is not None:  # one partition per device (a Dask worker thread of Resources.from_dask)
        if frame_engine(data) != "dask":
            dd, distributed = require_dask()
            data = _as_dask(dd, data, controls.get("client") or _current_client(distributed))
        data = data.repartition(npartitions=len(resources.devices))
    return DaskEncodedData(data, estimator=estimator, model=model, **controls, **options)


def add_scores(frame: Any, scorer: BatchScorer, column: str | None) -> Any:
    """A lazy Dask DataFrame: ``frame`` with ``scorer``'s columns added partition by partition, as
    pandas Arrow-backed columns (:func:`mixle_spark.scoring.score`). A bad value raises when the
    frame is computed, naming its partition and its row there."""
    import pandas as pd

    require_dask()
    scorer.read_columns(list(frame.columns), column)
    meta = frame._meta.copy()
    for name, typ in scorer.added:
        meta[name] = pd.Series([], dtype=pd.ArrowDtype(typ))
    return frame.map_partitions(_score_partition, scorer, meta=meta)


def _score_partition(frame: Any, scorer: BatchScorer, partition_info: Any = None) -> Any:
    import pandas as pd
    import pyarrow as pa

    out = frame.copy()
    if len(frame) == 0:
        for name, typ in scorer.added:
            out[name] = pd.Series([], dtype=pd.ArrowDtype(typ), index=frame.index)
        return out
    batch = pa.RecordBatch.from_pandas(frame, preserve_index=False)
    where = "the input" if partition_info is None else f"partition {partition_info['number']}"
    enc = scorer.encode(batch, 0, lambda: where)
    for (name, typ), array in zip(scorer.added, scorer.scores(batch, enc), strict=True):
        out[name] = pd.Series(
            pd.arrays.ArrowExtensionArray(array), index=frame.index, dtype=pd.ArrowDtype(typ)
        )
    return out


def _partition_digest(frame: Any) -> Any:
    import pandas as pd

    state = MultisetDigest().add(frame_row_hashes(frame)).state()
    # as text: 64-bit values would become uint64 in one part and int64 in another, then floats
    return pd.DataFrame({c: [str(v)] for c, v in zip("nsqx", state, strict=True)})


def content_identity(frame: Any) -> str:
    """The digest of a Dask DataFrame's rows: each partition's row hashes folded where it lives
    (:class:`~mixle_spark._identity.MultisetDigest`), the parts merged here (order-free)."""
    import pandas as pd

    meta = pd.DataFrame({c: pd.Series(dtype=object) for c in "nsqx"})
    parts = frame.map_partitions(_partition_digest, meta=meta).compute()
    digest = MultisetDigest()
    for state in parts.itertuples(index=False):
        digest.merge([int(v) for v in state])
    return digest.hexdigest(frame_schema(frame._meta))
