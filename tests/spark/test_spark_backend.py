"""The spark backend equals the local backend: every family, 1 / 2 / 7 partitions, depths 1-3, both
merge paths; initialization, bad input, weights, scoring."""

from __future__ import annotations

import math
import pickletools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, DataValueError, EmptyDataError, SchemaError
from mixle_spark.estimation import initialize, optimize
from mixle_spark.parallel import (
    LocalEncodedData,
    ModelParallelEstimator,
    Resources,
    UnsupportedControlError,
    encoded_data,
    plan,
)
from mixle_spark.parallel.backends.spark._chunks import CHUNK_ROWS, chunk_reader
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    OptionalEstimator,
    PoissonEstimator,
    RecordEstimator,
    SequenceEstimator,
)
from tests.unit._cases import assert_models_close as _assert_models_close
from tests.unit._cases import case_table as _table
from tests.unit.test_contracts import CASES, IDS

pytestmark = pytest.mark.spark

MIX = MixtureDistribution([GaussianDistribution(-3.0, 1.0), GaussianDistribution(2.0, 0.5)], [0.4, 0.6])


# (partitions, treeAggregate depth, merge path, resident E-steps)
LAYOUTS = [
    (1, 1, "tree", False),
    (2, 2, "tree", False),
    (7, 3, "tree", False),
    (7, 2, "dataframe", False),
    (2, 2, "tree", True),
]
FULL_MATRIX = {"record-mixed", "mixture-gaussian", "categorical", "multivariate-gaussian"}


def _layouts(index: int, case: Any) -> list[tuple[int, int, str, bool]]:
    """Every layout for a few representative families; one (rotating) for the others, so each
    layout still meets about a fifth of the families (each layout is an encoding and a job: the
    families times two layouts cost a minute of CI)."""
    if case.id in FULL_MATRIX:
        return LAYOUTS
    return [LAYOUTS[index % len(LAYOUTS)]]


@pytest.mark.parametrize(("index", "case"), list(enumerate(CASES)), ids=IDS)
def test_em_step_equals_local_for_every_family(spark: Any, index: int, case: Any) -> None:
    table = _table(case, 300, seed=21)
    local = LocalEncodedData(table, estimator=case.estimator)
    want_n, want_ll, want = local.pysp_em_step(case.estimator, case.dist)
    df = spark.createDataFrame(table)
    for parts, depth, merge, resident in _layouts(index, case):
        with encoded_data(
            df, case.estimator, num_chunks=parts, depth=depth, merge=merge, resident=resident
        ) as handle:
            assert len(handle) == 300
            n, ll, got = handle.pysp_em_step(case.estimator, case.dist)
            assert n == want_n
            assert ll == pytest.approx(want_ll, rel=1e-9)
            _assert_models_close(got, want)


def test_full_matrix_families_exist() -> None:
    assert FULL_MATRIX <= set(IDS)


SEEDED = [c for c in CASES if c.em_its]


@pytest.mark.parametrize(("index", "case"), list(enumerate(SEEDED)), ids=[c.id for c in SEEDED])
def test_initialization_equals_local(spark: Any, index: int, case: Any) -> None:
    # one chunk or three (more partitions than task slots), alternating over the families: each
    # seeding is a dozen passes, and a job's cost grows with its tasks (seven took twice as long)
    table = _table(case, 400, seed=22)
    want = initialize(table, case.estimator, seed=9, p=0.3)
    df = spark.createDataFrame(table)
    got = initialize(df, case.estimator, seed=9, p=0.3, num_chunks=(1, 3)[index % 2])
    _assert_models_close(got, want, rtol=1e-10)


def test_optimize_picks_spark_for_a_dataframe_and_matches_local(spark: Any) -> None:
    x = np.asarray(MIX.sampler(3).sample(2000))
    df = spark.createDataFrame(pa.table({"x": x}))
    handle = encoded_data(df, MixtureEstimator([GaussianEstimator()] * 2))
    assert type(handle).__name__ == "SparkEncodedData"
    handle.close()
    handle.close()  # idempotent
    est = MixtureEstimator([GaussianEstimator()] * 2)
    got = optimize(df, est, max_its=8, delta=None, seed=4, num_chunks=3)
    want = optimize(list(x), est, max_its=8, delta=None, seed=4)
    _assert_models_close(got, want)
    assert got.fit_result.history[-1].log_likelihood == pytest.approx(
        want.fit_result.history[-1].log_likelihood, rel=1e-10
    )


