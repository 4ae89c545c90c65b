"""The README and the pages under docs/: their Python examples run as written (the Spark ones in
tests/spark/test_readme_spark.py), their links point to files that exist, and the README names every
em_fit option and every family."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mixle_spark.cli._arguments import build_parser
from tests._markdown import README, ROOT, broken_links, page_id, pages, python_blocks

PAGES_WITH_PYTHON = [page for page in pages() if python_blocks(page)]


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON, ids=page_id)
def test_python_blocks_run(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # examples read data/ and conf/ as a user in a clone does
    for block in python_blocks(page):
        if block.spark or not block.runs:
            block.compiled()  # run by tests/spark/test_readme_spark.py, or an outline
        else:
            block.run()


def test_readme_first_screen_shows_the_two_commands() -> None:
    first_screen = "\n".join(README.read_text().splitlines()[:20])
    assert "make demo" in first_screen and "make test" in first_screen


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_relative_links_point_to_existing_files(page: Path) -> None:
    assert broken_links(page) == []


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


def _families() -> set[str]:
    from mixle_spark import stats

    return {
        name[: -len("Distribution")]
        for name in stats.__all__
        if name.endswith("Distribution") and name != "Distribution"
    }


def test_the_package_table_names_every_family() -> None:
    """The README's one-line family list (the package table's `mixle_spark.stats` row) names every
    distribution class the package exports."""
    row = next(line for line in README.read_text().splitlines() if line.startswith("| `mixle_spark.stats` |"))
    assert sorted(f for f in _families() if not re.search(rf"\b{f}\b", row)) == []
