"""Where findings came from: tool version, dates, the settings each run used, totals and evidence labels."""

import argparse
import json
from datetime import datetime

from graphready import __version__
from graphready.cli import main
from graphready.findings import Severity, report_to_json
from graphready.harness.command import build_report, check_settings
from graphready.harness.result import UnitResult
from graphready.report.html import render_html
from graphready.report.inputs import load_result
from graphready.report.markdown import render_markdown
from graphready.report.triage import EVIDENCE_HELP, EVIDENCE_LABELS, EVIDENCE_ORDER, build_triage


def reports(results, *names):
    triage = build_triage([load_result(results[name]) for name in names])
    return render_markdown(triage), render_html(triage)


def test_json_documents_record_the_graphready_version_date_and_root(tmp_path):
    doc = report_to_json([], {}, tool="lint", root=tmp_path)
    assert doc["run"]["graphready"] == __version__
    assert datetime.fromisoformat(doc["run"]["created"]).utcoffset() is not None
    assert doc["run"]["root"] == str(tmp_path.resolve())
    assert "root" not in report_to_json([], {}, tool="lint")["run"]


def test_lint_json_records_the_config_file_and_the_effective_settings(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.graphready]\nhot-paths = ["pkg.m:f"]\nfail-on = "error"\nignore = ["GR6"]\n'
        'severity = { GR301 = "warning" }\n')
    out = tmp_path / "lint.json"
    assert main(["lint", str(tmp_path), "--select", "GR1", "--format", "json", "--no-cache", "--output", str(out)]) == 0
    config = json.loads(out.read_text())["summary"]["config"]
    assert config == {"file": str(tmp_path / "pyproject.toml"), "fail-on": "error", "hot-paths": ["pkg.m:f"],
                      "select": ["GR1"], "ignore": ["GR6"], "severity": {"GR301": "warning"}}


def test_check_json_records_what_check_was_asked_to_do(tmp_path):
    args = argparse.Namespace(target="dsv4", steps=4, gpus=2, jobs=1, timeout=60.0, capture_alloc_limit_mb=256.0,
                              unit=["layer0"], cold_capture=False, time_limit=None)
    settings = check_settings(args, Severity.WARNING, json.dumps({"preset": "tiny"}))
    args.time_limit = 900.0
    assert check_settings(args, Severity.WARNING, "{}")["time-limit"] == 900.0
    results = [UnitResult(name="layer0", capture="ok", eager_ms=1.0, replay_ms=0.5, kernels=3, graph_kernels=3)]
    doc = json.loads(build_report(results, Severity.WARNING, "json", tmp_path, settings=settings))
    assert doc["summary"]["config"] == {"target": "dsv4", "fail-on": "warning", "steps": 4, "gpus": 2, "jobs": 1,
                                        "timeout": 60.0, "capture-alloc-limit-mb": 256.0, "unit": ["layer0"],
                                        "preset": "tiny"}
    assert doc["run"]["root"] == str(tmp_path.resolve())


def test_report_shows_version_dates_and_settings_of_every_run(results):
    created = load_result(results["lint"]).created
    recorded = datetime.fromisoformat(created).strftime("%Y-%m-%d %H:%M UTC")
    md, page = reports(results, "lint", "check")
    assert md.splitlines()[2].startswith("Made ") and f"by graphready {__version__} from" in md.splitlines()[2]
    runs = md.split("## Runs and settings")[1]
    assert f"lint by graphready {__version__}, {recorded}, in {results['root']}." in runs
    assert "| `hot-paths` | `pkg.model:*.step_graphable` |" in runs and "| `select` | `GR1` |" in runs
    assert "| `target` | `pkg.units:units` |" in runs and "| `steps` | `8` |" in runs
    html_runs = page.split("<h2>Runs and settings</h2>")[1]
    assert f"lint by graphready {__version__}, {recorded}" in html_runs
    assert "<tr><th>hot-paths</th><td>pkg.<wbr>model:<wbr>*.<wbr>step_graphable</td></tr>" in html_runs
    assert "<tr><th>target</th><td>pkg.<wbr>units:<wbr>units</td></tr>" in html_runs


def test_a_document_without_a_run_record_says_so(tmp_path):
    legacy = tmp_path / "old.json"
    legacy.write_text(json.dumps({"version": 1, "tool": "lint", "findings": [], "summary": {}}))
    triage = build_triage([load_result(legacy)])
    for text in (render_markdown(triage), render_html(triage)):
        assert "an older graphready (no run record), date not recorded" in text
        assert "Settings not recorded: written by an older graphready." in text


def test_severity_totals_and_evidence_explanations(results):
    md, page = reports(results, "lint", "check")
    assert "- **4** findings: 3 errors, 1 warning, 0 info" in md
    for evidence in EVIDENCE_ORDER:
        assert f"- **{EVIDENCE_LABELS[evidence]}**: {EVIDENCE_HELP[evidence]}" in md
    cards = page.split('<div class="cards">')[1].split("</div></div></div>")[0]
    for number, label in (("4", "findings"), ("3", "errors"), ("1", "warnings"), ("0", "info")):
        assert f'>{number}</div><div class="label">{label}</div>' in cards
    assert "saw it break on the GPU at a line <code>lint</code> did not flag: a static blind spot." in page
    lint_only, _ = reports(results, "lint")
    assert "- **2** findings: 2 errors, 0 warnings, 0 info" in lint_only


def test_a_malformed_run_record_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "findings": [], "run": {"root": 5}}))
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "'run' must be an object whose 'root', 'graphready' and 'created' are strings" in err
    assert "Traceback" not in err
