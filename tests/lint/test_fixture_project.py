"""End-to-end lint of a DeepSeek-V4-shaped project: what the linter reports must be what is marked.

`tests/fixtures/dsv4_like/engine/` is the decode engine as the engineering log found it; every line
that must produce a finding carries `# expect: GRxxx` (`// expect:` in CUDA sources) and nothing
else may fire. `engine_fixed/` is the same engine after the log's fixes and must lint clean.
`examples/decoder/` is the README's example and follows the same marker convention.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphready.catalog import load_catalog
from graphready.cli import main

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "dsv4_like"
EXAMPLE = REPO / "examples" / "decoder"
LINTED_SUFFIXES = {".py", ".cu", ".cuh"}
MARKER = re.compile(r"(?:#|//)\s*expect:\s*(?P<codes>GR\d{3}(?:\s*,\s*GR\d{3})*)")


def expected_findings(project: Path, subdir: str = "") -> set[tuple[str, int, str]]:
    """(path, line, rule) for every `expect:` marker in the linted sources under project/subdir."""
    marks = set()
    for path in sorted((project / subdir).rglob("*")):
        if path.suffix not in LINTED_SUFFIXES or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(project).as_posix()
        for lineno, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = MARKER.search(text)
            if match:
                marks.update((rel, lineno, code.strip()) for code in match.group("codes").split(","))
    return marks


def line_of(project: Path, rel_path: str, snippet: str) -> int:
    """The first line of rel_path containing snippet (keeps the tests independent of line numbers)."""
    lines = (project / rel_path).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, start=1) if snippet in text)


def lint_json(target: Path, out_file: Path, cwd: Path | None = None) -> tuple[int, dict]:
    """Lint `target` from `cwd` (default: the target itself), as a user in that directory would."""
    with contextlib.chdir(cwd or target):
        code = main(["lint", str(target), "--format", "json", "--output", str(out_file), "--no-cache"])
    return code, json.loads(out_file.read_text(encoding="utf-8"))


def reported(doc: dict) -> set[tuple[str, int, str]]:
    return {(f["path"], f["line"], f["rule"]) for f in doc["findings"]}


def describe_mismatch(got: set, want: set) -> str:
    missing = "\n".join(f"  missing    {p}:{ln} {r}" for p, ln, r in sorted(want - got))
    extra = "\n".join(f"  unexpected {p}:{ln} {r}" for p, ln, r in sorted(got - want))
    return "lint output differs from the # expect: markers\n" + "\n".join(s for s in (missing, extra) if s)


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory) -> tuple[int, dict]:
    return lint_json(FIXTURE, tmp_path_factory.mktemp("lint") / "fixture.json")


def test_findings_are_exactly_the_markers(fixture_run):
    code, doc = fixture_run
    want = expected_findings(FIXTURE)
    got = reported(doc)
    assert got == want, describe_mismatch(got, want)
    assert code == 1


def test_paths_are_relative_to_the_fixture_pyproject(fixture_run):
    _, doc = fixture_run
    paths = {f["path"] for f in doc["findings"]}
    assert "engine/moe.py" in paths
    assert "engine/kernels/swizzle.cu" in paths
    assert all(not p.startswith(("/", "tests/")) for p in paths)


def test_inline_suppressions_silence_real_findings(fixture_run):
    """Both suppressed lines would fire; they are listed as suppressed, not reported."""
    _, doc = fixture_run
    suppressed = {(s["path"], s["line"], s["rule"]) for s in doc["summary"]["suppressed"]}
    assert suppressed == {
        ("engine/attention.py", line_of(FIXTURE, "engine/attention.py", "ignore[GR101]"), "GR101"),
        ("engine/step.py", line_of(FIXTURE, "engine/step.py", "# noqa: GR304"), "GR304"),
    }


def test_load_time_code_is_not_hot(fixture_run):
    """loader.py is full of .item(), allocations and empty_cache(), all before serving."""
    _, doc = fixture_run
    assert not [f for f in doc["findings"] if f["path"] == "engine/loader.py"]


def test_marked_engine_covers_every_lint_rule():
    """Except GR002, graphready's own failure: a marked case would be a bug left in (test_internal_errors.py)."""
    rules = {code for code, doc in load_catalog().items() if doc.kind == "lint" and code != "GR002"}
    covered = {rule for _, _, rule in expected_findings(FIXTURE, "engine")}
    assert rules - covered == set(), f"rules with no marked case in engine/: {sorted(rules - covered)}"


