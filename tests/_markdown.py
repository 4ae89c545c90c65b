"""The README and the pages under docs/ as the tests read them: the pages, their python blocks (run
as tests) and their relative links.

A ```python block runs as written, from the repository's root, with these exceptions: a block whose
first line is ``# spark`` runs on the shared Spark session (tests/spark/test_readme_spark.py); a block
whose first line is ``# not run`` (say why on that line) and an outline that elides code with ``...``
(a sketch of a class, say) are only compiled.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCED = re.compile(r"^```[^\n]*\n.*?^```", flags=re.S | re.M)
_PYTHON = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# a file or folder of the repository named in a code span: `mixle_spark/io/_tables.py`, `conf/models/`
_NAMED_PATH = re.compile(r"`((?:mixle_spark|jobs|conf|tests|notebooks|data|docs)/[^`\s*<>{}]*)`")


def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Block:
    """One ```python block of a page; ``line`` is the page's line of the block's first code line."""

    page: Path
    line: int
    code: str

    @property
    def spark(self) -> bool:
        return self.code.startswith("# spark")

    @property
    def runs(self) -> bool:
        """False for a block marked ``# not run`` and for an outline that elides code with ``...``."""
        if self.code.startswith("# not run"):
            return False
        return not any(
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node.value.value is ...
            for node in ast.walk(ast.parse(self.code))
        )

    def compiled(self) -> object:
        """The block compiled so that a traceback names the page and its line."""
        return compile("\n" * (self.line - 1) + self.code, str(self.page), "exec")

    def run(self) -> None:
        exec(self.compiled(), {"__name__": "readme"})  # a warning of ours fails the test


def python_blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [
        Block(page, text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for match in _PYTHON.finditer(text)
    ]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCED.sub("", page.read_text())
    return {_slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def relative_links(page: Path) -> list[str]:
    """The targets of the page's links and images outside code blocks, but for web addresses."""
    text = _FENCED.sub("", page.read_text())
    return [target for target in _LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def broken_links(page: Path) -> list[str]:
    """The page's relative links whose file (or, into a Markdown page, heading) does not exist."""
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    return broken


def missing_named_paths(page: Path) -> list[str]:
    """The repository paths the page names in code spans (outside code blocks) that do not exist, so
    that a moved or renamed module shows up here."""
    text = _FENCED.sub("", page.read_text())
    return [path for path in _NAMED_PATH.findall(text) if not (ROOT / path).exists()]
