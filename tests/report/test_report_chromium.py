"""Render the HTML report in headless Chromium: it must fit 1280 px without sideways scrolling."""

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from graphready.lint.baseline import load_baseline
from graphready.report.html import render_html
from graphready.report.inputs import load_result
from graphready.report.triage import build_triage

WIDTH = 1280
PROBE = """<script>
document.body.setAttribute("data-fits",
  String(document.documentElement.scrollWidth <= window.innerWidth));
</script>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    pytest.skip("no Chromium binary on PATH (apt-get install chromium) to render the report")


def run_chromium(tmp_path: Path, page: Path, *mode: str) -> str:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", f"--window-size={WIDTH},2000", *mode, page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def fits(tmp_path: Path, html: str) -> bool:
    """Whether the page is no wider than the window, measured by Chromium's own layout."""
    probe = tmp_path / f"probe-{len(list(tmp_path.glob('probe-*')))}.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"))
    dom = run_chromium(tmp_path, probe, "--dump-dom")
    assert 'data-fits="' in dom
    return 'data-fits="true"' in dom


def report_html(results) -> str:
    docs = [load_result(results["lint"]), load_result(results["check"])]
    triage = build_triage(docs, results["root"], baseline=load_baseline(results["baseline"]),
                          baseline_path=results["baseline"])
    return render_html(triage)


def test_report_renders_at_1280px_without_horizontal_scrolling(results, tmp_path):
    html = report_html(results)
    assert fits(tmp_path, html)
    # The probe can fail: the same long line outside the report's wrapping rules overflows.
    assert not fits(tmp_path, "<html><body><pre>" + "x" * 400 + "</pre></body></html>")

    page = tmp_path / "report.html"
    page.write_text(html)
    shot = tmp_path / "report.png"
    run_chromium(tmp_path, page, f"--screenshot={shot}")
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">I", header[16:20])[0] == WIDTH
