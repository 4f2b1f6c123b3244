"""`--format junit`: JUnit XML for CI test dashboards.

Every finding is a test case of its own (dashboards show only the first failure of a case), named
`path:line:column RULE` and grouped by file (`lint`) or unit (`check`). A finding's case fails
only when the finding fails the run (not baselined, severity at or above `fail_on`), so the
dashboard agrees with the exit code; the others are skipped cases that say why. graphready's own
failures (GR002, GD001) are errored cases, as a test harness's own errors are. A clean run is one
passing case; a checked unit without findings is one passing case.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from graphready.findings import Finding, Severity
from graphready.output.document import Document

NO_UNIT = "(outside any unit)"


def render(doc: Document) -> str:
    fail_on = Severity.parse(doc.summary.get("fail_on", "error"))
    suite_name = f"graphready.{doc.tool}"
    if doc.units is not None:
        cases = _unit_cases(doc.findings, doc.units, suite_name, fail_on)
    else:
        cases = _file_cases(doc.findings, suite_name, fail_on)
    suites = ET.Element("testsuites", name="graphready")
    suite = ET.SubElement(suites, "testsuite", name=suite_name)
    suite.extend(cases)
    _count(suite, cases)
    _count(suites, cases)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _file_cases(findings: list[Finding], suite_name: str, fail_on: Severity) -> list[ET.Element]:
    if not findings:  # a clean run is still one passing case, not an empty suite
        return [ET.Element("testcase", classname=suite_name, name=suite_name.replace(".", " "), time="0")]
    return [_finding_case(f, f"{suite_name}.{f.path}", fail_on) for f in sorted(findings, key=Finding.sort_key)]


def _unit_cases(findings: list[Finding], units: list[dict], suite_name: str,
                fail_on: Severity) -> list[ET.Element]:
    by_unit: dict[str, list[Finding]] = {}
    names = {str(u.get("name")) for u in units}
    for finding in sorted(findings, key=Finding.sort_key):
        by_unit.setdefault(finding.unit if finding.unit in names else NO_UNIT, []).append(finding)
    cases = []
    for unit in units:
        name = str(unit.get("name"))
        seconds = (float(unit.get("eager_ms") or 0) + float(unit.get("replay_ms") or 0)) / 1000
        found = by_unit.pop(name, [])
        if unit.get("status") == "error" or not found:  # the unit itself: it ran clean, or could not run
            case = ET.Element("testcase", classname=f"{suite_name}.{name}", name=name, time=f"{seconds:.6f}")
            if unit.get("status") == "error":
                reason = str(unit.get("error") or "the unit could not be checked")
                ET.SubElement(case, "error", type="error", message=reason).text = reason
            cases.append(case)
            seconds = 0.0
        for finding in found:
            case = _finding_case(finding, f"{suite_name}.{name}", fail_on)
            case.set("time", f"{seconds:.6f}")  # the unit's time, counted once
            seconds = 0.0
            cases.append(case)
    cases += [_finding_case(f, f"{suite_name}.{NO_UNIT}", fail_on) for f in by_unit.get(NO_UNIT, [])]
    return cases


def _finding_case(finding: Finding, classname: str, fail_on: Severity) -> ET.Element:
    location = f"{finding.path}:{finding.line}:{finding.column + 1}"
    case = ET.Element("testcase", classname=classname, name=f"{location} {finding.rule}",
                      file=finding.path, line=str(finding.line), time="0")
    text = f"{location}: {finding.rule} [{finding.severity.label}] {finding.message}"
    if finding.hot_chain:
        text += "\n    hot chain: " + " -> ".join(finding.hot_chain)
    if finding.internal:  # graphready itself failed here: an error of the run, not a failing verdict
        error = ET.SubElement(case, "error", type=finding.rule,
                              message=f"{finding.rule} {finding.name}: {finding.message}")
        error.text = text
    elif finding.baselined or finding.severity < fail_on:
        why = "in the baseline" if finding.baselined else f"{finding.severity.label} is below fail-on"
        ET.SubElement(case, "skipped", message=f"{finding.rule} {finding.name}: {why}").text = text
    else:
        failure = ET.SubElement(case, "failure", type=finding.rule,
                                message=f"{finding.rule} {finding.name}: {finding.message}")
        failure.text = text
    return case


def _count(element: ET.Element, cases: list[ET.Element]) -> None:
    element.set("tests", str(len(cases)))
    element.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    element.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    element.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    element.set("time", f"{sum(float(c.get('time', 0)) for c in cases):.6f}")
