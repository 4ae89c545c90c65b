"""The fit report in headless Chromium: the page loads without console errors, every section is in
the rendered DOM, every figure decodes, and the screenshot shows coloured figures.

Needs ``chromium`` on PATH (Debian: ``apt-get install chromium chromium-driver``); skipped otherwise.
Chromium runs in a subprocess (``--dump-dom`` / ``--screenshot``) with a throw-away profile.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.report import PLOT_HINT, SECTIONS, write_report
from mixle_spark.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    RecordDistribution,
    RecordEstimator,
)

pytestmark = pytest.mark.browser

TIMEOUT = 120
# Test-only instrumentation (the report itself has no script): report broken images and errors.
PROBE = """<script>
window.addEventListener("error", function (e) {
  console.log("REPORT-ERROR " + (e.message || e.target.tagName));
}, true);
window.addEventListener("load", function () {
  var broken = 0;
  for (var i = 0; i < document.images.length; i++) {
    if (!document.images[i].complete || document.images[i].naturalWidth === 0) { broken++; }
  }
  console.log("REPORT-CHECK images=" + document.images.length + " broken=" + broken
              + " svgs=" + document.querySelectorAll("svg").length);
});
</script>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium is not installed (Debian: apt-get install chromium chromium-driver)")


def _run_chromium(page: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [
        _chromium(),
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *flags,
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _console(stderr: str, page: Path) -> list[str]:
    """Console messages (logs, errors, uncaught exceptions) that ``page`` produced."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line and page.resolve().as_uri() in line]


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag == "section":
            self.sections.append(dict(attrs).get("id") or "")


def read_png(data: bytes) -> np.ndarray:
    """A tiny PNG decoder (8-bit, non-interlaced grey / RGB / RGBA): array of shape (h, w, channels)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", data[pos + 8 : pos + 8 + length])
        elif kind == b"IDAT":
            idat.append(data[pos + 8 : pos + 8 + length])
        pos += 12 + length
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0 and color in (0, 2, 4, 6), header
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    raw, stride = zlib.decompress(b"".join(idat)), width * bpp
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int64)
    for y in range(height):
        kind_of_filter = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int64)
        if kind_of_filter == 0:
            cur = line
        elif kind_of_filter == 1:  # Sub: a running sum per channel
            cur = line.reshape(-1, bpp).cumsum(axis=0).reshape(-1) & 255
        elif kind_of_filter == 2:  # Up
            cur = (line + prev) & 255
        else:  # Average / Paeth: byte by byte
            cur = np.array(_unfilter(kind_of_filter, line.tolist(), prev.tolist(), bpp), dtype=np.int64)
        out[y], prev = cur, cur
    return out.reshape(height, width, bpp)


def _unfilter(kind: int, cur: list[int], up: list[int], bpp: int) -> list[int]:
    for x in range(len(cur)):
        a = cur[x - bpp] if x >= bpp else 0
        if kind == 3:
            cur[x] = (cur[x] + ((a + up[x]) >> 1)) & 255
            continue
        b, c = up[x], up[x - bpp] if x >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        cur[x] = (cur[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return cur


def _model_and_sample() -> tuple[Any, list[dict[str, Any]]]:
    truth = MixtureDistribution(
        [
            RecordDistribution(
                {
                    "x": GaussianDistribution(-2.0, 1.0),
                    "y": GaussianDistribution(0.0, 1.0),
                    "c": CategoricalDistribution({"a": 0.8, "b": 0.2}),
                }
            ),
            RecordDistribution(
                {
                    "x": GaussianDistribution(3.0, 1.0),
                    "y": GaussianDistribution(2.0, 0.5),
                    "c": CategoricalDistribution({"a": 0.1, "b": 0.9}),
                }
            ),
        ],
        [0.5, 0.5],
    )
    rows = truth.sampler(4).sample(300)
    fields = {"x": GaussianEstimator(), "y": GaussianEstimator(), "c": CategoricalEstimator()}
    model = optimize(rows, MixtureEstimator([RecordEstimator(fields)] * 2), max_its=200, delta=1e-6, seed=2)
    return model, rows


@pytest.fixture(scope="module", params=["matplotlib", "plain"])
def page(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str]]:
    """``(report.html, variant)``: with matplotlib figures, and plain (matplotlib made unimportable)."""
    _chromium()
    model, rows = _model_and_sample()
    path = tmp_path_factory.mktemp(f"report_{request.param}") / "report.html"
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "matplotlib":
            pytest.importorskip("matplotlib")
        else:
            for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
                patch.setitem(sys.modules, name, None)
            patch.setitem(sys.modules, "matplotlib", None)
        write_report(model, path, sample=rows, title="Browser check")
    yield path, request.param


def test_the_page_loads_without_console_errors_and_shows_every_section(
    page: tuple[Path, str], tmp_path: Path
) -> None:
    path, variant = page
    proc = _run_chromium(path, tmp_path / "profile", "--dump-dom")
    assert _console(proc.stderr, path) == []  # no errors, no uncaught exceptions, no logs at all
    dom = _Dom()
    dom.feed(proc.stdout)
    assert dom.sections == list(SECTIONS)
    assert dom.tags.get("h2") == len(SECTIONS) and dom.tags.get("table", 0) >= 6
    if variant == "matplotlib":
        assert dom.tags.get("img") == 3 and "svg" not in dom.tags
    else:
        assert dom.tags.get("svg") == 1 and "img" not in dom.tags
        assert PLOT_HINT in proc.stdout


def test_every_figure_decodes_in_the_browser(page: tuple[Path, str], tmp_path: Path) -> None:
    path, variant = page
    probed = tmp_path / "probed.html"
    probed.write_text(
        path.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8"
    )
    proc = _run_chromium(probed, tmp_path / "profile", "--dump-dom")
    console = _console(proc.stderr, probed)
    assert not any("REPORT-ERROR" in line or "Uncaught" in line for line in console), console
    expected = "images=3 broken=0 svgs=0" if variant == "matplotlib" else "images=0 broken=0 svgs=1"
    assert [line for line in console if "REPORT-CHECK" in line and expected in line], console


def test_the_screenshot_shows_coloured_figures(page: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = page
    shot = tmp_path / "shot.png"
    _run_chromium(
        path, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1000,2600", "--hide-scrollbars"
    )
    pixels = read_png(shot.read_bytes())[..., :3].astype(np.float64) / 255
    assert pixels.shape[:2] == (2600, 1000)
    assert pixels.std() > 0.05  # not a blank page
    ink = (pixels.min(axis=2) < 0.5).mean()
    colour = (pixels.max(axis=2) - pixels.min(axis=2) > 0.3).mean()  # figure lines, bars and points
    assert ink > 0.005 and colour > 0.002, (ink, colour)
    image = pytest.importorskip("matplotlib.image")  # the tiny decoder agrees with matplotlib's
    np.testing.assert_allclose(pixels, image.imread(shot)[..., :3], atol=1e-6)