def test_fixed_engine_is_clean(tmp_path):
    code, doc = lint_json(FIXTURE / "engine_fixed", tmp_path / "fixed.json", cwd=FIXTURE)
    assert expected_findings(FIXTURE, "engine_fixed") == set()
    assert doc["findings"] == []
    assert code == 0


# (file, rule, a snippet of the finding's line, functions the hot chain must visit in order:
#  the first is the root it must start at, the last the function holding the finding)
CHAINS = [
    (
        "engine/moe.py",
        "GR201",
        "torch.bincount(",
        ["DecodeStep.step", "Transformer.forward", "DecoderLayer.forward", "MoE.forward", "MoE.dispatch"],
    ),
    (
        "engine/kernels.py",
        "GR404",
        "kernel(from_dlpack(a)",
        ["DecodeStep.step", "DecoderLayer.forward", "MoE.forward", "GroupedGemmRunner.run"],
    ),
    (
        "engine/mhc.py",
        "GR103",
        "(comb.sum(-1) - 1)",
        ["DecodeStep.step", "DecoderLayer.forward", "MHC.pre_block", "sinkhorn"],
    ),
    (
        "engine/attention.py",
        "GR303",
        "self.state.narrow(",
        ["DecodeStep.step", "DecoderLayer.forward", "Attention.forward", "Compressor.forward"],
    ),
    ("engine/graph_decoder.py", "GR402", "torch.cuda.set_device(gpu)  # expect", ["CUDAGraphDecoder.replay"]),
    # a make_graphed_callables root: the chain starts at the function that graphs the callable
    (
        "engine/graph_decoder.py",
        "GR301",
        "torch.zeros(head_w.shape[0]",
        ["CUDAGraphDecoder.graph_head", "final_logits"],
    ),
    ("engine/sampler.py", "GR102", "int(torch.argmax(", ["sample_greedy"]),
    ("engine/sampler.py", "GR201", "torch.masked_select(", ["sample_top_p"]),
]


def names_function(entry: str, qualname: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(qualname)}(?!\w)", entry) is not None


def visits_in_order(chain: list[str], qualnames: list[str]) -> bool:
    remaining = iter(chain)
    return all(any(names_function(entry, name) for entry in remaining) for name in qualnames)


@pytest.mark.parametrize(("path", "rule", "snippet", "through"), CHAINS, ids=[f"{c[0]}:{c[1]}" for c in CHAINS])
def test_hot_chain_runs_from_root_to_finding(fixture_run, path, rule, snippet, through):
    _, doc = fixture_run
    line = line_of(FIXTURE, path, snippet)
    matches = [f for f in doc["findings"] if (f["path"], f["line"], f["rule"]) == (path, line, rule)]
    assert matches, f"no {rule} reported at {path}:{line}"
    chain = matches[0]["hot_chain"]
    assert chain and names_function(chain[0], through[0]), f"chain should start at {through[0]}: {chain}"
    assert names_function(chain[-1], through[-1]), f"chain should end in {through[-1]}: {chain}"
    assert visits_in_order(chain, through), f"chain should pass through {through}: {chain}"


