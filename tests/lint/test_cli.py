"""The `graphready lint` and `graphready rules` commands as users and CI call them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphready.catalog import load_catalog
from graphready.cli import main

REPO = Path(__file__).resolve().parents[2]
HOT = "import torch\nfrom graphready import hot_path\n\n\n@hot_path\ndef step(x: torch.Tensor):\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # finding paths are relative to where lint runs
    (tmp_path / "pyproject.toml").write_text("[tool.graphready]\n")
    (tmp_path / "clean.py").write_text(HOT + "    return x * 2\n")
    return tmp_path


def test_exit_codes(project, capsys):
    assert main(["lint", str(project), "--no-cache"]) == 0
    (project / "dirty.py").write_text(HOT + "    return x.item()\n")
    assert main(["lint", str(project), "--no-cache"]) == 1
    assert main(["lint", str(project / "clean.py"), "--no-cache"]) == 0  # only the given file is reported
    assert main(["lint", str(project / "missing"), "--no-cache"]) == 2
    assert main(["lint", str(project), "--format", "xml"]) == 2
    assert main(["lint", str(project), "-j", "-1"]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_parse_errors_are_findings_and_the_run_goes_on(project, capsys):
    (project / "broken.py").write_text("def f(:\n    pass\n")
    (project / "dirty.py").write_text(HOT + "    return x.item()\n")
    assert main(["lint", str(project), "--no-cache", "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["path"], f["line"], f["rule"]) for f in findings] == [("broken.py", 1, "GR001"), ("dirty.py", 7, "GR101")]


def test_json_contract(project, capsys):
    (project / "pkg").mkdir()
    (project / "pkg" / "dirty.py").write_text(HOT + "    return x.item()\n")
    assert main(["lint", str(project / "pkg"), "--no-cache", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == 2
    (finding,) = doc["findings"]
    assert set(finding) >= {"path", "line", "column", "end_line", "end_column", "rule", "name", "severity",
                            "message", "hot_chain"}
    assert (finding["path"], finding["line"], finding["column"], finding["end_column"]) == ("pkg/dirty.py", 7, 12, 20)  # 1-based
    assert (finding["rule"], finding["name"], finding["severity"]) == ("GR101", "host-sync", "error")
    assert finding["hot_chain"] == ["pkg.dirty:step"]
    assert doc["summary"]["failing"] == 1 and doc["summary"]["by_rule"] == {"GR101": 1}


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github", "junit"])
def test_every_format_renders_to_a_file(project, fmt):
    (project / "dirty.py").write_text(HOT + "    return x.item()\n")
    out = project / f"out.{fmt}"
    assert main(["lint", str(project), "--no-cache", "--format", fmt, "--output", str(out),
                 "--show-chain", "--statistics"]) == 1
    text = out.read_text()
    assert "GR101" in text and "dirty.py" in text


def test_cache_and_parallel_runs_agree_with_a_cold_serial_run(tmp_path, capsys):
    fixture = REPO / "tests" / "fixtures" / "dsv4_like"
    project = tmp_path / "fixture"
    import shutil

    shutil.copytree(fixture, project)
    runs = []
    for args in (["--no-cache"], ["-j", "2"], [], ["-j", "2"]):  # cold, cold+write cache, warm, warm parallel
        main(["lint", str(project), "--format", "json", *args])
        runs.append(json.loads(capsys.readouterr().out)["findings"])
    assert runs[0] and all(run == runs[0] for run in runs)
    assert (project / ".graphready_cache").is_dir()
    step = project / "engine" / "step.py"
    step.write_text(step.read_text().replace("gc.collect()  # noqa: GR304", "gc.collect()"))
    main(["lint", str(project), "--format", "json"])
    changed = json.loads(capsys.readouterr().out)["findings"]
    assert len(changed) == len(runs[0]) + 1  # the edit is seen through the cache


def test_lint_never_imports_torch(project):
    (project / "dirty.py").write_text(HOT + "    return x.item()\n")
    code = ("import sys; from graphready.cli import main; rc = main(['lint', sys.argv[1], '--no-cache', '--format', 'sarif']);"
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code, str(project)], capture_output=True, text=True)
    assert result.returncode == 1, result.stderr


def test_rules_command_lists_and_explains(capsys):
    assert main(["rules"]) == 0
    listing = capsys.readouterr().out
    assert all(code in listing for code in ("GR000", "GR101", "GR203", "GR602"))
    assert main(["rules", "gr203", "--markdown"]) == 0
    doc = capsys.readouterr().out
    assert doc.startswith("# GR203 tensor-slice [error]") and "## Use instead" in doc
    assert main(["rules", "GR999"]) == 2


def test_generated_rule_docs_are_up_to_date():
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_rule_docs.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, "docs/rules.md is stale: run python scripts/gen_rule_docs.py"
    docs = (REPO / "docs" / "rules.md").read_text()
    assert all(code in docs for code in load_catalog())


def test_a_file_that_is_not_utf8_is_a_parse_error_finding(project, capsys):
    (project / "latin1.py").write_bytes(b'name = "\xff"\n')
    assert main(["lint", str(project), "--no-cache", "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["path"], f["rule"], f["name"]) for f in findings] == [("latin1.py", "GR001", "parse-error")]


def test_help_is_user_text_with_exit_codes_and_examples():
    for argv in ([sys.executable, "-m", "graphready", "--help"], [sys.executable, "-m", "graphready", "lint", "--help"]):
        result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        assert result.returncode == 0, result.stderr
        text = result.stdout
        assert "exit codes:" in text and "3  internal error" in text and "examples:" in text
        assert "graphready lint" in text and "sub-command per module" not in text  # not the module docstring


def test_output_file_prints_a_one_line_summary(project, capsys):
    (project / "dirty.py").write_text(HOT + "    y = x.item()\n    return x.tolist()\n")
    assert main(["lint", "--no-cache", "--format", "json", "--output", "out.json"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == ["graphready lint: 2 findings (2 errors) in 1 file; 2 failing (fail-on: warning);"
                                " 2 files read, 2 hot functions. Report: out.json"]


@pytest.mark.parametrize(("body", "summary"), [
    ("    return x.item()\n", "1 finding (1 error) in 1 file; 1 failing"),
    ("    a = x.item()\n    b = x.tolist()\n    return torch.zeros(1)\n", "3 findings (2 errors, 1 info) in 1 file"),
    ("    a = torch.zeros(1)\n    b = torch.ones(1)\n    return x.item()\n", "3 findings (1 error, 2 info) in 1 file"),
])
def test_summary_grammar(project, capsys, body, summary):
    (project / "dirty.py").write_text(HOT + body)
    main(["lint", "--no-cache", "--select", "ALL"])  # ALL: the info notes of the opt-in GR301 too
    assert summary in capsys.readouterr().out


def test_all_clear_names_what_was_checked(project, capsys):
    assert main(["lint", "--no-cache"]) == 0
    assert capsys.readouterr().out.strip() == "graphready lint: all clear, no findings (1 file read, 1 hot function)."
