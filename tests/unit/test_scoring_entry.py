"""``mixle_spark.scoring.score``: one entry point, the frame's engine picks the backend; a frame no
engine holds is refused by type, naming what it takes."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from mixle_spark.errors import SchemaError
from mixle_spark.scoring import score
from mixle_spark.stats import GaussianDistribution


@pytest.mark.parametrize(
    "frame", [pa.table({"x": [1.0, 2.0]}), pd.DataFrame({"x": [1.0, 2.0]}), [1.0, 2.0]], ids=type
)
def test_a_frame_no_engine_holds_is_refused_naming_what_score_takes(frame: object) -> None:
    with pytest.raises(TypeError, match="a pyspark DataFrame, a Dask DataFrame or a Ray Dataset") as err:
        score(GaussianDistribution(0.0, 1.0), frame)
    assert type(frame).__name__ in str(err.value)


def test_bad_options_fail_before_the_frame_is_looked_at() -> None:
    with pytest.raises(ValueError, match="on_unseen"):
        score(GaussianDistribution(0.0, 1.0), pa.table({"x": [1.0]}), on_unseen="drop")


def test_a_scored_frame_without_the_models_column_names_the_closest() -> None:
    """What every engine's score checks first (the frame's column names against the model's)."""
    from mixle_spark.parallel.backends._scoring import data_columns
    from mixle_spark.stats import CategoricalEstimator, GaussianEstimator, RecordEstimator

    encoder = RecordEstimator({"amount": GaussianEstimator(), "chanel": CategoricalEstimator()}).encoder()
    with pytest.raises(
        SchemaError,
        match=r"^column 'chanel' not found \(did you mean 'channel'\?\); the DataFrame has columns "
        r"\['amount', 'channel'\]$",
    ):
        data_columns(["amount", "channel"], encoder, None)
    with pytest.raises(SchemaError, match=r"^column 'x' not found; the DataFrame has columns \['amount'\]$"):
        data_columns(["amount"], GaussianEstimator().encoder(), "x")
