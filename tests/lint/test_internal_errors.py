"""A bug in graphready on one file or function is that file's GR002 finding: the run goes on and every
other finding is reported, in every format, but the exit code is 3 so CI fails loudly; it cannot be
suppressed, baselined or cached. A failure over the whole project is exit 3 with one line naming the
phase. --verbose adds the tracebacks."""

from __future__ import annotations

import json

import pytest

from graphready.cli import main
from graphready.errors import EXIT_INTERNAL
from graphready.lint import engine, lazyindex
from graphready.lint.analysis import analyzer

SYNC = '''import torch
from graphready import hot_path


@hot_path
def step{n}(x: torch.Tensor):
    return x.sum().item()
'''

BROKEN = '''import torch
from graphready import hot_path


@hot_path
def explode(x: torch.Tensor):
    peak = x.max().item()  # graphready: ignore[GR101] read once for the log
    return x * peak


@hot_path
def fine(x: torch.Tensor):
    return x.sum().item()
'''

def _plant(monkeypatch, qualname: str = "explode") -> None:
    """A rule that trips over the function named `qualname`, as the GR306 crash of issue 26 did."""
    run_rules = analyzer._run_rules

    def tripping(root, ctx):
        if ctx.function.qualname == qualname:
            raise TypeError("'IndentedBlock' object is not iterable")
        run_rules(root, ctx)

    monkeypatch.setattr(analyzer, "_run_rules", tripping)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """Nine files with a host sync each (enough for the process pool) and one with a function that fails."""
    (tmp_path / "pyproject.toml").write_text("[tool.graphready]\n")
    for n in range(9):
        (tmp_path / f"mod{n}.py").write_text(SYNC.format(n=n))
    (tmp_path / "broken.py").write_text(BROKEN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _lint(capsys, *options: str) -> tuple[int, str, str]:
    code = main(["lint", *options])
    out, err = capsys.readouterr()
    return code, out, err


EXPECTED = [("broken.py", 6, "GR002"), ("broken.py", 13, "GR101")] + [(f"mod{n}.py", 7, "GR101") for n in range(9)]


@pytest.mark.parametrize("jobs", ["1", "2"], ids=["serial", "process-pool"])
def test_a_failing_function_is_its_own_finding_and_the_rest_is_reported(tree, monkeypatch, capsys, jobs):
    _plant(monkeypatch)
    code, out, err = _lint(capsys, "--no-cache", "-j", jobs, "--format", "json")
    assert code == EXIT_INTERNAL
    doc = json.loads(out)
    assert [(f["path"], f["line"], f["rule"]) for f in doc["findings"]] == EXPECTED
    failure = doc["findings"][0]
    assert failure["name"] == "internal-error" and failure["severity"] == "error"
    assert failure["message"].startswith("graphready failed while analysing `explode` (TypeError: 'IndentedBlock'"
                                         " object is not iterable), so it was not checked")
    assert doc["summary"]["internal_errors"] == 1
    assert doc["summary"]["not_analysed"] == {"files": 0, "functions": 1}
    (line,) = [line for line in err.splitlines() if "internal error" in line]
    assert line.startswith("graphready lint: internal error while analysing `explode` in broken.py:6 (TypeError:")
    assert "report it" in line and "--verbose" in line and "Traceback" not in err
    assert "GR000" not in out  # the suppression in the function no rule looked at is not called unused


@pytest.mark.parametrize("fmt", ["text", "sarif", "github", "junit"])
def test_every_format_carries_the_failure_and_every_other_finding(tree, monkeypatch, capsys, fmt):
    _plant(monkeypatch)
    code, out, _ = _lint(capsys, "--no-cache", "-j", "1", "--format", fmt)
    assert code == EXIT_INTERNAL
    if fmt == "sarif":
        results = json.loads(out)["runs"][0]["results"]
        located = [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
                    r["locations"][0]["physicalLocation"]["region"]["startLine"], r["ruleId"]) for r in results]
        assert located == EXPECTED
        assert results[0]["level"] == "error" and "graphready failed" in results[0]["message"]["text"]
        return
    for path, line, rule in EXPECTED:
        shown = {"text": f"{path}:{line}:", "github": f"file={path},line={line},", "junit": f"{path}:{line}:"}[fmt]
        assert any(shown in row and rule in row for row in out.splitlines()), (path, rule)
    if fmt == "text":
        assert out.rstrip().splitlines()[-1].endswith("; 1 function not analysed: graphready failed there (GR002).")
    if fmt == "junit":  # graphready's failure errors its test case; the findings fail theirs
        assert 'failures="10" errors="1"' in out and '<error type="GR002"' in out