def test_command_line_run_matches_and_exits_1(fixture_run):
    """`python -m graphready` (a fresh interpreter) reports the same findings as main()."""
    proc = subprocess.run(
        [sys.executable, "-m", "graphready", "lint", "--format", "json", "--no-cache"],
        capture_output=True,
        text=True,
        cwd=FIXTURE,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert reported(json.loads(proc.stdout)) == reported(fixture_run[1])


def test_bundled_example_reports_its_hazards(tmp_path):
    code, doc = lint_json(EXAMPLE, tmp_path / "example.json")
    want = expected_findings(EXAMPLE)
    got = reported(doc)
    assert got == want, describe_mismatch(got, want)
    assert {"GR101", "GR201", "GR306", "GR601"} <= {rule for _, _, rule in got}
    assert code == 1


ENGINE_FIXTURES = ["sglang_like", "vllm_like"]


@pytest.mark.parametrize("name", ENGINE_FIXTURES)
def test_engine_profile_fixture_reports_exactly_its_markers(tmp_path, name):
    """Each built-in profile on a tree shaped like its engine: the decode-path hazard fires; towers,
    prefill branches, capture-mode branches, host-side prep and graph-safe idioms stay quiet."""
    project = REPO / "tests" / "fixtures" / name
    code, doc = lint_json(project, tmp_path / "out.json")
    want = expected_findings(project)
    got = reported(doc)
    assert got == want, describe_mismatch(got, want)
    assert code == 1
    assert doc["summary"]["profile"] == name.removesuffix("_like")
    hot = hot_functions(project)
    assert not [key for key in hot if "Vision" in key or "PosEmbed" in key], hot  # towers are never reached
    assert [key for key in hot if "DecoderLayer.forward" in key], hot  # layers reached through their factory


def hot_functions(project: Path) -> list[str]:
    """`graphready lint --list-hot`: the functions the profile makes hot."""
    proc = subprocess.run([sys.executable, "-m", "graphready", "lint", "--list-hot", "--no-cache", "."],
                          cwd=project, capture_output=True, text=True, check=True)
    return [line.split()[0] for line in proc.stdout.splitlines()]


@pytest.mark.parametrize("name", ENGINE_FIXTURES)
def test_engine_fixture_without_its_profile_is_noisy(tmp_path, name):
    """The same tree with the naive recipe (every `forward` and MoE `apply`): what the profile's scope model removes."""
    project = tmp_path / name
    import shutil

    shutil.copytree(REPO / "tests" / "fixtures" / name, project)
    naive = '"*:*.forward", "*:*.apply"' if name == "sglang_like" else '"*:*.forward", "*:*.forward_cuda"'
    (project / "pyproject.toml").write_text(f"[tool.graphready]\nhot-paths = [{naive}]\n")
    _, doc = lint_json(project, tmp_path / "out.json")
    assert reported(doc) > expected_findings(project)  # every marked hazard, plus the noise


FIRST_CALL_WORK = {  # one-time work in the step that the engine's warm-up runs pay before any capture
    "sglang_like": {("sglang/srt/layers/moe/fused_moe.py", 15, "GR603")},
    "vllm_like": {("vllm/model_executor/layers/mamba/selective_state_update.py", 21, "GR501"),
                  ("vllm/model_executor/layers/rotary_embedding.py", 23, "GR306")},
}


@pytest.mark.parametrize("name", ENGINE_FIXTURES)
def test_first_call_work_is_a_note_only_where_no_warm_up_precedes_capture(tmp_path, name):
    """The profiles say the engine warms up before capturing (both do, every size); a user who turns that
    off gets the first-call notes back as info."""
    project = tmp_path / name
    import shutil

    shutil.copytree(REPO / "tests" / "fixtures" / name, project)
    profile = name.removesuffix("_like")
    (project / "pyproject.toml").write_text(f'[tool.graphready]\nprofile = "{profile}"\nwarm-up-before-capture = false\n')
    _, doc = lint_json(project, tmp_path / "out.json")
    notes = {(f["path"], f["line"], f["rule"]) for f in doc["findings"] if f["severity"] == "info"}
    assert notes == FIRST_CALL_WORK[name]
    assert reported(doc) == expected_findings(project) | FIRST_CALL_WORK[name]
