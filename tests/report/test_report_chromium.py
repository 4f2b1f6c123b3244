"""Render the HTML report in headless Chromium at 1280 px and at a phone's 390 px: no sideways scrolling,
chart labels inside the window, bars drawn to scale, and the units table stacked on the phone."""

import html as htmllib
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from graphready.lint.baseline import load_baseline
from graphready.report.html import render_html
from graphready.report.inputs import load_result
from graphready.report.triage import build_triage

WIDTHS = (1280, 390)
PROBE = """<script>
const width = window.innerWidth;
const texts = [...document.querySelectorAll("svg.chart text")];
const bars = {};
for (const rect of document.querySelectorAll("svg.chart rect")) {
  const title = rect.querySelector("title");
  if (title) bars[title.textContent] = rect.getBoundingClientRect().width;
}
const head = document.querySelector("table.units thead");
document.body.setAttribute("data-probe", JSON.stringify({
  width: width,
  fits: document.documentElement.scrollWidth <= width,
  text_outside: texts.filter(t => t.getBoundingClientRect().right > width + 1).length,
  texts: texts.length,
  bars: bars,
  units_head: head ? getComputedStyle(head).display : null,
}));
</script>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    pytest.skip("no Chromium binary on PATH (apt-get install chromium) to render the report")


def run_chromium(tmp_path: Path, page: Path, *mode: str, width: int = 1280) -> str:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", f"--window-size={width},2000", *mode, page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def probe(tmp_path: Path, html: str, width: int) -> dict:
    """What Chromium's own layout measured of the page `width` px wide (see PROBE).

    The page is laid out in an iframe of that width: headless Chromium keeps a window at least 500 px
    wide while it dumps the DOM (a screenshot is taken at the width asked for)."""
    probed = htmllib.escape(html.replace("</body>", PROBE + "</body>"), quote=True)
    page = tmp_path / f"probe-{len(list(tmp_path.glob('probe-*')))}.html"
    page.write_text(f'<!DOCTYPE html><html><body style="margin:0"><iframe style="width:{width}px;height:2000px;'
                    f'border:0" onload="document.body.setAttribute(\'data-probe\', '
                    f'this.contentDocument.body.getAttribute(\'data-probe\'))" srcdoc="{probed}"></iframe>'
                    "</body></html>")
    dom = run_chromium(tmp_path, page, "--dump-dom", width=max(width, 1280))
    found = re.search(r'<body[^>]*data-probe="([^"]*)"', dom)
    assert found, dom[-2000:]
    return json.loads(htmllib.unescape(found.group(1)))


def report_html(results) -> str:
    docs = [load_result(results["lint"]), load_result(results["check"])]
    triage = build_triage(docs, results["root"], baseline=load_baseline(results["baseline"]),
                          baseline_path=results["baseline"])
    return render_html(triage)


@pytest.mark.parametrize("width", WIDTHS)
def test_report_renders_without_horizontal_scrolling(results, tmp_path, width):
    html = report_html(results)
    seen = probe(tmp_path, html, width)
    assert seen["width"] == width and seen["fits"]
    # The probe can fail: the same long line outside the report's wrapping rules overflows.
    assert not probe(tmp_path, "<html><body><pre>" + "x" * 400 + "</pre></body></html>", width)["fits"]

    page = tmp_path / "report.html"
    page.write_text(html)
    shot = tmp_path / f"report-{width}.png"
    run_chromium(tmp_path, page, f"--screenshot={shot}", width=width)
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">I", header[16:20])[0] == width


@pytest.mark.parametrize("width", WIDTHS)
def test_chart_is_drawn_to_scale_with_its_labels_inside_the_window(results, tmp_path, width):
    seen = probe(tmp_path, report_html(results), width)
    assert seen["texts"] > 10 and seen["text_outside"] == 0
    eager, replay = seen["bars"]["layers.0.attn eager: 3.200 ms"], seen["bars"]["layers.0.attn graph replay: 0.800 ms · 4.00x"]
    assert eager > 200 and eager / replay == pytest.approx(4, rel=0.02)


def test_units_table_stacks_into_cards_on_a_phone(results, tmp_path):
    html = report_html(results)
    assert probe(tmp_path, html, 1280)["units_head"] == "table-header-group"
    assert probe(tmp_path, html, 390)["units_head"] == "none"
