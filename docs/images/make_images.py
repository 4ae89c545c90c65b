"""Redraw the pictures of docs/: ``python docs/images/make_images.py`` (needs chromium and matplotlib).

``segment_profile.png``: the segment-profile section of the report of the bundled sample's fit
(``--backend local``, the sample spec's fit options), rendered by headless Chromium and cropped to
its content.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def main() -> int:
    browser = next(
        (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
    )
    if browser is None:
        print("make_images: chromium is needed (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    from matplotlib.image import imread, imsave

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fit"
        job = [
            sys.executable,
            str(ROOT / "jobs" / "em_fit.py"),
            "--backend",
            "local",
            "--input",
            str(ROOT / "data" / "customers_sample.parquet"),
            "--model",
            str(ROOT / "conf" / "models" / "sample.json"),
            "--output",
            str(out),
            "--report",
            "--quiet",
        ]
        subprocess.run(job, check=True, cwd=ROOT, capture_output=True)
        page = (out / "report.html").read_text(encoding="utf-8")
        head = page[: page.index("<body>") + len("<body>")]
        section = re.search(r'<section id="segments">.*?</section>', page, re.S)
        assert section is not None
        trimmed = Path(tmp) / "segments.html"
        trimmed.write_text(head + section.group(0) + "</body></html>", encoding="utf-8")
        shot = Path(tmp) / "shot.png"
        subprocess.run(
            [
                browser,
                "--headless",
                "--disable-gpu",
                "--no-sandbox",
                "--no-first-run",
                f"--user-data-dir={tmp}/profile",
                f"--screenshot={shot}",
                "--window-size=1100,1400",
                "--hide-scrollbars",
                trimmed.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        pixels = imread(shot)[..., :3]
        ink = np.where((pixels < 0.97).any(axis=2))
        bottom, right = int(ink[0].max()) + 16, int(ink[1].max()) + 16
        imsave(HERE / "segment_profile.png", pixels[:bottom, :right])
    print(f"wrote {HERE / 'segment_profile.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
