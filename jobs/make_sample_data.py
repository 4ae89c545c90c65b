"""Write the bundled sample data set (data/customers_sample.parquet) from a known true model.

The true model is printed and saved beside the data (``*.truth.json``) so a fit can be compared
with it. Deterministic: the same seed writes the same file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mixle_spark.spec import save_model
from mixle_spark.stats import (
    CategoricalDistribution,
    LogGaussianDistribution,
    MixtureDistribution,
    PoissonDistribution,
    RecordDistribution,
    SequenceDistribution,
)


def true_model() -> MixtureDistribution:
    """Three customer segments: occasional web shoppers, store regulars, and big app spenders."""

    def segment(mu: float, s2: float, channels: dict, items: float, tags: dict, n_tags: float):
        return RecordDistribution(
            {
                "amount": LogGaussianDistribution(mu, s2),
                "channel": CategoricalDistribution(channels),
                "n_items": PoissonDistribution(items),
                "tags": SequenceDistribution(CategoricalDistribution(tags), PoissonDistribution(n_tags)),
            }
        )

    return MixtureDistribution(
        [
            segment(
                2.5,
                0.30,
                {"web": 0.7, "store": 0.2, "app": 0.1},
                1.5,
                {"books": 0.5, "music": 0.3, "garden": 0.2},
                1.0,
            ),
            segment(
                3.5,
                0.20,
                {"web": 0.1, "store": 0.8, "app": 0.1},
                4.0,
                {"food": 0.6, "garden": 0.3, "books": 0.1},
                2.5,
            ),
            segment(
                5.0,
                0.50,
                {"web": 0.2, "store": 0.1, "app": 0.7},
                8.0,
                {"electronics": 0.6, "music": 0.2, "sports": 0.2},
                4.0,
            ),
        ],
        [0.5, 0.3, 0.2],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", default="data/customers_sample.parquet")
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    model = true_model()
    rows = model.sampler(args.seed).sample(args.rows)
    table = pa.Table.from_pylist(
        rows,
        schema=pa.schema(
            [
                ("amount", pa.float64()),
                ("channel", pa.string()),
                ("n_items", pa.int64()),
                ("tags", pa.list_(pa.string())),
            ]
        ),
    )
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    save_model(model, out.with_suffix(".truth.json"), overwrite=True)
    print(f"wrote {table.num_rows} rows to {out} (true model in {out.with_suffix('.truth.json')})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
