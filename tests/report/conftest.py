import json
from pathlib import Path

import pytest

from graphready.findings import Evidence, Finding, Severity, report_to_json, summarize

SOURCE = """import torch
from graphready import hot_path


@hot_path
def post_block(x):
    peak = x.abs().max().item()
    return x * 0.5
"""

LONG_UNIT = "layers.0.moe.experts.shared_expert_with_a_very_long_name.quantize_nvfp4_gpu_fused_" + "x" * 60


def lint_findings() -> list[Finding]:
    return [
        Finding("pkg/model.py", 7, 11, "GR101", "host-sync", Severity.ERROR,
                "`.item()` copies a device value to the host every step", end_column=31,
                hot_chain=["pkg.model:Model.step_graphable", "pkg.model:post_block_" + "very_long_" * 12],
                fingerprint="fp-sync", hot_callers=3),
        Finding("pkg/model.py", 8, 4, "GR101", "host-sync", Severity.ERROR, "a second sync <b>not bold</b>",
                fingerprint="fp-old"),
    ]


def check_findings() -> list[Finding]:
    return [
        Finding("pkg/model.py", 7, 4, "GD201", "capture-failed", Severity.ERROR,
                "capture failed: cudaErrorStreamCaptureUnsupported " + "detail" * 40,
                unit="layers.0.mhc_post", fingerprint="fp-capture", evidence=Evidence.CONFIRMED),
        Finding("pkg/model.py", 6, 0, "GD303", "replay-unstable", Severity.WARNING,
                "two replays of the same inputs differ", unit="layers.0.attn", fingerprint="fp-unstable"),
    ]


UNITS = [
    {"name": "layers.0.attn", "status": "pass", "capture": "ok", "eager_ms": 3.2, "replay_ms": 0.8, "kernels": 112,
     "graph_kernels": 112},
    {"name": "layers.0.mhc_post", "status": "error", "capture": "failed", "eager_ms": 1.1, "kernels": 30},
    {"name": LONG_UNIT, "status": "pass", "capture": "ok", "eager_ms": 2.0, "replay_ms": 0.5, "speedup": 4.1,
     "kernels": 40, "graph_kernels": 28},
]
LINT_CONFIG = {"file": "pyproject.toml", "fail-on": "error", "hot-paths": ["pkg.model:*.step_graphable"],
               "select": ["GR1"]}
CHECK_CONFIG = {"target": "pkg.units:units", "fail-on": "error", "steps": 8}


@pytest.fixture
def results(tmp_path: Path) -> dict[str, Path]:
    """A project with one source file, lint and check results (recording `tmp_path` as their root and
    the settings they ran with), and a baseline holding one old finding."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text(SOURCE)
    lint, check = lint_findings(), check_findings()
    paths = {
        "root": tmp_path,
        "lint": tmp_path / "lint.json",
        "check": tmp_path / "check.json",
        "baseline": tmp_path / "baseline.json",
    }
    paths["lint"].write_text(json.dumps(report_to_json(
        lint, {**summarize(lint, Severity.ERROR), "config": LINT_CONFIG}, tool="lint", root=tmp_path)))
    paths["check"].write_text(json.dumps(report_to_json(
        check, {**summarize(check, Severity.ERROR), "config": CHECK_CONFIG}, units=UNITS, tool="check", root=tmp_path)))
    paths["baseline"].write_text(json.dumps({"version": 1, "entries": [
        {"path": "pkg/model.py", "rule": "GR101", "fingerprint": "fp-old"},
        {"path": "pkg/gone.py", "rule": "GR101", "fingerprint": "fp-gone"},
    ]}))
    return paths
