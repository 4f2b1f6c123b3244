"""Rule hits are cached per function: an edit re-analyses the functions whose text or facts it changes, and
serves the others from the cache, with the findings a run without the cache gives."""

from __future__ import annotations

import json

import pytest

from graphready.cli import main
from graphready.lint.analysis import analyzer

STEP = '''import torch
from graphready import hot_path
from helpers import helper


@hot_path
def step(x: torch.Tensor):
    y = helper(x)
    if y:
        return x
    return x + 1


@hot_path
def other(x: torch.Tensor):
    return x.sum().item()


def cold(x):
    return x
'''
HELPERS = '''import torch


def helper(x) -> torch.Tensor:
    return x
'''


@pytest.fixture
def project(project_tree, monkeypatch):
    root = project_tree({"step.py": STEP, "helpers.py": HELPERS})("")
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def analysed(monkeypatch) -> list[str]:
    """The functions the rules run on (in this process: the runs below are serial)."""
    seen: list[str] = []
    analyze = analyzer.FileAnalyzer._analyze

    def spy(self, info, hot):
        seen.append(info.qualname)
        return analyze(self, info, hot)

    monkeypatch.setattr(analyzer.FileAnalyzer, "_analyze", spy)
    return seen


def _findings(capsys, *args) -> list[tuple[int, str]]:
    main(["lint", "--format", "json", "-j", "1", *args])
    return [(f["line"], f["rule"]) for f in json.loads(capsys.readouterr().out)["findings"]]


def test_only_the_changed_function_is_analysed_again(project, analysed, capsys):
    assert _findings(capsys) == [(9, "GR103"), (16, "GR101")]
    assert sorted(analysed) == ["helper", "other", "step"]
    analysed.clear()
    edited = STEP.replace("return x.sum().item()", "return x.sum()") + "# a comment\n"
    (project / "step.py").write_text(edited)
    assert _findings(capsys) == [(9, "GR103")]
    assert analysed == ["other"]  # `step` kept its text and facts: its hit came from the cache
    analysed.clear()
    (project / "step.py").write_text(edited.replace("    return x\n# a comment", "    return x.item()\n"))
    assert _findings(capsys) == [(9, "GR103")]
    assert analysed == []  # a cold function changed: no hot function reads it


def test_a_fact_a_cached_function_read_changes_its_hits(project, analysed, capsys):
    assert _findings(capsys) == [(9, "GR103"), (16, "GR101")]
    analysed.clear()
    (project / "helpers.py").write_text(HELPERS.replace("-> torch.Tensor", "-> int"))  # `y` is no tensor now
    assert _findings(capsys) == [(16, "GR101")]
    assert sorted(analysed) == ["helper", "other", "step"]  # the project's facts are part of every function's key
    assert _findings(capsys, "--no-cache") == [(16, "GR101")]


def test_a_moved_function_is_analysed_again_with_its_new_lines(project, analysed, capsys):
    assert _findings(capsys) == [(9, "GR103"), (16, "GR101")]
    analysed.clear()
    (project / "step.py").write_text(STEP.replace("import torch\n", "import torch\n\nLIMIT = 4\n"))
    assert _findings(capsys) == [(11, "GR103"), (18, "GR101")]
    assert sorted(analysed) == ["other", "step"]


def test_the_hot_path_is_walked_again_only_when_an_index_changes(project, monkeypatch, capsys):
    from graphready.lint import engine

    walks = []
    find_hot = engine.find_hot
    monkeypatch.setattr(engine, "find_hot", lambda *args, **kwargs: walks.append(1) or find_hot(*args, **kwargs))
    assert _findings(capsys) == [(9, "GR103"), (16, "GR101")]
    (project / "step.py").write_text(STEP.replace("return x + 1", "return x + 2") + "# a comment\n")
    assert _findings(capsys) == [(9, "GR103"), (16, "GR101")]
    assert len(walks) == 1  # same lines, same calls: every index as it was
    (project / "helpers.py").write_text(HELPERS + "\n\ndef more(x):\n    return helper(x)\n")
    assert _findings(capsys) == [(9, "GR103"), (16, "GR101")]
    assert len(walks) == 2
