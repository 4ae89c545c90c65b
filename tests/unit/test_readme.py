"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

from mixle_spark.cli._arguments import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_blocks_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        if block.startswith("# spark"):
            continue  # run by tests/spark/test_readme_spark.py
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})  # a warning of ours fails


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_readme_jobs_section_names_every_em_fit_option() -> None:
    jobs = _section(README.read_text(), "## Jobs: fit and score tables")
    options = [o for action in build_parser()._actions for o in action.option_strings]
    options = [o for o in options if o not in ("-h", "--help")]
    assert "--k" in options and "--criterion" in options and "--report" in options
    missing = [o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", jobs)]
    assert missing == [], f"README's Jobs section does not mention em_fit's {', '.join(missing)}"


def test_readme_first_screen_shows_the_two_commands() -> None:
    first_screen = "\n".join(README.read_text().splitlines()[:20])
    assert "make demo" in first_screen and "make test" in first_screen


def test_the_package_table_names_every_family() -> None:
    """The README's one-line family list (the package table's `mixle_spark.stats` row) names every
    distribution class the package exports."""
    from mixle_spark import stats

    row = next(line for line in README.read_text().splitlines() if line.startswith("| `mixle_spark.stats` |"))
    families = {
        name[: -len("Distribution")]
        for name in stats.__all__
        if name.endswith("Distribution") and name != "Distribution"
    }
    missing = sorted(f for f in families if not re.search(rf"\b{f}\b", row))
    assert missing == []
