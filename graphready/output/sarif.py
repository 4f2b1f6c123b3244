"""`--format sarif`: SARIF 2.1.0 for GitHub code scanning (`github/codeql-action/upload-sarif`).

GitHub keys alerts on `ruleId`, the relative file path and `partialFingerprints`, so paths stay
relative to `%SRCROOT%` and every result carries our line-independent fingerprint.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

from graphready import __version__
from graphready.catalog import RuleDoc, load_catalog
from graphready.findings import Finding, Severity
from graphready.output.document import Document

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"
FINGERPRINT_KEY = "graphready/v1"
LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def render(doc: Document) -> str:
    return json.dumps(sarif_document(doc.findings, tool=doc.tool, root=doc.root), indent=2) + "\n"


def sarif_document(findings: list[Finding], *, tool: str, root: Path | None = None) -> dict:
    catalog = load_catalog()
    kind = "check" if tool == "check" else "lint"
    rule_ids = sorted({code for code, doc in catalog.items() if doc.kind == kind} | {f.rule for f in findings})
    rules = [_rule(code, catalog.get(code), findings) for code in rule_ids]
    index = {code: i for i, code in enumerate(rule_ids)}
    run: dict = {
        "tool": {
            "driver": {
                "name": "graphready",
                "semanticVersion": __version__,
                "version": __version__,
                "rules": rules,
            }
        },
        "automationDetails": {"id": f"graphready/{tool}/"},
        "columnKind": "unicodeCodePoints",
        "results": [_result(f, index[f.rule]) for f in sorted(findings, key=Finding.sort_key)],
    }
    if root is not None:
        run["originalUriBaseIds"] = {SRCROOT: {"uri": Path(root).resolve().as_uri() + "/"}}
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _rule(code: str, doc: RuleDoc | None, findings: list[Finding]) -> dict:
    if doc is None:  # a code the catalog does not (yet) document: describe it from the finding itself
        example = next(f for f in findings if f.rule == code)
        return {
            "id": code,
            "name": example.name or code,
            "shortDescription": {"text": example.name or code},
            "defaultConfiguration": {"level": LEVELS[example.severity]},
        }
    markdown = doc.markdown()
    return {
        "id": code,
        "name": doc.name,
        "shortDescription": {"text": doc.summary},
        "fullDescription": {"text": " ".join(doc.what.split())},
        "help": {"text": markdown, "markdown": markdown},
        "defaultConfiguration": {"level": LEVELS[doc.severity]},
        "properties": {"tags": ["cuda-graphs", doc.kind]},
    }


def _result(finding: Finding, rule_index: int) -> dict:
    result: dict = {
        "ruleId": finding.rule,
        "ruleIndex": rule_index,
        "level": LEVELS[finding.severity],
        "message": {"text": _message(finding)},
        "locations": [{"physicalLocation": _physical_location(finding)}],
        "baselineState": "unchanged" if finding.baselined else "new",
    }
    if finding.fingerprint:
        result["partialFingerprints"] = {FINGERPRINT_KEY: finding.fingerprint}
    properties = {}
    if finding.hot_chain:
        properties["hotChain"] = list(finding.hot_chain)
    if finding.unit:
        properties["unit"] = finding.unit
    if finding.evidence is not None:
        properties["evidence"] = finding.evidence.value
    if properties:
        result["properties"] = properties
    return result


def _message(finding: Finding) -> str:
    text = finding.message or finding.name
    if finding.hot_chain:
        text += " (hot chain: " + " -> ".join(finding.hot_chain) + ")"
    return text


def _physical_location(finding: Finding) -> dict:
    """Our columns are 0-based with an exclusive end; SARIF's are 1-based with an exclusive end."""
    region = {"startLine": max(1, finding.line), "startColumn": finding.column + 1}
    end_line = max(finding.end_line, finding.line)
    if end_line > finding.line or finding.end_column > finding.column:
        region["endLine"] = end_line
        region["endColumn"] = finding.end_column + 1
    # A zero-width span leaves endColumn out, which SARIF reads as "to the end of the line".
    if finding.path.startswith("/"):  # a file outside the directory lint ran in
        location = {"uri": Path(finding.path).as_uri()}
    else:
        location = {"uri": urllib.parse.quote(finding.path), "uriBaseId": SRCROOT}
    return {"artifactLocation": location, "region": region}
