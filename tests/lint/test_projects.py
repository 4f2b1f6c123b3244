"""Config per file (nearest [tool.graphready], as ruff does) and paths relative to where lint runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphready.cli import main

HOT = "import torch\nfrom graphready import hot_path\n\n\n@hot_path\ndef step(x: torch.Tensor):\n"
SYNC_AND_ALLOC = HOT + "    y = torch.zeros(4, device='cuda')\n    return x.item() + y\n"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def two_projects(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "pkg_a" / "pyproject.toml", '[tool.graphready]\nselect = ["ALL"]\nignore = ["GR101"]\n')
    write(tmp_path / "pkg_a" / "mod.py", SYNC_AND_ALLOC)
    write(tmp_path / "pkg_b" / "pyproject.toml", '[tool.graphready]\nselect = ["ALL"]\nignore = ["GR301"]\n')
    write(tmp_path / "pkg_b" / "mod.py", SYNC_AND_ALLOC)
    return tmp_path


def lint_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["lint", "--no-cache", "--format", "json", *argv])
    return code, json.loads(capsys.readouterr().out)


def found(doc: dict) -> list[tuple[str, int, int, str]]:
    return [(f["path"], f["line"], f["column"], f["rule"]) for f in doc["findings"]]


def test_each_project_keeps_its_own_config_in_any_order(two_projects, capsys):
    code, forward = lint_json(capsys, "pkg_a", "pkg_b")
    _, backward = lint_json(capsys, "pkg_b", "pkg_a")
    assert code == 1 and found(forward) == found(backward)
    assert [(p, r) for p, _, _, r in found(forward)] == [("pkg_a/mod.py", "GR301"), ("pkg_b/mod.py", "GR101")]
    assert [p["root"] for p in forward["summary"]["projects"]] == ["pkg_a", "pkg_b"]
    assert forward["summary"]["files"] == 2 and forward["summary"]["hot_functions"] == 2


def test_a_directory_holding_another_project_lints_it_with_that_projects_config(two_projects, capsys):
    write(two_projects / "pyproject.toml", '[tool.graphready]\nignore = ["GR1", "GR3"]\n')
    _, doc = lint_json(capsys, ".")
    assert [(p, r) for p, _, _, r in found(doc)] == [("pkg_a/mod.py", "GR301"), ("pkg_b/mod.py", "GR101")]


def test_a_pyproject_without_graphready_does_not_split_the_project(two_projects, capsys):
    """A monorepo's packages each have a pyproject.toml; only one with [tool.graphready] is a boundary."""
    write(two_projects / "pyproject.toml", '[tool.graphready]\nignore = ["GR3"]\n')
    write(two_projects / "pkg_a" / "pyproject.toml", "[project]\nname = 'a'\n")
    _, doc = lint_json(capsys, "pkg_a")
    assert [(p, r) for p, _, _, r in found(doc)] == [("pkg_a/mod.py", "GR101")]


def test_one_baseline_cannot_span_two_projects(two_projects, capsys):
    assert main(["lint", "--no-cache", "pkg_a", "pkg_b", "--write-baseline", "b.json"]) == 2
    assert "--write-baseline holds one project's findings" in capsys.readouterr().err
    assert not (two_projects / "b.json").exists()


def test_paths_are_relative_to_the_working_directory(two_projects, capsys, monkeypatch):
    """The same finding, printed so that a terminal opens it from wherever lint ran."""
    _, doc = lint_json(capsys, "pkg_b")
    assert found(doc) == [("pkg_b/mod.py", 8, 12, "GR101")]  # JSON columns are 1-based, like the text
    monkeypatch.chdir(two_projects / "pkg_b")
    _, doc = lint_json(capsys)
    assert found(doc) == [("mod.py", 8, 12, "GR101")]
    assert main(["lint", "--no-cache"]) == 1
    assert capsys.readouterr().out.startswith("mod.py:8:12: GR101")
    monkeypatch.chdir(two_projects / "pkg_a")  # outside the working directory: absolute, as ruff prints it
    outside = (two_projects / "pkg_b").resolve()
    _, doc = lint_json(capsys, str(outside))
    assert found(doc) == [(f"{outside}/mod.py", 8, 12, "GR101")]
    main(["lint", "--no-cache", "--format", "sarif", str(outside)])
    (result,) = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": (outside / "mod.py").as_uri()}
    assert location["region"]["startColumn"] == 12
    main(["lint", "--no-cache", str(outside)])
    assert "    8 |     return x.item() + y" in capsys.readouterr().out  # the snippet is found too
