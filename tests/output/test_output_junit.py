import xml.etree.ElementTree as ET

from graphready.findings import Severity, summarize
from graphready.output import render


def junit(findings, tool="lint", units=None, fail_on=Severity.ERROR):
    out = render("junit", findings, summarize(findings, fail_on), tool=tool, units=units)
    return ET.fromstring(out.encode())


def test_lint_is_one_case_per_file_with_a_failure_per_finding(host_sync):
    root = junit([host_sync(), host_sync(line=8), host_sync(path="pkg/b.py")])
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "graphready.lint"
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert set(cases) == {"pkg/model.py", "pkg/b.py"}
    failures = cases["pkg/model.py"].findall("failure")
    assert [f.get("type") for f in failures] == ["GR101", "GR101"]
    assert failures[0].text.startswith("pkg/model.py:7:12: GR101 [error]")
    assert (suite.get("tests"), suite.get("failures"), root.get("failures")) == ("2", "2", "2")


def test_findings_that_do_not_fail_the_run_are_listed_not_failed(host_sync):
    root = junit([host_sync(baselined=True), host_sync(line=9, severity=Severity.WARNING)])
    (case,) = root.iter("testcase")
    assert case.find("failure") is None
    notes = case.find("system-out").text
    assert "(baseline)" in notes and "GR101 [warning]" in notes
    assert root.find("testsuite").get("failures") == "0"


def test_clean_lint_is_one_passing_case():
    root = junit([])
    (case,) = root.iter("testcase")
    assert case.find("failure") is None and root.get("tests") == "1"


def test_check_is_one_case_per_unit_timed_by_eager_plus_replay(host_sync):
    units = [
        {"name": "layer0", "status": "pass", "eager_ms": 3.0, "replay_ms": 1.5},
        {"name": "layer1", "status": "error", "error": "capture poisoned the context"},
        {"name": "layer2", "status": "pass", "eager_ms": 1.0, "replay_ms": 0.5},
    ]
    findings = [host_sync(rule="GD201", name="capture-failed", unit="layer0"),
                host_sync(rule="GD202", name="replay-mismatch", unit=None)]
    root = junit(findings, tool="check", units=units)
    suite = root.find("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert list(cases) == ["layer0", "layer1", "layer2", "(outside any unit)"]
    assert float(cases["layer0"].get("time")) == 0.0045
    assert cases["layer0"].find("failure").get("type") == "GD201"
    assert cases["layer1"].find("error").get("message") == "capture poisoned the context"
    assert cases["layer2"].find("failure") is None and cases["layer2"].find("error") is None
    assert cases["(outside any unit)"].find("failure").get("type") == "GD202"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "1")
