"""Every example in the rule catalog is a test: bad ones fire exactly their marked (line, code)
pairs and nothing else; good ones stay silent."""

from __future__ import annotations

import pytest

from graphready.catalog import load_catalog

# GR002 reports graphready's own failures: no source makes a fixed graphready fail, so it has no examples;
# tests/lint/test_internal_errors.py plants the failures that make it fire.
LINT_RULES = [doc for doc in load_catalog().values() if doc.kind == "lint" and doc.code != "GR002"]
CASES = [
    pytest.param(doc, kind, index, example, id=f"{doc.code}-{kind}{index}")
    for doc in LINT_RULES
    for kind, examples in (("bad", doc.bad), ("good", doc.good))
    for index, example in enumerate(examples)
]


def test_every_lint_rule_has_two_bad_and_two_good_examples():
    codes = {doc.code for doc in LINT_RULES}
    assert {"GR000", "GR001", "GR101", "GR602"} <= codes
    for doc in LINT_RULES:
        assert len(doc.bad) >= 2 and len(doc.good) >= 2, doc.code
        for example in doc.bad:
            assert doc.code in {code for _, code in example.expected()}, f"{doc.code}: a bad example never marks it"


@pytest.mark.parametrize(("doc", "kind", "index", "example"), CASES)
def test_catalog_example(lint_project, doc, kind, index, example):
    result = lint_project({example.filename: example.code}, example.config)
    got = {(f.line, f.rule) for f in result.findings}
    if kind == "bad":
        assert example.expected(), "a bad example must mark at least one line"
        assert got == example.expected(), "\n".join(f"{f.line}: {f.rule} {f.message}" for f in result.findings)
    else:
        assert got == set(), "\n".join(f"{f.line}: {f.rule} {f.message}" for f in result.findings)
