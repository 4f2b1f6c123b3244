"""Inline suppressions and the GR000 report of stale ones."""

from __future__ import annotations

import textwrap

HEADER = "import torch\nfrom graphready import hot_path\n\n\n@hot_path\ndef f(x: torch.Tensor, y: torch.Tensor):\n"


def _module(*body: str) -> dict[str, str]:
    return {"mod.py": HEADER + textwrap.indent("\n".join(body), "    ") + "\n"}


def test_each_suppression_form_silences_its_line(lint_project):
    result = lint_project(_module(
        "a = x.item()  # graphready: ignore[GR101] warm-up only, runs before capture",
        "b = x.tolist()  # graphready: ignore",
        "c = x.cpu()  # noqa: GR101",
        "d = y.item()",
    ))
    assert [(f.line, f.rule) for f in result.findings] == [(10, "GR101")]
    reasons = {f.line: f.suppression_reason for f in result.suppressed}
    assert reasons == {7: "warm-up only, runs before capture", 8: None, 9: None}


def test_a_suppression_for_another_code_does_not_hide_the_finding(lint_project):
    result = lint_project(_module("a = x.item()  # graphready: ignore[GR201]"))
    assert sorted((f.line, f.rule) for f in result.findings) == [(7, "GR000"), (7, "GR101")]


def test_unused_suppressions_are_reported(lint_project):
    result = lint_project(_module(
        "a = x + y  # graphready: ignore",
        "b = x * y  # noqa: GR101",
        "c = x - y  # noqa: E501",
    ))
    assert [(f.line, f.rule) for f in result.findings] == [(7, "GR000"), (8, "GR000")]
    assert "GR101" in result.findings[1].message


def test_unused_suppression_of_a_deselected_code_is_not_reported(lint_project):
    result = lint_project(_module("a = x + y  # noqa: GR101"), select=["GR3", "GR000"])
    assert result.findings == []


def test_a_suppression_of_an_opt_in_code_is_judged_only_when_that_code_runs(lint_project):
    """`ignore[GR301]` on a buffer the graph pool serves: GR301 is off by default, so the run cannot tell."""
    allocation = _module("buf = torch.empty_like(x)  # graphready: ignore[GR301] the graph pool serves it")
    assert lint_project(allocation).findings == []
    assert [f.rule for f in lint_project(allocation, select=["GR301"]).suppressed] == ["GR301"]
    stale = _module("b = x * y  # graphready: ignore[GR301]")
    assert [(f.rule, f.line) for f in lint_project(stale, select=["GR301", "GR000"]).findings] == [("GR000", 7)]


def test_a_hash_inside_a_string_is_not_a_suppression(lint_project):
    result = lint_project(_module('a = x.item() or "# graphready: ignore"'))
    assert [f.rule for f in result.findings] == ["GR101"]