def test_verbose_prints_each_traceback(tree, monkeypatch, capsys):
    _plant(monkeypatch)
    for argv in (["--verbose", "lint", "--no-cache"], ["lint", "--no-cache", "-v"]):
        assert main(argv) == EXIT_INTERNAL
        err = capsys.readouterr().err
        assert "Traceback" in err and "in tripping" in err
        last = err.splitlines()[-1]
        assert last.startswith("graphready lint: internal error while analysing `explode` in broken.py:6")


@pytest.mark.parametrize("jobs", ["1", "2"], ids=["serial", "process-pool"])
def test_a_file_that_fails_to_index_is_reported_and_the_others_are_linted(tree, monkeypatch, capsys, jobs):
    module_indexer = lazyindex.module_indexer

    def tripping(module, path, *args):
        if path == "broken.py":
            raise KeyError("an index table tripped over its own state")
        return module_indexer(module, path, *args)

    monkeypatch.setattr(lazyindex, "module_indexer", tripping)
    code, out, err = _lint(capsys, "--no-cache", "-j", jobs, "--format", "json")
    assert code == EXIT_INTERNAL
    doc = json.loads(out)
    assert [(f["path"], f["line"], f["rule"]) for f in doc["findings"]] == \
        [("broken.py", 1, "GR002")] + [(f"mod{n}.py", 7, "GR101") for n in range(9)]
    assert doc["findings"][0]["message"].startswith("graphready failed while indexing this file (KeyError:")
    assert doc["summary"]["not_analysed"] == {"files": 1, "functions": 0}
    assert "graphready lint: internal error while indexing broken.py (KeyError:" in err


def test_a_cuda_file_that_fails_to_scan_is_reported_and_the_others_are_scanned(tree, monkeypatch, capsys):
    launch = "__global__ void k(float *x) {}\nvoid run(float *x) { k<<<1, 32>>>(x); }\n"
    (tree / "a.cu").write_text("// trips the scanner\n" + launch)
    (tree / "b.cu").write_text(launch)
    scan_cuda = engine.scan_cuda
    monkeypatch.setattr(engine, "scan_cuda", lambda text: 1 / 0 if text.startswith("// trips") else scan_cuda(text))
    code, out, _ = _lint(capsys, "--no-cache", "--format", "json", "a.cu", "b.cu")
    assert code == EXIT_INTERNAL
    findings = json.loads(out)["findings"]
    assert [(f["path"], f["line"], f["rule"]) for f in findings] == [("a.cu", 1, "GR002"), ("b.cu", 2, "GR404")]
    assert findings[0]["message"].startswith("graphready failed while scanning this file (ZeroDivisionError:")


def test_a_chain_whose_branch_tests_fail_keeps_its_findings(tree, monkeypatch, capsys):
    """Only the detail failed: the findings stand, with the bare chain, and nothing counts as not analysed."""
    def tripping(self, key):
        raise ValueError("a branch test tripped")

    monkeypatch.setattr(engine.BranchTests, "chain", tripping)
    code, out, err = _lint(capsys, "--no-cache", "mod0.py", "--show-chain")
    assert code == EXIT_INTERNAL
    assert "mod0.py:7:12: GR101" in out and "= hot chain: mod0:step0" in out
    assert "mod0.py:6:1: GR002 [error] graphready failed while tracing the hot chain of `step0` (ValueError: a branch" \
           " test tripped), so its findings show that chain without the branch tests along it" in out
    assert out.rstrip().endswith("; graphready failed 1 time (GR002).")
    assert "internal error while tracing the hot chain of `step0` in mod0.py:6" in err


