"""Progress shows on a terminal for a long text run only: never in machine formats, never piped."""

from __future__ import annotations

import sys

import pytest

from graphready.cli import main
from graphready.lint import command, progress

HOT = "import torch\nfrom graphready import hot_path\n\n\n@hot_path\ndef step(x: torch.Tensor):\n    return x.item()\n"


class _Recorded(progress.Progress):
    """Counts every step the run reports, so the test sees whether a bar was asked for."""

    made: list["_Recorded"] = []

    def __init__(self) -> None:
        super().__init__()
        self.phases: list[str] = []
        _Recorded.made.append(self)

    def phase(self, description, total):
        self.phases.append(description)
        return super().phase(description, total)


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.graphready]\n")
    (tmp_path / "mod.py").write_text(HOT)
    monkeypatch.setattr(progress, "DELAY", 0.0)  # any run counts as long: a shown bar cannot hide
    monkeypatch.setattr(command, "Progress", _Recorded)
    _Recorded.made.clear()
    return tmp_path


@pytest.mark.parametrize("fmt, tty, shown", [("text", True, True), ("json", True, False), ("text", False, False)])
def test_a_bar_only_for_text_on_a_terminal(project, monkeypatch, capsys, fmt, tty, shown):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)
    assert main(["lint", "--no-cache", "--format", fmt]) == 1
    assert bool(_Recorded.made) == shown
    if shown:
        assert _Recorded.made[0].phases and _Recorded.made[0].bar is None  # counted, then cleared
    if fmt == "json":
        assert capsys.readouterr().out.lstrip().startswith("{")  # nothing but the document


def test_the_bar_waits_for_the_delay(monkeypatch):
    bar = progress.Progress()
    advance = bar.phase("indexing", 3)
    advance()
    assert bar.bar is None  # a quick run prints nothing extra
    monkeypatch.setattr(progress, "DELAY", 0.0)
    advance()
    assert bar.bar is not None and bar.done == 2
    bar.close()
    assert bar.bar is None
