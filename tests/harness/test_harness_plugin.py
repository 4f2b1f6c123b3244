"""The pytest plugin is imported by every pytest run: it must not import torch at import time."""

from __future__ import annotations

import subprocess
import sys

from graphready.harness.pytest_plugin import describe
from graphready.harness.result import UnitResult, make_finding


def test_plugin_and_package_import_without_torch():
    code = (
        "import sys, graphready.harness, graphready.harness.pytest_plugin, graphready.harness.command;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_helpers_are_exported_lazily_from_the_package():
    import graphready.harness as harness
    from graphready.harness.pytest_plugin import assert_graph_ready

    assert harness.assert_graph_ready is assert_graph_ready


def test_describe_lists_every_finding_with_its_location():
    result = UnitResult(name="u")
    result.findings.append(make_finding("GD301", "replay differs", unit="u", path="m.py", line=3))
    text = describe(result)
    assert "unit 'u': fail" in text
    assert "m.py:3: GD301 replay-mismatch: replay differs" in text


def test_catalog_has_a_check_entry_with_examples_for_every_gd_code():
    from graphready.catalog import load_catalog
    from graphready.harness.result import CHECK_NAMES

    catalog = load_catalog()
    for code, name in CHECK_NAMES.items():
        doc = catalog[code]
        assert doc.kind == "check" and doc.name == name
        assert doc.bad and doc.good
