"""`--format junit`: JUnit XML for CI test dashboards.

`lint` becomes one test case per file and `check` one per unit. A finding is a `<failure>` only
when it fails the run (not baselined, severity at or above `fail_on`), so the dashboard agrees
with the exit code; the rest are listed in the case's `<system-out>`.
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
    by_path: dict[str, list[Finding]] = {}
    for finding in sorted(findings, key=Finding.sort_key):
        by_path.setdefault(finding.path, []).append(finding)
    if not by_path:  # a clean run is still one passing case, not an empty suite
        return [ET.Element("testcase", classname=suite_name, name=suite_name.replace(".", " "), time="0")]
    cases = []
    for path, found in by_path.items():
        case = ET.Element("testcase", classname=suite_name, name=path, file=path, time="0")
        _add_findings(case, found, fail_on)
        cases.append(case)
    return cases


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
        case = ET.Element("testcase", classname=suite_name, name=name, time=f"{seconds:.6f}")
        if unit.get("status") == "error":  # the unit could not be checked to the end
            reason = str(unit.get("error") or "the unit could not be checked")
            ET.SubElement(case, "error", type="error", message=reason).text = reason
        _add_findings(case, by_unit.pop(name, []), fail_on)
        cases.append(case)
    if NO_UNIT in by_unit:
        case = ET.Element("testcase", classname=suite_name, name=NO_UNIT, time="0")
        _add_findings(case, by_unit[NO_UNIT], fail_on)
        cases.append(case)
    return cases


def _add_findings(case: ET.Element, findings: list[Finding], fail_on: Severity) -> None:
    notes = []
    for finding in findings:
        line = (f"{finding.path}:{finding.line}:{finding.column + 1}: {finding.rule} "
                f"[{finding.severity.label}] {finding.message}")
        if finding.hot_chain:
            line += "\n    hot chain: " + " -> ".join(finding.hot_chain)
        if finding.baselined or finding.severity < fail_on:
            notes.append(line + (" (baseline)" if finding.baselined else ""))
            continue
        failure = ET.SubElement(case, "failure", type=finding.rule,
                                message=f"{finding.rule} {finding.name}: {finding.message}")
        failure.text = line
    if notes:
        ET.SubElement(case, "system-out").text = "\n".join(notes)


def _count(element: ET.Element, cases: list[ET.Element]) -> None:
    element.set("tests", str(len(cases)))
    element.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    element.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    element.set("time", f"{sum(float(c.get('time', 0)) for c in cases):.6f}")
