import xml.etree.ElementTree as ET

from graphready.findings import Severity, summarize
from graphready.output import render


def junit(findings, tool="lint", units=None, fail_on=Severity.ERROR):
    out = render("junit", findings, summarize(findings, fail_on), tool=tool, units=units)
    return ET.fromstring(out.encode())


def test_lint_is_one_case_per_finding(host_sync):
    """Dashboards show only the first failure of a case: two findings in one file are two cases."""
    root = junit([host_sync(), host_sync(line=8), host_sync(path="pkg/b.py")])
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "graphready.lint"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["pkg/b.py:7:12 GR101", "pkg/model.py:7:12 GR101",
                                              "pkg/model.py:8:12 GR101"]
    assert [c.get("classname") for c in cases][1:] == ["graphready.lint.pkg/model.py"] * 2
    assert all(len(c.findall("failure")) == 1 for c in cases)
    assert cases[1].find("failure").text.startswith("pkg/model.py:7:12: GR101 [error]")
    assert (suite.get("tests"), suite.get("failures"), root.get("failures")) == ("3", "3", "3")


def test_findings_that_do_not_fail_the_run_are_skipped_cases_that_say_why(host_sync):
    root = junit([host_sync(baselined=True), host_sync(line=9, severity=Severity.WARNING)])
    cases = list(root.iter("testcase"))
    assert len(cases) == 2 and all(case.find("failure") is None for case in cases)
    reasons = [case.find("skipped").get("message") for case in cases]
    assert reasons == ["GR101 host-sync: in the baseline", "GR101 host-sync: warning is below fail-on"]
    assert root.find("testsuite").get("failures") == "0" and root.find("testsuite").get("skipped") == "2"


def test_clean_lint_is_one_passing_case():
    root = junit([])
    (case,) = root.iter("testcase")
    assert case.find("failure") is None and root.get("tests") == "1"


def test_check_is_a_case_per_finding_grouped_by_unit_and_a_case_per_clean_unit(host_sync):
    units = [
        {"name": "layer0", "status": "pass", "eager_ms": 3.0, "replay_ms": 1.5},
        {"name": "layer1", "status": "error", "error": "capture poisoned the context"},
        {"name": "layer2", "status": "pass", "eager_ms": 1.0, "replay_ms": 0.5},
    ]
    findings = [host_sync(rule="GD201", name="capture-failed", unit="layer0"),
                host_sync(rule="GD301", name="replay-mismatch", unit="layer0", line=9),
                host_sync(rule="GD202", name="replay-mismatch", unit=None)]
    root = junit(findings, tool="check", units=units)
    suite = root.find("testsuite")
    cases = [(c.get("classname"), c.get("name"), c) for c in suite.findall("testcase")]
    assert [(k, n) for k, n, _ in cases] == [
        ("graphready.check.layer0", "pkg/model.py:7:12 GD201"),
        ("graphready.check.layer0", "pkg/model.py:9:12 GD301"),
        ("graphready.check.layer1", "layer1"),
        ("graphready.check.layer2", "layer2"),
        ("graphready.check.(outside any unit)", "pkg/model.py:7:12 GD202"),
    ]
    assert float(cases[0][2].get("time")) == 0.0045 and float(cases[1][2].get("time")) == 0  # counted once
    assert [c.find("failure").get("type") for _, _, c in cases if c.find("failure") is not None] == [
        "GD201", "GD301", "GD202"]
    assert cases[2][2].find("error").get("message") == "capture poisoned the context"
    assert cases[3][2].find("failure") is None and cases[3][2].find("error") is None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "3", "1")
