"""The built-in `hf` target on a GPU: a dense model, its decoder layer and its step under torch.compile are
graph-ready, Mistral's and ModernBERT-decoder's
sliding-window counters are GD301 at the transformers line, Mixtral's experts fail capture there, and a
save_pretrained checkpoint is checked through `--model`. Needs a GPU and transformers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from graphready.findings import Severity
from graphready.harness.targets.hf_table import architecture_rows

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(**factory_kwargs):
    pytest.importorskip("transformers")
    from graphready.harness.isolation import WorkerOptions, list_units
    from graphready.harness.scheduler import run_units

    options = WorkerOptions(steps=4, timeout_s=300, root=str(REPO_ROOT), factory_kwargs=json.dumps(factory_kwargs))
    run = run_units("hf", list_units("hf", options), options, gpus=1, jobs=3)
    return {r.name: r for r in run.results}, architecture_rows(run.results, Severity.WARNING)


@pytest.fixture(scope="module")
def three():
    return _run(model_type=["llama", "mistral", "mixtral", "modernbert-decoder", "recurrent_gemma"], batch_sizes=[1],
                layers=False)


def _said(result) -> list[str]:
    return [f"{f.rule}@{f.path}:{f.line} {f.message}" for f in result.findings]


def test_a_dense_model_is_graph_ready(three):
    results, rows = three
    result = results["llama.step[b1]"]
    assert result.status() == "pass" and result.capture == "ok", _said(result)
    assert rows[0].architecture == "llama" and rows[0].verdict == "ready"


def test_the_sliding_window_counter_is_frozen_by_the_graph_at_a_transformers_line(three):
    results, rows = three
    result = results["mistral.step[b1]"]
    assert "GD301" in [f.rule for f in result.findings], _said(result)
    frozen = next(f for f in result.findings if f.rule == "GD301")
    assert "/transformers/" in frozen.path and "the graph froze" in frozen.message
    row = next(r for r in rows if r.architecture == "mistral")
    assert row.verdict == "not ready" and row.where.startswith("transformers/")


def test_a_frozen_window_offset_that_barely_moves_the_logits_is_caught_on_stale_cache_slots(three):
    """ModernBERT-decoder's one sliding layer of two: with zeros in the unused slots the frozen offset moved
    the logits by less than the tolerance (and the check said ready); the twins are wrong from step 2."""
    results, rows = three
    result = results["modernbert-decoder.step[b1]"]
    assert "GD301" in [f.rule for f in result.findings], _said(result)
    assert next(r for r in rows if r.architecture == "modernbert-decoder").where.startswith("transformers/")


def test_the_experts_loop_fails_capture_at_a_transformers_line(three):
    results, rows = three
    result = results["mixtral.step[b1]"]
    assert result.capture == "failed", _said(result)
    assert any("/transformers/" in f.path for f in result.findings), _said(result)
    row = next(r for r in rows if r.architecture == "mixtral")
    assert row.verdict == "capture fails" and row.where.startswith("transformers/")


def test_a_recurrent_state_re_bound_in_transformers_is_located_there(three):
    """RecurrentGemma assigns new tensors to its recurrent states each step (GD305), and its graph keeps
    pointers into buffers freed since capture (GD307): both at transformers' lines, not the target's call."""
    results, _ = three
    result = results["recurrent_gemma.step[b1]"]
    for rule in ("GD305", "GD307"):
        found = [f for f in result.findings if f.rule == rule]
        assert found and all("/transformers/" in f.path for f in found), _said(result)


@pytest.fixture(scope="module")
def mistral_compiled():
    return _run(model_type=["mistral"], batch_sizes=[1], layers=False, compile=True)


def test_the_compiled_sliding_window_step_is_right_while_the_captured_one_freezes_the_offset(mistral_compiled):
    """torch.compile guards the sliding-window layer's Python offset: its calls, restored with the offset
    (`host_state`), agree; the graph captured by hand froze the offset (GD301)."""
    results, _ = mistral_compiled
    compiled, captured = results["mistral.compiled[b1]"], results["mistral.step[b1]"]
    assert not [f for f in compiled.findings if f.rule in ("GD201", "GD301", "GD303")], _said(compiled)
    assert any(f.rule == "GD301" and "the graph froze" in f.message for f in captured.findings), _said(captured)


def test_a_save_pretrained_checkpoint_is_checked_with_its_own_config(tmp_path_factory):
    transformers = pytest.importorskip("transformers")

    from graphready.harness.targets.hf_configs import small_config

    path = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(small_config("llama")).save_pretrained(path)
    results, rows = _run(model=str(path), batch_sizes=[1, 2], layers=False)
    assert sorted(results) == ["llama.step[b1]", "llama.step[b2]"]
    assert all(r.status() == "pass" for r in results.values()), {n: _said(r) for n, r in results.items()}
    assert [(r.architecture, r.verdict) for r in rows] == [("llama", "ready")]


@pytest.fixture(scope="module")
def llama_layers_and_compiled():
    return _run(model_type=["llama"], batch_sizes=[1], compile=True)


def test_a_dense_decoder_layer_called_as_the_model_calls_it_is_graph_ready(llama_layers_and_compiled):
    results, _ = llama_layers_and_compiled
    result = results["llama.layer0"]
    assert result.status() == "pass" and result.capture == "ok", _said(result)


def test_the_dense_step_under_reduce_overhead_is_graphed_by_the_compiler_and_right(llama_layers_and_compiled):
    results, _ = llama_layers_and_compiled
    result = results["llama.compiled[b1]"]
    assert result.capture == "ok", (result.notes, _said(result))  # the compiler's graphs, not skipped
    assert not [f for f in result.findings if f.rule in ("GD301", "GD302", "GD303", "GD201")], _said(result)
