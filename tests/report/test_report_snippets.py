"""Source snippets need no `--root`: each results file records the directory its paths are relative to."""

import json
import shutil
from pathlib import Path

import pytest

from graphready.cli import main

HOT = """import torch
from graphready import hot_path


@hot_path
def step(x):
    return x.sum().item()
"""
SNIPPET_LINE = "return x.sum().item()"


@pytest.fixture
def lint_json(tmp_path: Path, monkeypatch) -> Path:
    """Real lint JSON for a project nested in a checkout (pyproject.toml in `checkout/project`), run
    from the project directory as a user would (finding paths are relative to where lint runs)."""
    project = tmp_path / "checkout" / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[tool.graphready]\n")
    (project / "pkg" / "model.py").write_text(HOT)
    out = tmp_path / "lint.json"
    with monkeypatch.context() as inside:
        inside.chdir(project)
        assert main(["lint", "--format", "json", "--no-cache", "--output", str(out)]) == 1
    return out


def report(tmp_path: Path, *argv: str) -> tuple[str, str]:
    md, page = tmp_path / "out" / "report.md", tmp_path / "out" / "report.html"
    assert main(["report", *argv, "--markdown", str(md), "--html", str(page)]) == 0
    return md.read_text(), page.read_text()


def test_snippets_come_from_the_recorded_root_wherever_the_report_runs(lint_json, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    md, page = report(tmp_path, str(lint_json))
    assert f">7 |     {SNIPPET_LINE}" in md
    assert f'<div class="line hl"><span class="ln">7</span><span class="code">    {SNIPPET_LINE}</span></div>' in page


def test_without_a_recorded_root_snippets_need_the_right_directory_or_root(lint_json, tmp_path, monkeypatch):
    doc = json.loads(lint_json.read_text())
    del doc["run"]["root"]
    unrooted = tmp_path / "unrooted.json"
    unrooted.write_text(json.dumps(doc))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    md, page = report(tmp_path, str(unrooted))
    assert SNIPPET_LINE not in md and SNIPPET_LINE not in page
    md, page = report(tmp_path, str(unrooted), "--root", str(tmp_path / "checkout" / "project"))
    assert SNIPPET_LINE in md and SNIPPET_LINE in page


def test_results_moved_to_another_machine_read_snippets_from_the_current_directory(lint_json, tmp_path,
                                                                                   monkeypatch):
    copy = tmp_path / "clone"
    shutil.copytree(tmp_path / "checkout" / "project", copy)
    shutil.rmtree(tmp_path / "checkout")  # the recorded root no longer exists here
    monkeypatch.chdir(copy)
    md, page = report(tmp_path, str(lint_json))
    assert SNIPPET_LINE in md and SNIPPET_LINE in page


def test_a_root_that_does_not_exist_is_a_usage_error(lint_json, tmp_path, capsys):
    assert main(["report", str(lint_json), "--root", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "--root" in err and "no such directory" in err and "Traceback" not in err


def test_html_snippets_drop_the_indentation_their_lines_share(tmp_path):
    from graphready.findings import Finding, Severity, report_to_json

    (tmp_path / "m.py").write_text("class A:\n    def f(self, x):\n        y = x\n        return y.item()\n"
                                   "        # end\n")
    finding = Finding("m.py", 4, 8, "GR101", "host-sync", Severity.ERROR, "sync")
    doc = tmp_path / "lint.json"
    doc.write_text(json.dumps(report_to_json([finding], {}, root=tmp_path)))
    md, page = report(tmp_path, str(doc))
    assert '<span class="ln">2</span><span class="code">def f(self, x):</span>' in page
    assert '<span class="ln">4</span><span class="code">    return y.item()</span>' in page
    assert ">4 |         return y.item()" in md  # Markdown keeps the file's own indentation
