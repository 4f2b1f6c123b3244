"""A bug in graphready is exit 3 with one line naming the file, never exit 1 ("findings") or a
bare traceback; --verbose adds the traceback."""

from __future__ import annotations

import pytest

from graphready.cli import main
from graphready.errors import EXIT_INTERNAL
from graphready.lint.analysis import analyzer

HOT = "import torch\nfrom graphready import hot_path\n\n\n@hot_path\ndef step(x: torch.Tensor):\n    return x * 2\n"


def _broken_rules(job):
    raise KeyError("a rule tripped over its own state")


@pytest.mark.parametrize("jobs", ["1", "2"], ids=["serial", "process-pool"])
def test_internal_error_is_exit_3_naming_the_file(tmp_path, monkeypatch, capsys, jobs):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.graphready]\n")
    for n in range(9):  # enough files for the process pool
        (tmp_path / "src" / f"mod{n}.py").parent.mkdir(exist_ok=True)
        (tmp_path / "src" / f"mod{n}.py").write_text(HOT)
    monkeypatch.chdir(tmp_path / "src")  # the file is named relative to where lint runs
    monkeypatch.setattr(analyzer, "analyze_file", _broken_rules)
    assert main(["lint", "--no-cache", "-j", jobs]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith("graphready lint: internal error while analysing mod0.py (KeyError:")
    assert "report it" in line and "--verbose" in line and "Traceback" not in err

    assert main(["--verbose", "lint", "--no-cache", "-j", jobs]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and "_broken_rules" in err
    assert err.splitlines()[-1].startswith("graphready lint: internal error while analysing mod0.py")
    assert main(["lint", "--no-cache", "-j", jobs, "-v"]) == EXIT_INTERNAL  # after the command too
    assert "Traceback" in capsys.readouterr().err
