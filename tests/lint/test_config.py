"""`[tool.graphready]`: every key does what it says, and bad config is exit 2 with a clear message."""

from __future__ import annotations

import pytest

from graphready.cli import main

CODE = """import torch
from graphready import hot_path


@hot_path
def step(x: torch.Tensor):
    y = torch.zeros(4)
    return x.item() + y
"""


@pytest.fixture
def project(project_tree, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # finding paths are relative to where lint runs
    return project_tree({"pkg/mod.py": CODE, "tests/t.py": CODE})


def _rules(capsys) -> list[str]:
    import json

    return [f["rule"] + ":" + f["path"] for f in json.loads(capsys.readouterr().out)["findings"]]


def test_select_ignore_exclude_and_per_file_ignores(project, capsys):
    root = project('select = ["ALL"]\nexclude = ["tests"]\nper-file-ignores = { "pkg/*" = ["GR301"] }\n')
    assert main(["lint", str(root), "--no-cache", "--format", "json"]) == 1
    assert _rules(capsys) == ["GR101:pkg/mod.py"]
    root = project('select = ["GR3"]\nexclude = ["tests/*"]\n')
    assert main(["lint", str(root), "--no-cache", "--format", "json"]) == 0
    assert _rules(capsys) == []  # GR301 is opt-in: a prefix does not choose it
    root = project('select = ["GR3", "GR301"]\nexclude = ["tests/*"]\n')
    assert main(["lint", str(root), "--no-cache", "--format", "json"]) == 0  # GR301 is info: reported, not failing
    assert _rules(capsys) == ["GR301:pkg/mod.py"]
    assert main(["lint", str(root), "--no-cache", "--format", "json", "--select", "GR1", "--ignore", "GR101"]) == 0
    assert _rules(capsys) == []


def test_severity_override_and_fail_on(project, capsys):
    root = project('select = ["ALL"]\nexclude = ["tests"]\nignore = ["GR101"]\nfail-on = "error"\n')
    assert main(["lint", str(root), "--no-cache"]) == 0  # GR301 is info
    root = project('select = ["ALL"]\nexclude = ["tests"]\nignore = ["GR101"]\nfail-on = "error"\nseverity = { GR301 = "error" }\n')
    assert main(["lint", str(root), "--no-cache"]) == 1
    assert main(["lint", str(root), "--no-cache", "--fail-on", "info"]) == 1


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('hot-path = ["a:b"]\n', "unknown key 'hot-path' in [tool.graphready] (did you mean 'hot-paths'?)"),
        ('hot-paths = "pkg.mod:step"\n', "hot-paths must be a list of strings"),
        ('hot-paths = ["pkg.mod.step"]\n', "must look like 'module-glob:qualname-glob'"),
        ('fail-on = "fatal"\n', "unknown severity 'fatal'"),
        ('severity = { GR101 = 3 }\n', "severity.GR101 must be a string"),
        ("hot-paths = [\n", "invalid TOML"),
        ('gpu-capability = "9.0"\n', "gpu-capability must be the compute capability times ten"),
        ('warm-up-before-capture = "yes"\n', "warm-up-before-capture must be true or false"),
        ('one-gpu-per-process = 1\n', "one-gpu-per-process must be true or false"),
        ("gpu-capability = 9\n", "(80 for A100, 90 for H100, 100 for B200), got 9"),
    ],
)
def test_bad_config_is_a_usage_error(project, capsys, table, message):
    root = project(table)
    assert main(["lint", str(root), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
