from graphready.findings import Severity, summarize
from graphready.output import render


def text(findings, **kwargs):
    return render("text", findings, summarize(findings, Severity.ERROR), tool="lint", **kwargs)


def test_finding_line_is_ruff_like_with_one_based_column(host_sync):
    out = text([host_sync()])
    assert "pkg/model.py:7:12: GR101 [error] `.item()` copies a device value to the host" in out
    assert "\x1b[" not in out  # plain text when not writing to a terminal


def test_source_line_and_caret_under_the_span_when_root_is_given(project, host_sync):
    lines = text([host_sync()], root=project).splitlines()
    code = next(i for i, line in enumerate(lines) if "peak = x.abs().max().item()" in line)
    caret = lines[code + 1]
    start = lines[code].index("x.abs()")
    assert caret.index("^") == start
    assert caret.count("^") == len("x.abs().max().item()")
    assert "peak =" not in text([host_sync()])  # no root, no snippet


def test_snippet_is_skipped_when_the_file_is_gone(project, host_sync):
    out = text([host_sync(path="pkg/deleted.py")], root=project)
    assert "pkg/deleted.py:7:12: GR101" in out and "^" not in out


def test_hot_chain_only_when_asked(host_sync):
    assert "hot chain: pkg.model:step -> pkg.model:post_block" in text([host_sync()], show_chain=True)
    assert "hot chain" not in text([host_sync()])


def test_statistics_table_counts_per_rule(host_sync):
    findings = [host_sync(), host_sync(line=8, baselined=True),
                host_sync(rule="GR104", name="dynamic-shape", severity=Severity.WARNING)]
    out = text(findings, statistics=True)
    row = next(line for line in out.splitlines() if "GR101" in line and "host-sync" in line and "│" in line)
    assert row.split("│")[4].strip() == "2" and row.split("│")[5].strip() == "1"
    assert "Statistics" not in text(findings)


def test_baselined_findings_are_marked_and_do_not_fail(host_sync):
    out = text([host_sync(baselined=True)])
    assert "GR101 [error] `.item()` copies a device value to the host (baseline)" in out
    assert "1 in the baseline; none failing (fail-on: error)." in out


def test_suppression_reason_is_never_printed(host_sync):
    out = text([host_sync(suppression_reason="SECRET-REASON")])
    assert "SECRET-REASON" not in out


def test_summary_line_for_failing_and_clean_runs(host_sync):
    findings = [host_sync(), host_sync(path="pkg/other.py", severity=Severity.WARNING)]
    assert ("graphready lint: 2 findings (1 error, 1 warning) in 2 files; 1 failing (fail-on: error)."
            in text(findings))
    assert "graphready lint: all clear, no findings." in text([])


def test_summary_line_says_what_graphready_failed_to_analyse(host_sync):
    failure = host_sync(rule="GR002", name="internal-error", line=6, message="graphready failed while analysing ...")
    summary = summarize([host_sync(), failure], Severity.ERROR)
    for counts, said in (({"files": 1, "functions": 0}, "1 file not analysed"),
                         ({"files": 2, "functions": 3}, "2 files and 3 functions not analysed"),
                         ({"files": 0, "functions": 0}, "graphready failed 1 time (GR002).")):
        summary.update(internal_errors=1, not_analysed=counts)
        line = render("text", [host_sync(), failure], summary, tool="lint").rstrip().splitlines()[-1]
        assert line.startswith("graphready lint: 2 findings (2 errors) in 1 file; 2 failing (fail-on: error); ")
        assert said in line


def test_units_table_for_check():
    units = [{"name": "layer0.attn", "status": "pass", "capture": "ok", "eager_ms": 2.0, "replay_ms": 0.5,
              "kernels": 12}]
    out = render("text", [], summarize([], Severity.ERROR), tool="check", units=units)
    row = next(line for line in out.splitlines() if "layer0.attn" in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]] == ["layer0.attn", "pass", "ok", "2.000", "0.500",
                                                               "4.00x", "12"]


def test_a_finding_that_names_only_its_line_underlines_the_code_not_the_indent(project, host_sync):
    lines = text([host_sync(column=0, end_column=0, rule="GD101")], root=project).splitlines()
    code = next(i for i, line in enumerate(lines) if "peak = x.abs().max().item()" in line)
    assert lines[code + 1].index("^") == lines[code].index("peak")
    assert lines[code + 1].rstrip().endswith("^") and len(lines[code + 1].rstrip()) == len(lines[code].rstrip())
