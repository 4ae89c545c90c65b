"""The README and the pages under docs/: their Python examples run as written (the Spark ones in
tests/spark/test_readme_spark.py), their links point to files that exist, the README stays a front
page, and the pages that document a surface name all of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mixle_spark.cli._arguments import build_parser
from tests._markdown import (
    DOCS,
    README,
    ROOT,
    broken_links,
    missing_named_paths,
    page_id,
    pages,
    python_blocks,
)

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


def test_readme_is_a_front_page_with_a_spark_fit_near_the_top() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 400, f"README.md has {len(lines)} lines; move a topic to docs/"
    spark = [b for b in python_blocks(README) if b.spark]
    assert spark, "README has no Spark example"
    first = spark[0]
    last_line = first.line + first.code.count("\n") - 1
    assert last_line <= 80, f"README's first Spark example ends at line {last_line}, not within the first 80"
    assert "read_table" in first.code and "optimize" in first.code and "score(" in first.code


def test_readme_links_every_docs_page() -> None:
    targets = re.findall(r"\]\((docs/[^)#]+)", README.read_text())
    linked = {Path(target).name for target in targets}
    assert sorted(p.name for p in DOCS.glob("*.md") if p.name not in linked) == []


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_relative_links_point_to_existing_files(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_the_files_a_page_names_exist(page: Path) -> None:
    assert missing_named_paths(page) == []


def test_jobs_page_names_every_em_fit_option() -> None:
    jobs = (DOCS / "jobs.md").read_text()
    options = [o for action in build_parser()._actions for o in action.option_strings]
    options = [o for o in options if o not in ("-h", "--help")]
    assert "--k" in options and "--criterion" in options and "--report" in options
    missing = [o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", jobs)]
    assert missing == [], f"docs/jobs.md does not mention em_fit's {', '.join(missing)}"


def _families() -> set[str]:
    from mixle_spark import stats

    return {
        name[: -len("Distribution")]
        for name in stats.__all__
        if name.endswith("Distribution") and name != "Distribution"
    }


def test_the_package_table_names_every_family() -> None:
    """The package map's one-line family list (the `mixle_spark.stats` row) names every distribution
    class the package exports."""
    text = (DOCS / "package-map.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `mixle_spark.stats` |"))
    assert sorted(f for f in _families() if not re.search(rf"\b{f}\b", row)) == []


def test_the_families_page_names_every_family() -> None:
    text = (DOCS / "families.md").read_text()
    assert sorted(f for f in _families() if not re.search(rf"\b{f}\b", text)) == []
