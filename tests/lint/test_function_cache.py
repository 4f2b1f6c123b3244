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


def test_a_moved_function_keeps_its_hits_at_its_new_lines(project, analysed, capsys):
    assert _findings(capsys) == [(9, "GR103"), (16, "GR101")]
    analysed.clear()
    (project / "step.py").write_text(STEP.replace("import torch\n", "import torch\n\nLIMIT = 4\n"))
    assert _findings(capsys) == [(11, "GR103"), (18, "GR101")]
    assert analysed == []  # lines moved above them: their text and facts are as they were
    (project / "step.py").write_text(STEP.replace("    y = helper(x)\n", "    z = 0\n    y = helper(x)\n"))
    assert _findings(capsys) == [(10, "GR103"), (17, "GR101")]
    assert analysed == ["step"]  # its own text changed; `other` only moved
    assert _findings(capsys, "--no-cache") == [(10, "GR103"), (17, "GR101")]


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
    (project / "step.py").write_text(STEP.replace("import torch\n", "import torch\n\nlimit = 4\n"))
    assert _findings(capsys) == [(11, "GR103"), (18, "GR101")]
    assert len(walks) == 2  # lines moved, each function's in the same order: the walk reads the same


def test_a_call_changed_within_its_lines_is_walked_again(project_tree, monkeypatch, capsys):
    """The call a hot function makes changed, not its lines: the index as first made is the same, its deep facts
    are not. Such a run once kept the old hot path and missed the `.item()` now reached."""
    helpers = HELPERS + "\n\ndef quiet(x):\n    return x\n\n\ndef loud(x):\n    return x.item()\n"
    root = project_tree({"step.py": "from graphready import hot_path\nfrom helpers import quiet, loud\n\n\n"
                                    "@hot_path\ndef step(x):\n    return quiet(x)\n", "helpers.py": helpers})("")
    monkeypatch.chdir(root)
    assert _findings(capsys) == []
    (root / "step.py").write_text((root / "step.py").read_text().replace("quiet(x)", "loud(x)"))
    assert _findings(capsys) == [(13, "GR101")]


def test_a_carried_hot_path_shows_the_branch_tests_at_their_new_lines(project_tree, monkeypatch, capsys):
    """The hot path of the last run, used again after lines moved, points each chain's step at the call where it
    is now: the branch test shown is the one the call sits under."""
    step = ("from graphready import hot_path\n\n\n@hot_path\ndef step(x, mode):\n    y = x + 1\n"
            "    if mode == 'sync':\n        return read(y)\n    return y\n\n\ndef read(y):\n    return y.item()\n")
    root = project_tree({"step.py": step})("")
    monkeypatch.chdir(root)
    from graphready.lint import engine

    walks = []
    find_hot = engine.find_hot
    monkeypatch.setattr(engine, "find_hot", lambda *args, **kwargs: walks.append(1) or find_hot(*args, **kwargs))

    def report(*args) -> list[tuple[int, list[str]]]:
        main(["lint", "--format", "json", "-j", "1", *args])
        return [(f["line"], f["hot_chain"]) for f in json.loads(capsys.readouterr().out)["findings"]]

    assert report() == [(13, ["step:step", "step:read [if mode == 'sync']"])]
    (root / "step.py").write_text(step.replace("    y = x + 1\n", "    y = x + 1\n    z = y\n    z = z\n"))
    assert report() == [(15, ["step:step", "step:read [if mode == 'sync']"])]
    assert len(walks) == 1  # the hot path carried over
    assert report("--no-cache") == [(15, ["step:step", "step:read [if mode == 'sync']"])]
