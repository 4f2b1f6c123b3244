"""What do I fix first: root causes ranked by severity, check evidence, hot-path fan-in, then count."""

import json
from pathlib import Path

from graphready.cli import main
from graphready.findings import Finding, Severity
from graphready.report.html import render_html
from graphready.report.inputs import ResultDocument, load_result
from graphready.report.markdown import render_markdown
from graphready.report.triage import build_triage


def gr(rule: str, line: int, callers: int | None = None, function: str = "pkg.m:f",
       severity: Severity = Severity.ERROR) -> Finding:
    return Finding("pkg/m.py", line, 0, rule, rule.lower(), severity, f"{rule} at {line}",
                   hot_chain=["pkg.m:step", function], hot_callers=callers)


def lint_doc(*findings: Finding) -> ResultDocument:
    return ResultDocument(path=Path("lint.json"), tool="lint", findings=list(findings), units=[])


def order(*documents: ResultDocument) -> list[str]:
    return [cause.rule for cause in build_triage(list(documents), Path(".")).causes]


def test_hot_path_fan_in_decides_between_equally_severe_causes():
    assert order(lint_doc(gr("GR101", 3, callers=0), gr("GR201", 9, callers=4))) == ["GR201", "GR101"]
    assert order(lint_doc(gr("GR101", 3, callers=4), gr("GR201", 9, callers=0))) == ["GR101", "GR201"]


def test_fan_in_counts_each_function_once():
    same = build_triage([lint_doc(gr("GR101", 3, 2, "pkg.m:f"), gr("GR101", 4, 2, "pkg.m:f"))], Path("."))
    apart = build_triage([lint_doc(gr("GR101", 3, 2, "pkg.m:f"), gr("GR101", 9, 2, "pkg.m:g"))], Path("."))
    assert same.causes[0].fan_in == 2 and apart.causes[0].fan_in == 4


def test_a_finding_check_saw_on_the_gpu_outranks_fan_in_and_count():
    lint = lint_doc(gr("GR101", 3), gr("GR201", 9, callers=5), gr("GR201", 10, callers=5), gr("GR201", 11))
    check = ResultDocument(path=Path("check.json"), tool="check", units=[], findings=[
        Finding("pkg/m.py", 3, 0, "GD101", "sync", Severity.ERROR, "synced", unit="u")])
    assert order(lint) == ["GR201", "GR101"]
    ranked = order(lint, check)
    assert ranked.index("GR101") < ranked.index("GR201") and ranked.index("GD101") < ranked.index("GR201")


def test_severity_comes_first_and_follows_the_configured_severity():
    warning = gr("GR101", 3, callers=9, severity=Severity.WARNING)  # the project lowered GR101 to warning
    assert order(lint_doc(warning, gr("GR201", 9))) == ["GR201", "GR101"]
    assert order(lint_doc(gr("GR101", 3, callers=9), gr("GR201", 9))) == ["GR101", "GR201"]
    cause = build_triage([lint_doc(warning)], Path(".")).causes[0]
    assert cause.severity is Severity.WARNING


def test_fix_first_lists_the_ranking_in_markdown_and_html():
    triage = build_triage([lint_doc(gr("GR101", 3, callers=0), gr("GR201", 9, callers=4),
                                    gr("GR201", 12, callers=4, function="pkg.m:g"))], Path("."))
    md = render_markdown(triage)
    fix_first = md.split("## Fix first")[1].split("## ")[0]
    assert "Ranked by severity, then findings `check` saw on the GPU" in fix_first
    assert ("| 1 | [GR201 dynamic-shape](#1-gr201-dynamic-shape-error) | error | 2 | 0 | 8 | `pkg/m.py:9` |" in fix_first)
    assert "| 2 | [GR101 host-sync](#2-gr101-host-sync-error) | error | 1 | 0 | 0 | `pkg/m.py:3` |" in fix_first
    assert "### 1. GR201 dynamic-shape (error)" in md and "### 2. GR101 host-sync (error)" in md
    page = render_html(triage)
    ranking = page.split('<ol class="ranking">')[1].split("</ol>")[0]
    assert ranking.index('href="#GR201"') < ranking.index('href="#GR101"')
    assert "2 findings · 0 seen by check · 8 hot callers" in ranking


PROJECT = """import torch
from graphready import hot_path


def shared(x):
    return {shared}


def single(x):
    return {single}


@hot_path
def step_a(x):
    return shared(x) + single(x)


@hot_path
def step_b(x):
    return shared(x)
"""
SYNC, COUNT = "x.sum().item()", "torch.bincount(x)"


def lint_json(tmp_path: Path, name: str, shared: str, single: str) -> Path:
    """Real `graphready lint --format json` on a project where both hot steps call `shared`, one `single`."""
    project = tmp_path / name
    (project / "pkg").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[tool.graphready]\n")
    (project / "pkg" / "model.py").write_text(PROJECT.format(shared=shared, single=single))
    out = tmp_path / f"{name}.json"
    assert main(["lint", str(project), "--format", "json", "--no-cache", "--output", str(out)]) == 1
    return out


def test_lint_records_hot_callers_and_the_report_ranks_by_them(tmp_path):
    sync_shared = lint_json(tmp_path, "sync_shared", shared=SYNC, single=COUNT)
    callers = {f["rule"]: f["hot_callers"] for f in json.loads(sync_shared.read_text())["findings"]}
    assert callers == {"GR101": 2, "GR201": 1}
    assert order(load_result(sync_shared)) == ["GR101", "GR201"]

    count_shared = lint_json(tmp_path, "count_shared", shared=COUNT, single=SYNC)
    callers = {f["rule"]: f["hot_callers"] for f in json.loads(count_shared.read_text())["findings"]}
    assert callers == {"GR101": 1, "GR201": 2}
    assert order(load_result(count_shared)) == ["GR201", "GR101"]


def test_fan_in_that_was_not_recorded_is_shown_as_unknown_not_zero():
    check = ResultDocument(path=Path("check.json"), tool="check", units=[], findings=[
        Finding("pkg/m.py", 3, 0, "GD201", "capture-failed", Severity.ERROR, "failed", unit="u")])
    triage = build_triage([lint_doc(gr("GR101", 9, callers=0)), check], Path("."))
    md = render_markdown(triage)
    assert "| error | 1 | 1 | - | `pkg/m.py:3` |" in md  # GD201: check records no call graph
    assert "| error | 1 | 0 | 0 | `pkg/m.py:9` |" in md  # GR101: recorded, and nobody hot calls it
    page = render_html(triage)
    assert "1 finding · 1 seen by check · start at" in page and "1 finding · 0 seen by check · 0 hot callers" in page
