"""Baselines: recorded findings are reported but do not fail; new ones do, even after code moves."""

from __future__ import annotations

import json

from graphready.cli import main

CODE = """import torch
from graphready import hot_path


@hot_path
def step(x: torch.Tensor):
    return x.item()
"""


def _project(tmp_path, code: str) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.graphready]\n")
    (tmp_path / "mod.py").write_text(code)


def test_baselined_findings_pass_and_new_ones_fail(tmp_path, capsys):
    _project(tmp_path, CODE)
    baseline = tmp_path / "baseline.json"
    assert main(["lint", str(tmp_path), "--no-cache", "--write-baseline", str(baseline)]) == 0
    entries = json.loads(baseline.read_text())["entries"]
    assert [(e["path"], e["rule"]) for e in entries] == [("mod.py", "GR101")]

    moved = CODE.replace("def step", "# a comment that moves the code\n\ndef step")
    _project(tmp_path, moved)
    out = tmp_path / "out.json"
    assert main(["lint", str(tmp_path), "--no-cache", "--baseline", str(baseline), "--format", "json",
                 "--output", str(out)]) == 0
    findings = json.loads(out.read_text())["findings"]
    assert [(f["rule"], f.get("baselined")) for f in findings] == [("GR101", True)]

    _project(tmp_path, moved + "\n\n@hot_path\ndef other(x: torch.Tensor):\n    return x.tolist()\n")
    assert main(["lint", str(tmp_path), "--no-cache", "--baseline", str(baseline)]) == 1


def test_baseline_from_config_and_bad_baseline_files(tmp_path, capsys):
    _project(tmp_path, CODE)
    (tmp_path / "pyproject.toml").write_text('[tool.graphready]\nbaseline = "legacy.json"\n')
    assert main(["lint", str(tmp_path), "--no-cache"]) == 2
    assert "baseline file not found" in capsys.readouterr().err
    (tmp_path / "legacy.json").write_text("{not json")
    assert main(["lint", str(tmp_path), "--no-cache"]) == 2
    assert "is not a graphready baseline" in capsys.readouterr().err
    main(["lint", str(tmp_path), "--no-cache", "--write-baseline", str(tmp_path / "legacy.json")])
    assert main(["lint", str(tmp_path), "--no-cache"]) == 0
