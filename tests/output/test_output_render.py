import json

import pytest

from graphready.errors import UsageError
from graphready.findings import Finding, Severity, summarize
from graphready.output import FORMATS, render


def test_every_format_renders_a_finding_and_an_empty_run(host_sync):
    for fmt in FORMATS:
        found = render(fmt, [host_sync()], summarize([host_sync()], Severity.ERROR), tool="lint")
        clean = render(fmt, [], summarize([], Severity.ERROR), tool="lint")
        assert found.endswith("\n") and "pkg/model.py" in found
        assert "pkg/model.py" not in clean
        assert clean == "" or clean.endswith("\n")


def test_unknown_format_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown output format 'xml'.*text, json, sarif, github, junit"):
        render("xml", [], summarize([], Severity.ERROR), tool="lint")


def test_json_is_the_public_contract_and_round_trips(host_sync):
    finding = host_sync(baselined=True)
    units = [{"name": "layer0", "status": "pass", "eager_ms": 2.0, "replay_ms": 0.5, "kernels": 12}]
    doc = json.loads(render("json", [finding], summarize([finding], Severity.ERROR), tool="check", units=units))
    assert doc["version"] == 2 and doc["tool"] == "check" and doc["units"] == units
    assert doc["summary"]["baselined"] == 1
    assert Finding.from_json(doc["findings"][0]) == finding