def test_weights_column(spark: Any) -> None:
    x = np.asarray(MIX.sampler(4).sample(500))
    w = np.random.default_rng(0).uniform(0.0, 3.0, len(x))
    df = spark.createDataFrame(pa.table({"x": x, "w": w}))
    est = MixtureEstimator([GaussianEstimator()] * 2)
    got = optimize(df, est, max_its=3, delta=None, prev_estimate=MIX, weights="w", column="x")
    want = optimize(list(x), est, max_its=3, delta=None, prev_estimate=MIX, weights=w)
    _assert_models_close(got, want)


def test_string_in_a_numeric_column_names_the_cell_and_its_row(spark: Any) -> None:
    """A text column where numbers are expected: the error names the cell that does not read as a
    number and its row (issue: it named the column's type only); a column whose every cell reads
    is still refused by its type."""
    df = spark.createDataFrame([("1.0",), ("12.5x",)], "spend string")
    with pytest.raises(
        DataTypeError,
        match=r"^column 'spend': expected a finite number for GaussianEstimator \(Arrow type string\), "
        r"got string '12\.5x' \(row 2 of 2\)$",
    ):
        encoded_data(df, RecordEstimator({"spend": GaussianEstimator()}))
    numbers = spark.createDataFrame([("1.0",), ("12.5",)], "spend string")
    with pytest.raises(
        SchemaError,
        match=r"column 'spend': expected a numeric column for GaussianEstimator, "
        r"got Arrow type string",
    ):
        encoded_data(numbers, RecordEstimator({"spend": GaussianEstimator()}))


def test_nulls_without_optional_name_the_row_and_count(spark: Any) -> None:
    values = [1.0] * 50
    values[17] = None
    values[40] = None
    df = spark.createDataFrame(pa.table({"x": pa.array(values, pa.float64())}))
    with pytest.raises(
        DataValueError,
        match=r"column 'x': .*OptionalEstimator.*got null \(2 bad rows, first at row 18 of 50\)",
    ):
        encoded_data(df, RecordEstimator({"x": GaussianEstimator()}), num_chunks=4)
    model = optimize(df, RecordEstimator({"x": OptionalEstimator(GaussianEstimator())}), max_its=2)
    assert model.fields["x"].p == pytest.approx(2 / 50, rel=1e-9)


def test_negative_count_reports_global_row(spark: Any) -> None:
    counts = list(range(100))
    counts[73] = -2
    df = spark.createDataFrame(pa.table({"n": pa.array(counts, pa.int64())})).repartition(1)
    with pytest.raises(DataValueError, match=r"column 'n': .*-2.*row 74 of 100"):
        encoded_data(df, RecordEstimator({"n": PoissonEstimator()}), num_chunks=3)


def test_empty_table_and_unknown_column(spark: Any) -> None:
    empty = spark.createDataFrame([], "x double")
    with pytest.raises(EmptyDataError, match="empty"):
        encoded_data(empty, GaussianEstimator())
    df = spark.createDataFrame([(1.0,)], "x double")
    with pytest.raises(SchemaError, match=r"column 'amount' not found; the DataFrame has columns \['x'\]"):
        encoded_data(df, RecordEstimator({"amount": GaussianEstimator()}))
    with pytest.raises((SchemaError, DataTypeError), match="weight column 'w' not found"):
        encoded_data(df, GaussianEstimator(), weights="w")


def test_categorical_labels_learned_in_one_pass(spark: Any) -> None:
    rows = [{"c": c} for c in ["b", "a", "c", "a", "b", "a"] * 20]
    df = spark.createDataFrame(pa.Table.from_pylist(rows))
    est = RecordEstimator({"c": CategoricalEstimator()})
    model = optimize(df, est, max_its=2, num_chunks=4)
    assert model.fields["c"].pmap == pytest.approx({"a": 0.5, "b": 1 / 3, "c": 1 / 6})


