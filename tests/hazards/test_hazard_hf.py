"""HF transformers' StaticCache decode (hf_units.py): GD306 names the undeclared counter, not the replay;
the pointer audit finds the model's own weights through the decode closure (no GD307).

Needs a GPU and `transformers`; the verdicts go to $GRAPHREADY_VERDICT_DIR/hf_verdicts.md when set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO_ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests/hazards/hf_units.py:hf_units"


@pytest.fixture(scope="module")
def hf_results():
    from hazard_expectations import cuda_available

    if not cuda_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("transformers")
    from graphready.harness.isolation import WorkerOptions, list_units
    from graphready.harness.scheduler import run_units

    options = WorkerOptions(steps=4, timeout_s=300, root=str(REPO_ROOT))
    run = run_units(TARGET, list_units(TARGET, options), options, gpus=1, jobs=1)
    results = {r.name: r for r in run.results}
    verdict_dir = os.environ.get("GRAPHREADY_VERDICT_DIR")
    if verdict_dir:
        import transformers

        rows = [f"transformers {transformers.__version__}", "", "| unit | status | findings |", "|---|---|---|"]
        for name, result in results.items():
            found = "; ".join(f"{f.rule}@{f.path}:{f.line} {f.message}" for f in result.findings) or "-"
            rows.append(f"| {name} | {result.status()} | {found} |")
        Path(verdict_dir).mkdir(parents=True, exist_ok=True)
        (Path(verdict_dir) / "hf_verdicts.md").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return results


def test_declared_keys_and_values_only_names_the_counter(hf_results):
    result = hf_results["hf_static_cache_declared_kv"]
    assert result.error is None and result.capture == "ok"
    rules = [f.rule for f in result.findings]
    assert rules == ["GD306"], [f"{f.rule}: {f.message}" for f in result.findings]
    assert "cache.layers[0].cumulative_length" in result.findings[0].message
    assert result.findings[0].path == "tests/hazards/hf_units.py"


CLEAN = ["hf_static_cache_discovered", "hf_static_cache_complete", "hf_llama_closure"]


@pytest.mark.parametrize("name", CLEAN)
def test_complete_or_discovered_state_passes(hf_results, name):
    result = hf_results[name]
    assert result.findings == [], [f"{f.rule}: {f.message}" for f in result.findings]
    assert result.status() == "pass" and result.capture == "ok"


def test_mistral_sliding_window_counter_is_the_only_finding(hf_results):
    """transformers 5's sliding-window StaticCache layer counts positions in a Python int
    (`cumulative_length_int`), which sizes the attention mask: the graph freezes it, a true GD301."""
    result = hf_results["hf_mistral_closure"]
    assert [f.rule for f in result.findings] == ["GD301"], [f"{f.rule}: {f.message}" for f in result.findings]
    assert "the graph froze" in result.findings[0].message


@pytest.mark.parametrize("name", [*CLEAN, "hf_mistral_closure"])
def test_the_pointer_audit_finds_the_models_own_memory(hf_results, name):
    result = hf_results[name]
    note = next(n for n in result.notes if n.startswith("pointer audit:"))
    assert "unknown" not in note and "freed" not in note, note
    assert "attribute" in note or "state" in note, note
