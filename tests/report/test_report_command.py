import json

from graphready.cli import main


def test_report_writes_html_and_markdown(results, tmp_path):
    html_out, md_out = tmp_path / "out" / "report.html", tmp_path / "out" / "report.md"
    code = main(["report", str(results["lint"]), str(results["check"]), "--baseline", str(results["baseline"]),
                 "--root", str(results["root"]), "--html", str(html_out), "--markdown", str(md_out)])
    assert code == 0
    page = html_out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "http://" not in page and "https://" not in page and "url(" not in page
    assert "a second sync &lt;b&gt;not bold&lt;/b&gt;" in page  # messages are escaped, never markup
    assert "GR101 host-sync" in page and "layers.0.mhc_post" in page
    md = md_out.read_text()
    assert "### 1. GR101 host-sync (error)" in md
    assert "| layers.0.attn | pass | ok | 3.200 | 0.800 | 4.00x | 112 | 112 |" in md
    assert "2 confirmed, 1 static only, 1 dynamic only" in md
    assert "### New (3)" in md and "### Fixed (1)" in md and "`pkg/gone.py` GR101" in md
    assert "  >7 |     peak = x.abs().max().item()" in md


def test_markdown_goes_to_stdout_when_no_output_is_named(results, capsys):
    assert main(["report", str(results["lint"]), "--root", str(results["root"])]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# graphready triage report") and "No baseline given" in out


def test_bad_inputs_exit_2_with_a_clear_message(results, tmp_path, capsys):
    not_json = tmp_path / "notes.txt"
    not_json.write_text("hello")
    wrong_shape = tmp_path / "list.json"
    wrong_shape.write_text("[1, 2]")
    future = tmp_path / "future.json"
    future.write_text(json.dumps({"version": 99, "findings": []}))
    bad_baseline = tmp_path / "bad-baseline.json"
    bad_baseline.write_text(json.dumps({"version": 1, "entries": [{"path": "a.py"}]}))
    cases = [
        ([str(tmp_path / "missing.json")], "results file not found: "),
        ([str(not_json)], "notes.txt: not JSON"),
        ([str(wrong_shape)], "not a graphready results document"),
        ([str(future)], "results version 99 is not supported"),
        ([str(results["lint"]), "--baseline", str(bad_baseline)], "is not a graphready baseline"),
        ([str(results["lint"]), "--baseline", str(tmp_path / "nope.json")], "baseline file not found: "),
    ]
    for argv, message in cases:
        assert main(["report", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("graphready report: error: ") and message in err and "Traceback" not in err


def test_a_rule_with_many_findings_folds_the_rest_into_details(tmp_path):
    from graphready.findings import Finding, Severity, report_to_json, summarize

    findings = [Finding("pkg/big.py", n, 0, "GR101", "host-sync", Severity.ERROR, f"sync number {n}")
                for n in range(1, 14)]
    doc = tmp_path / "lint.json"
    doc.write_text(json.dumps(report_to_json(findings, summarize(findings, Severity.ERROR))))
    page = tmp_path / "report.html"
    assert main(["report", str(doc), "--html", str(page), "--root", str(tmp_path)]) == 0
    html = page.read_text()
    visible, folded = html.split("<details>")
    assert visible.count("sync number") == 10 and folded.count("sync number") == 3
    assert "<summary>3 more GR101 findings</summary>" in folded