def _arrays(value: Any) -> list[np.ndarray]:
    """Every numpy array an encoded chunk holds (containers opened, objects' attributes read)."""
    out, pending = [], [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending += list(item.values())
        elif isinstance(item, list | tuple):
            pending += list(item)
        elif isinstance(item, np.ndarray):
            out.append(item)
        elif hasattr(item, "__dict__") or hasattr(item, "__slots__"):
            slots = getattr(type(item), "__slots__", ())
            pending += [getattr(item, n) for n in slots if hasattr(item, n)] + list(
                getattr(item, "__dict__", {}).values()
            )
    return out


def test_the_cache_holds_label_codes_not_strings(spark: Any) -> None:
    rows = [
        {"c": c, "tags": tags, "x": float(i)}
        for i, (c, tags) in enumerate(
            [("b", ["u", "v"]), (None, []), ("a", ["v"]), ("c", ["u", "u", "w"])] * 30
        )
    ]
    table = pa.Table.from_pylist(rows)
    est = MixtureEstimator(
        [
            RecordEstimator(
                {
                    "c": OptionalEstimator(CategoricalEstimator()),
                    "tags": SequenceEstimator(CategoricalEstimator()),
                    "x": GaussianEstimator(),
                }
            )
        ]
        * 2
    )
    with encoded_data(spark.createDataFrame(table), est, num_chunks=3) as handle:
        # the cache holds the encoder's output, one binary cell per chunk: codes and numbers, no labels
        types = {f.name: f.dataType.simpleString() for f in handle.frame.schema.fields}
        assert types == {"first": "bigint", "rows": "int", "chunk": "binary"}
        blobs = [row["chunk"] for row in handle.frame.collect()]
        stored = {
            arg for blob in blobs for _op, arg, _pos in pickletools.genops(blob) if isinstance(arg, str)
        }
        assert not stored & {"a", "b", "c", "u", "v", "w"}  # the vocabularies are referenced, not stored
        read = chunk_reader(handle.encoder)
        cells = list(read(handle.frame.toArrow().to_batches()))
        assert sum(len(ids) for _enc, _w, ids in cells) == 120
        arrays = [a for enc, _w, _ids in cells for a in _arrays(enc)]
        assert arrays and all(a.dtype.kind in "iufb" for a in arrays)  # codes and numbers, no objects
        start = initialize(handle, est, seed=3)
        local = LocalEncodedData(table, estimator=est)
        assert local.pysp_em_step(est, start)[1] == pytest.approx(
            handle.pysp_em_step(est, start)[1], rel=1e-12
        )
        _assert_models_close(handle.pysp_em_step(est, start)[2], local.pysp_em_step(est, start)[2])


def test_score_adds_columns_lazily_and_keeps_inputs(spark: Any) -> None:
    from chispa import assert_approx_df_equality

    from mixle_spark.scoring import score

    x = np.asarray(MIX.sampler(8).sample(40))
    df = spark.createDataFrame(pa.table({"id": np.arange(40), "x": x}))
    scored = score(MIX, df, column="x")
    assert scored.columns == ["id", "x", "log_likelihood", "prediction", "probability"]
    post = MIX.seq_posterior(x)
    expected = spark.createDataFrame(
        pa.table(
            {
                "id": np.arange(40),
                "x": x,
                "log_likelihood": MIX.seq_log_density(x),
                "prediction": pa.array(post.argmax(axis=1).astype(np.int32)),
                "probability": pa.array(list(post)),
            }
        ),
        schema=scored.schema,
    )
    # chispa compares array columns exactly; posteriors agree to rounding (batches are centred
    # separately), so they are compared with a tolerance below.
    assert_approx_df_equality(
        scored.drop("probability"), expected.drop("probability"), precision=1e-12, ignore_nullable=True
    )
    got = np.array([row.probability for row in scored.orderBy("id").collect()])
    np.testing.assert_allclose(got, post, rtol=1e-12, atol=1e-15)


def test_first_nonfinite_row(spark: Any) -> None:
    df = spark.createDataFrame(pa.table({"c": ["a", "b", "z", "a"]}))
    from mixle_spark.stats import CategoricalDistribution

    handle = encoded_data(df, CategoricalEstimator())
    row = handle.first_nonfinite_row(CategoricalDistribution({"a": 0.5, "b": 0.5}))
    assert row is not None and row[0] == 2 and math.isinf(row[1])
    handle.close()


def test_model_parallel_estimator_on_spark_equals_the_plain_local_fit(spark: Any) -> None:
    model = MixtureDistribution(
        [GaussianDistribution(-3.0, 1.0), GaussianDistribution(0.0, 0.5), GaussianDistribution(4.0, 2.0)],
        [0.3, 0.3, 0.4],
    )
    x = np.asarray(model.sampler(8).sample(20_000))
    est = MixtureEstimator([GaussianEstimator()] * 3)
    want = optimize(x, est, max_its=4, delta=None, seed=2, print_iter=0)
    df = spark.createDataFrame(pa.table({"value": x}))
    wrapped = ModelParallelEstimator(est, num_workers=2)
    for options in ({"num_chunks": 2}, {"num_chunks": 3, "resident": False}):
        got = optimize(df, wrapped, max_its=4, delta=None, seed=2, print_iter=0, **options)
        _assert_models_close(got, want, rtol=1e-10)
    via_control = optimize(df, est, max_its=4, delta=None, seed=2, print_iter=0, num_workers=2, num_chunks=2)
    _assert_models_close(via_control, want, rtol=1e-10)


def test_spark_refuses_controls_it_cannot_honour_and_uses_resources(spark: Any) -> None:
    df = spark.createDataFrame(pa.table({"value": np.arange(40.0)}))
    with pytest.raises(UnsupportedControlError, match=r"'spark' backend cannot honour sub_chunks=2"):
        encoded_data(df, GaussianEstimator(), sub_chunks=2)
    with pytest.raises(UnsupportedControlError, match=r"comm='world'"):
        encoded_data(df, GaussianEstimator(), comm="world")
    # float32 is stored and computed (tests/spark/test_precision_spark.py); bfloat16 is torch's only
    with pytest.raises(
        ValueError, match=r"precision='bfloat16' cannot be honoured \(bfloat16 needs engine='torch'\)"
    ):
        encoded_data(df, GaussianEstimator(), precision="bf16")
    resources = Resources.from_spark(spark.sparkContext)
    assert len(resources) == spark.sparkContext.defaultParallelism == 2
    with encoded_data(df, GaussianEstimator(), resources=Resources.local(3)) as handle:
        assert handle.frame.rdd.getNumPartitions() == 3


def test_plan_measures_a_spark_dataframe(spark: Any) -> None:
    df = spark.createDataFrame(pa.table({"x": np.arange(500.0), "c": ["a", "b"] * 250}))
    est = RecordEstimator({"x": GaussianEstimator(), "c": CategoricalEstimator()})
    placement = plan(df, estimator=est, resources=Resources.local(2), num_chunks=4)
    assert placement.backend == "spark"
    assert placement.total_rows == 500
    assert placement.num_chunks == 4
    assert placement.encoded_row_bytes > 8
    assert placement.fits


@pytest.mark.parametrize("init", ["random", "kmeans||"])
def test_weighted_initialization_and_step_equal_local(spark: Any, init: str) -> None:
    import warnings

    from mixle_spark.estimation import initialize
    from tests.unit.test_backends_agree import EST, flat, weighted_table

    table = weighted_table()
    df = spark.createDataFrame(table.to_pandas())  # row order kept: initialization is keyed by row
    for resident in (False, True):
        fits = []
        for data, options in ((table, {"backend": "local"}), (df, {"resident": resident})):
            start = initialize(data, EST, seed=3, init=init, weights="w", column="x", **options)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                step = optimize(
                    data, EST, max_its=1, delta=None, seed=3, init=init, weights="w", column="x", **options
                )
            fits.append((flat(start), flat(step)))
        np.testing.assert_allclose(fits[1][0], fits[0][0], rtol=1e-12)
        np.testing.assert_allclose(fits[1][1], fits[0][1], rtol=1e-10)


def test_a_mixture_too_big_for_a_workers_memory_is_refused_before_its_first_pass(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fold is one chunk of the encoded data (at most CHUNK_ROWS rows of a partition); under a local
    master a worker has this machine's memory."""
    from mixle_spark.errors import TooLargeError
    from mixle_spark.parallel.backends._handle import machine_memory
    from mixle_spark.parallel.backends.spark import _handle as spark_backend

    rows = np.random.default_rng(3).normal(size=(5000, 1))
    df = spark.createDataFrame(rows.tolist(), "x double").repartition(2)
    estimator = MixtureEstimator([RecordEstimator({"x": GaussianEstimator()})] * 300)
    with encoded_data(df, estimator, resident=False) as handle:
        largest = int(max(np.diff(np.append(handle.offsets, handle.n))))  # rows of the largest partition
        assert handle.fold_rows() == min(CHUNK_ROWS, largest) <= 5000  # a chunk: a partition at most
        assert handle.worker_memory() == machine_memory() > 2**30
        need = 64 * 300 * handle.fold_rows()
        monkeypatch.setattr(spark_backend, "machine_memory", lambda: need - 1)  # a worker 1 byte short
        with pytest.raises(
            TooLargeError,
            match=rf"^MixtureEstimator with 300 components needs about {need / 2**20:.0f} MiB to score a "
            rf"fold of {handle.fold_rows():,} rows \(64 bytes per row and component\), more than the",
        ):
            optimize(handle, estimator, max_its=2)
