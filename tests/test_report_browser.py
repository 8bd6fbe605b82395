"""The report in a real browser: headless Chromium renders the tiny run's report.html; the screenshot is not blank
and every image loaded. Controls (a blank page, a broken image) show both checks can fail."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from pipeline_support import tiny_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(CHROMIUM is None,
                                                  reason="chromium is not installed; .ci/ensure-chromium installs "
                                                         "Debian's package (apt-get install chromium)")]

# Marks the body, once the page has loaded, with its number of images and the alt texts of those that did not load.
IMAGE_CHECK = ("<script>window.addEventListener('load', () => { const images = [...document.images]; "
               "document.body.dataset.images = images.length; document.body.dataset.broken = images"
               ".filter(i => !i.complete || i.naturalWidth === 0).map(i => i.alt).join('|'); });</script>")


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    return tiny_run(spark, tmp_path_factory)


def _chromium(page: Path, profile: Path, *arguments: str) -> str:
    completed = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         f"--user-data-dir={profile}", "--virtual-time-budget=10000", *arguments, page.as_uri()],
        capture_output=True, text=True, timeout=180, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return completed.stdout


def _images(text: str, tmp_path: Path, name: str) -> tuple[int, str]:
    """(images on the page, alt texts of those that did not load) as Chromium saw them."""
    page = tmp_path / f"{name}.html"
    page.write_text(text.replace("</body>", IMAGE_CHECK + "</body>"), encoding="utf-8")
    body = re.search(r"<body[^>]*>", _chromium(page, tmp_path / "profile", "--dump-dom")).group(0)
    count, broken = re.search(r'data-images="(\d+)"', body), re.search(r'data-broken="([^"]*)"', body)
    assert count and broken, f"the load check did not run: {body}"
    return int(count.group(1)), broken.group(1)


def _screenshot_spread(text: str, tmp_path: Path, name: str) -> float:
    """Standard deviation of the grey levels of a 1280 x 2400 screenshot (0 for a blank page)."""
    from PIL import Image

    page, shot = tmp_path / f"{name}.html", tmp_path / f"{name}.png"
    page.write_text(text, encoding="utf-8")
    _chromium(page, tmp_path / "profile", "--window-size=1280,2400", f"--screenshot={shot}")
    return float(np.asarray(Image.open(shot).convert("L"), dtype=np.float64).std())


def test_report_renders_in_chromium_with_every_image_loaded(run, tmp_path):
    text = run.report_text
    images, broken = _images(text, tmp_path, "report")
    assert images == text.count("<img ") == run.result.step("report").result.figures > 0
    assert broken == "", f"images that did not load: {broken}"
    assert _screenshot_spread(text, tmp_path, "report") > 20

    damaged = re.sub(r"base64,[A-Za-z0-9+/=]{64}", "base64,AAAA", text, count=1)
    assert _images(damaged, tmp_path, "damaged")[1] != ""
    assert _screenshot_spread("<!doctype html><html><body></body></html>", tmp_path, "blank") < 1
