"""Bad input is reported before the first iteration, naming the column, the value and what was expected."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, DataValueError, SchemaError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.spec import estimator_from_spec
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianEstimator,
    MixtureEstimator,
    OptionalEstimator,
    PoissonEstimator,
    RecordEstimator,
)


def _record(**fields):
    return MixtureEstimator([RecordEstimator(fields)] * 2)


def test_string_in_a_numeric_column() -> None:
    df = pd.DataFrame({"spend_eur": ["1.0", "12.5x"], "channel": ["a", "b"]})
    est = _record(spend_eur=GaussianEstimator(), channel=CategoricalEstimator())
    with pytest.raises(
        DataTypeError,
        match=r"column 'spend_eur': expected a .*number for GaussianEstimator.*'12.5x' \(row 2 of 2\)",
    ):
        optimize(df, est)


def test_string_in_python_records() -> None:
    rows = [{"spend_eur": 1.0}, {"spend_eur": "12.5x"}]
    with pytest.raises(
        DataTypeError,
        match=r"column 'spend_eur': expected a finite number for GaussianEstimator, "
        r"got string '12.5x' \(row 2 of 2\)",
    ):
        optimize(rows, RecordEstimator({"spend_eur": GaussianEstimator()}))


def test_nan_without_optional() -> None:
    df = pd.DataFrame({"x": [1.0, 2.0, np.nan, 4.0, np.nan]})
    with pytest.raises(DataValueError, match=r"column 'x': .*(nan|null).*row 3 of 5"):
        optimize(df, RecordEstimator({"x": GaussianEstimator()}))


def test_nan_with_optional_is_fine() -> None:
    df = pd.DataFrame({"x": [1.0, 2.0, np.nan, 4.0, np.nan, 3.0]})
    model = optimize(df, RecordEstimator({"x": OptionalEstimator(GaussianEstimator())}), max_its=3)
    assert model.fields["x"].p == pytest.approx(2 / 6, rel=1e-6)


def test_inf_in_chunked_data_reports_the_global_row() -> None:
    x = [0.5] * 1000
    x[777] = float("inf")
    with pytest.raises(DataValueError, match=r"got inf \(row 778 of 1000\)"):
        optimize(x, GaussianEstimator(), chunk_size=100)


def test_negative_count() -> None:
    table = pa.table({"n_items": pa.array([1, 0, -3, 2], pa.int64())})
    with pytest.raises(DataValueError, match=r"column 'n_items': .*non-negative integer.*-3.*row 3 of 4"):
        optimize(table, RecordEstimator({"n_items": PoissonEstimator()}))


def test_fractional_count() -> None:
    rows = [{"n": 1}, {"n": 2.5}]
    with pytest.raises(DataValueError, match=r"column 'n': .*integer.*2.5.*row 2 of 2"):
        optimize(rows, RecordEstimator({"n": PoissonEstimator()}))


def test_missing_column() -> None:
    df = pd.DataFrame({"amount": [1.0, 2.0]})
    with pytest.raises((SchemaError, DataValueError), match=r"'channel'"):
        optimize(df, RecordEstimator({"amount": GaussianEstimator(), "channel": CategoricalEstimator()}))


def test_one_column_model_on_a_wide_table() -> None:
    df = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]})
    with pytest.raises(SchemaError, match=r"reads one column but the data has 2: \['a', 'b'\]; pass column="):
        optimize(df, GaussianEstimator())
    model = optimize(df, GaussianEstimator(), column="b", max_its=2)
    assert model.mu == pytest.approx(3.5)


def test_unknown_spec_key_before_any_data() -> None:
    with pytest.raises(SpecError, match=r"unknown key 'pseudocount' in categorical spec"):
        estimator_from_spec({"type": "categorical", "pseudocount": 1})


def test_field_errors_keep_their_row_scope_through_pickling() -> None:
    import pickle

    from mixle_spark.errors import UnseenLabelError

    err = DataValueError("expected a count", value=-1, row=2, n_rows=10, count=3, path=("n",))
    assert str(err) == "column 'n': expected a count, got -1 (3 bad rows, first at row 3 of 10)"
    scoped = err.in_scope(4096, "partition 7")
    assert (
        str(scoped) == "column 'n': expected a count, got -1 (3 bad rows, first at row 4099 of partition 7)"
    )
    back = pickle.loads(pickle.dumps(scoped))
    assert type(back) is DataValueError and str(back) == str(scoped) and back.scope == "partition 7"
    unseen = pickle.loads(
        pickle.dumps(UnseenLabelError("label not in the vocabulary", row=0).in_scope(5, "the input"))
    )
    assert str(unseen) == "label not in the vocabulary (row 6 of the input)"


def test_local_and_mpi_weight_errors_read_like_spark_s() -> None:
    """One message for a bad weight on every backend: the column, the value, the first row, the count."""
    from mixle_spark.parallel import LocalEncodedData
    from mixle_spark.parallel.backends.mpi import _check_weights

    table = pa.table({"x": [1.0, 2.0, 3.0, 4.0], "w": [1.0, None, -1.0, 2.0]})
    with pytest.raises(
        DataValueError,
        match=r"^column 'w': weights must be finite and non-negative, got null "
        r"\(2 bad rows, first at row 2 of 4\)$",
    ):
        LocalEncodedData(table, estimator=GaussianEstimator(), weights="w", column="x")
    with pytest.raises(
        DataValueError, match=r"^weights must be finite and non-negative, got inf \(row 2 of 2\)$"
    ):
        LocalEncodedData([1.0, 2.0], estimator=GaussianEstimator(), weights=[1.0, np.inf])
    # an MPI rank holding rows 100.. of 1000 reports the table's row
    with pytest.raises(DataValueError, match=r"got -2\.0 \(row 102 of 1000\)$"):
        _check_weights(np.array([1.0, -2.0]), 100, 1000)


def test_a_misspelt_weight_or_data_column_names_the_close_one() -> None:
    from mixle_spark.parallel import LocalEncodedData

    table = pa.table({"amount": [1.0, 2.0, 3.0], "weight": [1.0, 1.0, 2.0]})
    with pytest.raises(SchemaError, match=r"^weight column 'wieght' not found \(did you mean 'weight'\?\)$"):
        LocalEncodedData(table, estimator=GaussianEstimator(), weights="wieght", column="amount")
    with pytest.raises(
        SchemaError, match=r"^column 'amout' not found \(did you mean 'amount'\?\); the data has"
    ):
        LocalEncodedData(table, estimator=GaussianEstimator(), weights="weight", column="amout")
