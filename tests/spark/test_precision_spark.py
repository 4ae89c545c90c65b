"""``precision="float32"`` on Spark: the encoded chunks are stored in float32 (the cached cells, the
resident tasks' partitions, the job path's chunks) and a fit equals the local backend's float32 fit
to 1e-5 relative, on the resident path, the job path (``resident=False``) and under Spark Connect
(:func:`connect_precision`, run in the Connect child of tests/spark/test_spark_connect.py); float64
stays as it was (1e-9)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.parallel import encoded_data
from mixle_spark.parallel.backends.spark._chunks import chunk_reader
from mixle_spark.parallel.backends.spark._common import _payload_batch
from mixle_spark.spec import model_to_dict
from mixle_spark.stats import GaussianEstimator, MixtureEstimator, PoissonEstimator, RecordEstimator
from tests._precision import ITS, MVN, START, TOLERANCE, VECTORS, assert_same_fit, local_fit

pytestmark = pytest.mark.spark

RECORD = MixtureEstimator([RecordEstimator({"g": GaussianEstimator(), "n": PoissonEstimator()})] * 2)


def records() -> pa.Table:
    """Two clusters of (gaussian, count) records."""
    rng = np.random.default_rng(8)
    z = rng.integers(0, 2, 800)
    return pa.table({"g": rng.normal(np.where(z, 3.0, -1.0), 1.0), "n": rng.poisson(np.where(z, 2.0, 7.0))})


def stored_dtypes(handle: Any) -> set[str]:
    """The dtypes the vectors in the handle's cached chunk cells are stored in, as the executors read
    them (a batch's ``dtype`` where it says, else its vectors')."""
    read = chunk_reader(handle.encoder)

    def dtypes(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield _payload_batch(
            sorted({str(getattr(enc, "dtype", enc.x.dtype)) for enc, _w, _ids in read(batches)})
        )

    return {d for part in handle.jobs.collect(dtypes) for d in part}


def chunk_bytes(handle: Any) -> int:
    """Bytes of the cached chunk cells (one aggregation)."""
    return int(handle.frame.selectExpr("sum(length(chunk)) AS b").collect()[0]["b"])


def assert_vectors_halved(narrow: int, wide: int) -> None:
    """The chunks at float32 hold the vectors' 8 bytes per value in 4 (a chunk's row ids and framing
    stay as they were): ``wide - narrow`` is 4 bytes per value, to 2%."""
    saved = 4 * VECTORS.size
    assert abs((wide - narrow) - saved) < 0.02 * saved, (narrow, wide, saved)


@pytest.fixture(scope="module")
def vector_frame(spark: Any) -> Any:
    return spark.createDataFrame(pd.DataFrame({"x": list(VECTORS)}))


@pytest.mark.parametrize(
    ("resident", "defer"), [(None, False), (False, False), (None, True)], ids=["resident", "jobs", "deferred"]
)
def test_float32_on_spark_is_stored_narrow_and_equals_the_local_float32_fit(
    vector_frame: Any, resident: bool | None, defer: bool
) -> None:
    fits, sizes = {}, {}
    # deferred: the resident tasks of the fit encode the data themselves (no num_chunks: the layout
    # is the backend's), and the chunk frame is computed again from the input when read by a job
    layout = {"defer_encoding": True} if defer else {"num_chunks": 2}
    for precision in ("float32", "float64"):
        with encoded_data(
            vector_frame, MVN, column="x", precision=precision, resident=resident, **layout
        ) as handle:
            fits[precision] = optimize(handle, MVN, max_its=ITS, delta=None, prev_estimate=START)
            assert (handle.resident_steps > 0) is (resident is None)
            assert handle.compute is None or handle.compute.precision == precision == "float32"
            assert stored_dtypes(handle) == {precision}
            sizes[precision] = chunk_bytes(handle)
    assert_vectors_halved(sizes["float32"], sizes["float64"])
    for precision, rtol in TOLERANCE.items():
        assert_same_fit(fits[precision], local_fit(VECTORS, MVN, precision, prev_estimate=START), rtol)
    # float32 is a different computation (not float64 relabelled), within its rounding of float64
    assert fits["float32"].fit_result.log_likelihood != fits["float64"].fit_result.log_likelihood
    assert_same_fit(fits["float32"], fits["float64"], 1e-4)


@pytest.mark.parametrize("resident", [None, False], ids=["resident", "jobs"])
def test_a_record_of_a_gaussian_and_a_poisson_at_float32_equals_the_local_fit(
    spark: Any, resident: bool | None
) -> None:
    table = records()
    with encoded_data(
        spark.createDataFrame(table), RECORD, precision="float32", resident=resident, num_chunks=2
    ) as handle:
        got = optimize(handle, RECORD, max_its=ITS, delta=None, seed=3)
    assert_same_fit(got, local_fit(table, RECORD, "float32", seed=3), 1e-5)


def test_spark_refuses_an_unknown_precision_naming_it(vector_frame: Any) -> None:
    with pytest.raises(ValueError, match="float16"):
        encoded_data(vector_frame, MVN, column="x", precision="float16")


def connect_precision(spark: Any) -> dict[str, Any]:
    """In the Connect child: the float32 and float64 fits over ``spark`` (a Connect session), their
    stored dtypes and chunk bytes, as JSON-able data for :func:`check_connect_precision`."""
    df = spark.createDataFrame(pd.DataFrame({"x": list(VECTORS)}))
    out: dict[str, Any] = {}
    for precision in ("float32", "float64"):
        with encoded_data(df, MVN, column="x", precision=precision, num_chunks=2) as handle:
            model = optimize(handle, MVN, max_its=ITS, delta=None, prev_estimate=START)
            out[precision] = {
                "model": model_to_dict(model),
                "ll": model.fit_result.log_likelihood,
                "dtypes": sorted(stored_dtypes(handle)),
                "bytes": chunk_bytes(handle),
                "executor": type(handle.executor).__name__,
            }
    return out


def check_connect_precision(out: dict[str, Any]) -> None:
    """What :func:`connect_precision` printed equals the local backend's fits at each precision."""
    from mixle_spark.spec import model_from_dict

    for precision, rtol in TOLERANCE.items():
        got = out[precision]
        assert got["dtypes"] == [precision] and got["executor"] == "JobExecutor"
        want = local_fit(VECTORS, MVN, precision, prev_estimate=START)
        assert_same_fit(model_from_dict(got["model"]), want, rtol, got_ll=got["ll"])
    assert_vectors_halved(out["float32"]["bytes"], out["float64"]["bytes"])