def test_a_failure_cannot_be_suppressed_ignored_regraded_or_baselined(tree, monkeypatch, capsys):
    _plant(monkeypatch)
    broken = tree / "broken.py"
    broken.write_text(broken.read_text().replace("def explode(x: torch.Tensor):",
                                                 "def explode(x: torch.Tensor):  # graphready: ignore  # noqa: GR002"))
    (tree / "pyproject.toml").write_text('[tool.graphready]\nignore = ["GR002"]\nseverity = {GR002 = "info"}\n'
                                         'per-file-ignores = {"broken.py" = ["GR0"]}\n')
    code, _, err = _lint(capsys, "--no-cache", "--write-baseline", "baseline.json")
    assert code == EXIT_INTERNAL and "internal error while analysing `explode` in broken.py:6" in err
    recorded = json.loads((tree / "baseline.json").read_text())["entries"]
    assert sorted(e["rule"] for e in recorded) == ["GR101"] * 10  # the failure is not debt to record

    code, out, _ = _lint(capsys, "--no-cache", "--baseline", "baseline.json", "--select", "GR1", "--format", "json")
    assert code == EXIT_INTERNAL
    findings = json.loads(out)["findings"]
    (failure,) = [f for f in findings if f["rule"] == "GR002"]
    assert failure["severity"] == "error" and not failure.get("baselined")
    assert all(f["baselined"] for f in findings if f["rule"] != "GR002")


def test_a_failure_is_not_cached(tree, monkeypatch, capsys):
    """The next (fixed) graphready analyses the function again: its host sync is found (and suppressed)."""
    with monkeypatch.context() as patch:
        _plant(patch)
        assert _lint(capsys, "--format", "json")[0] == EXIT_INTERNAL
    code, out, _ = _lint(capsys, "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert [(f["path"], f["rule"]) for f in doc["findings"]] == [("broken.py", "GR101")] + [
        (f"mod{n}.py", "GR101") for n in range(9)]  # no GR002, and no GR000: the suppression hides a finding
    assert [(s["path"], s["line"], s["rule"]) for s in doc["summary"]["suppressed"]] == [("broken.py", 7, "GR101")]
    assert doc["summary"]["internal_errors"] == 0


def test_a_failure_over_the_whole_project_is_one_line_naming_the_phase(tree, monkeypatch, capsys):
    def tripping(*args, **kwargs):
        raise RuntimeError("the call graph tripped")

    monkeypatch.setattr(engine, "find_hot", tripping)
    code, out, err = _lint(capsys, "--no-cache")
    assert code == EXIT_INTERNAL and out == ""
    (line,) = err.splitlines()
    assert line.startswith("graphready lint: internal error while finding the hot path (RuntimeError: the call"
                           " graph tripped); please report it")


def test_a_missing_rule_catalog_is_an_internal_error_not_a_verdict(tree, monkeypatch, capsys):
    """An installation without its catalog must not lint with every finding an error and opt-in rules on."""
    from graphready import catalog

    monkeypatch.setattr(catalog, "catalog_dir", lambda: tree / "no-rules-here")
    catalog.load_catalog.cache_clear()
    catalog.rule_doc.cache_clear()
    try:
        code, out, err = _lint(capsys, "--no-cache")
    finally:
        catalog.load_catalog.cache_clear()
        catalog.rule_doc.cache_clear()
    assert code == EXIT_INTERNAL and out == ""
    assert "no rule catalog in" in err and "installation is incomplete" in err and "Traceback" not in err
