"""The pages as a person sees them: each rendered by headless Chromium (Debian's `chromium`, which
`scripts/setup.sh --test` installs), its DOM read after layout and a screenshot decoded: the
title, a value, a verdict, a chart drawn in its colour, the flagged GPU on top, and, from the
browser's own network log, no request leaving the page."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("jinja2")
pytest.importorskip("matplotlib")

from test_report_html import COMMITTED, ROOT, Page, comparison_page, cuda_page, planted_fleet, render  # noqa: E402
from test_fleet import uuid_of  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/setup.sh "
                                                          "--test installs it): the pages were not opened in a browser")]

WIDTH = 1400
# The browser's own traffic (updates, sync, spelling) is turned off, and nothing resolves: a
# request the page made would be logged, never sent.
QUIET = ["--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-domain-reliability", "--host-resolver-rules=MAP * ~NOTFOUND"]
CHART_BLUE = (0x1f, 0x77, 0xb4)          # matplotlib's first line colour (tab:blue)
FLAG_RED = (200, 40, 40)                 # report/html.py WORSE_RGB, a cell 10% or more worse
PASS_GREEN = (0x2f, 0x8f, 0x46)          # the template's --good: the word `pass`


def chromium(folder: Path, *args: str) -> subprocess.CompletedProcess:
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []      # Chromium refuses root otherwise
    return subprocess.run([CHROMIUM, *QUIET, *sandbox, f"--user-data-dir={folder}", *args],
                          capture_output=True, text=True, timeout=60)


def opened(page: Path, height: int | None) -> dict:
    """The page's DOM after layout with the browser's network log, and its screenshot (RGB rows)
    unless `height` is None."""
    from matplotlib.image import imread
    work = page.parent / f"{page.stem}-browser"
    work.mkdir()
    url = page.resolve().as_uri()
    netlog, shot = work / "net.json", work / "shot.png"
    dom = chromium(work / "a", f"--log-net-log={netlog}", "--dump-dom", url)
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    seen = {"dom": dom.stdout, "requests": page_requests(netlog)}
    if height is None:
        return seen
    taken = chromium(work / "b", f"--screenshot={shot}", f"--window-size={WIDTH},{height}", url)
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    return {**seen, "pixels": (imread(shot)[:, :, :3] * 255).round()}


def page_requests(netlog: Path) -> list[str]:
    """The URLs the page asked for: the log's request jobs that have an initiator (the page's
    origin; the browser's own have none)."""
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in log["events"] if e["type"] == start and "url" in e.get("params", {})
            and e["params"].get("initiator") != "not an origin"]


def where(pixels, rgb, tolerance=12):
    """The rows of the pixels within `tolerance` of `rgb` in every channel."""
    import numpy as np
    return np.nonzero(np.all(np.abs(pixels - np.array(rgb)) <= tolerance, axis=-1))[0]


def near(pixels, rgb, tolerance=12) -> int:
    return len(where(pixels, rgb, tolerance))


def inked(pixels) -> float:
    """The share of pixels that are not white."""
    return float((pixels.min(axis=-1) < 245).mean())


@pytest.fixture(scope="module")
def shown(tmp_path_factory) -> dict:
    """The run, comparison and fleet pages, a page that fetches (the check's own check) and the
    pages committed under results/ (no screenshot), opened in Chromium at once."""
    folder = tmp_path_factory.mktemp("pages")
    pages = {"run": cuda_page(), "comparison": comparison_page(),
             "fleet": render(*planted_fleet().items()),
             "fetching": '<html><body><p>x</p><img src="http://example.invalid/a.png"></body></html>'}
    heights = {"run": 3300, "comparison": 1200, "fleet": 900, "fetching": 300}
    for name, text in pages.items():
        (folder / f"{name}.html").write_text(text)
    paths = {name: folder / f"{name}.html" for name in pages}
    for path in COMMITTED:
        name = str(path.relative_to(ROOT))
        paths[name], heights[name] = folder / name.replace("/", "-"), None
        paths[name].write_bytes(path.read_bytes())
    with ThreadPoolExecutor(4) as pool:
        found = {name: pool.submit(opened, path, heights[name]) for name, path in paths.items()}
        return {name: future.result() for name, future in found.items()}


def test_the_network_log_sees_a_page_that_fetches(shown):
    assert shown["fetching"]["requests"] == ["http://example.invalid/a.png"]


@pytest.mark.parametrize("name", ["run", "comparison", "fleet", *(str(p.relative_to(ROOT)) for p in COMMITTED)])
def test_no_request_leaves_the_page(shown, name):
    assert shown[name]["requests"] == []
    assert "</html>" in shown[name]["dom"] and "<h1>peakbench" in shown[name]["dom"]


def test_the_run_page_shows_its_title_values_verdicts_and_drawn_charts(shown):
    seen = shown["run"]
    dom = Page(seen["dom"])
    assert "<title>peakbench: NVIDIA H200, cuda</title>" in seen["dom"]
    assert "NVIDIA H200 · cuda 0" in dom.words
    assert "compute.fp32 66.2 TFLOPS 66.9 98.9% 98.9% 1980 silicon 99% of the per-clock peak" in dom.words
    assert dom.tags.count("svg") == 2 and dom.tags.count("path") > 30
    assert inked(seen["pixels"]) > 0.05
    assert near(seen["pixels"], CHART_BLUE) > 400          # the sweeps' lines and markers, drawn


def test_the_comparison_page_shows_its_words_and_both_runs(shown):
    seen = shown["comparison"]
    words = Page(seen["dom"]).words
    assert "matrix.fp16.fp32 TFLOPS 650.3 873.1 1.34x faster" in words
    assert "memory.copy GB/s 4300.0 4254.0 0.99x slower" in words
    assert "NVIDIA H200 · vulkan 0" in words and "NVIDIA H200 · cuda 0" in words
    assert inked(seen["pixels"]) > 0.05


def test_the_fleet_page_shows_the_flagged_gpu_on_top(shown):
    seen = shown["fleet"]
    dom = Page(seen["dom"])
    rows = [attrs.get("class") for tag, attrs in dom.attributes if tag == "tr" and (attrs.get("class") or "").startswith("v-")]
    assert rows[0] == "v-flagged" and set(rows[1:]) == {"v-pass"} and len(rows) == 8
    first_row = seen["dom"].split('<tr class="v-flagged">')[1].split("</tr>")[0]
    assert f"node2 <span class=\"mono\">{uuid_of(2, 1)[:8]}</span>" in first_row
    assert "compute.fp32 59.6 TFLOPS is 10.0% under the median 66.2" in dom.words
    # On the screen: its two flagged cells in full red, in one row, above every `pass`.
    red, green = where(seen["pixels"], FLAG_RED, 6), where(seen["pixels"], PASS_GREEN, 24)
    assert len(red) > 2 * 30 * 15 and red.max() - red.min() < 40
    assert len(green) > 100 and green.min() > red.max()
