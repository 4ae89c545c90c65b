"""``mixle_spark.scoring.score``: one entry point, the frame's engine picks the backend; a frame no
engine holds is refused by type, naming what it takes."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

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
