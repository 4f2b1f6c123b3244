"""The built-in `hf` target on the CPU: small configs for every causal LM of the installed transformers,
the decode step on a StaticCache, architectures that cannot be built, the closing table, the options.

Needs `transformers` for everything but the table and the options (skipped without it). Building and
decoding every architecture takes minutes on two cores: that test is marked slow.
"""

from __future__ import annotations

import argparse
import json

import pytest

from graphready.errors import UsageError
from graphready.findings import Severity
from graphready.harness.command import _validate, add_arguments, build_report
from graphready.harness.result import UnitResult, make_finding
from graphready.harness.targets.hf_table import (
    architecture_rows,
    render_markdown,
    render_text,
)

HF_LINE = "/site/transformers/models/mixtral/modeling_mixtral.py"
# one of each kind the issue names: dense, sliding window, MoE, linear attention, MLA, chunked attention
DISTINCT = ["llama", "mistral", "mixtral", "qwen3_next", "deepseek_v3", "llama4_text", "gemma3_text"]


def _transformers():
    return pytest.importorskip("transformers")


def _all_types() -> list[str]:
    try:
        from graphready.harness.targets.hf_configs import causal_lm_types

        return list(causal_lm_types())
    except ImportError:
        return []


# -- configs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("model_type", _all_types() or ["llama"])
def test_every_architecture_gets_a_small_config_or_a_reason(model_type):
    _transformers()
    from graphready.harness.targets.hf_configs import HIDDEN, VOCAB, plan

    made = plan(model_type)
    if made.config is None:
        assert made.reason and model_type not in DISTINCT
        return
    config = made.config
    text = config.get_text_config(decoder=True)
    for name, limit in (("vocab_size", VOCAB), ("hidden_size", HIDDEN)):
        value = getattr(text, name, None)
        assert not isinstance(value, int) or value <= limit, (name, value)
    layers = getattr(text, "num_hidden_layers", None)
    default = getattr(type(config)().get_text_config(decoder=True), "num_hidden_layers", None)
    if isinstance(layers, int):  # a few layers, or fewer than the class makes of them (HRM repeats its stacks)
        assert layers <= 4 or layers < default, (layers, default)


def test_the_small_configs_keep_what_makes_each_architecture():
    _transformers()
    from graphready.harness.targets.hf_configs import WINDOW, small_config

    mixtral = small_config("mixtral")
    assert (mixtral.num_local_experts, mixtral.num_experts_per_tok) == (4, 2)
    assert small_config("mistral").sliding_window == WINDOW
    assert small_config("llama4_text").attention_chunk_size == WINDOW
    assert set(small_config("qwen3_next").layer_types) == {"linear_attention", "full_attention"}
    assert set(small_config("gemma3_text").layer_types) == {"sliding_attention", "full_attention"}
    mla = small_config("deepseek_v3")
    assert (mla.num_hidden_layers, mla.first_k_dense_replace, mla.kv_lora_rank) == (2, 1, 32)  # dense, then MoE
    assert "attention" in small_config("jamba").layers_block_type  # the hybrid keeps an attention layer
    assert small_config("recurrent_gemma").layers_block_type == ["recurrent", "attention"]


def test_a_heterogeneous_config_keeps_its_per_layer_sizes_on_the_kept_layers():
    """Gemma 4 gives its full-attention layers their own head_dim (`per_layer_config`, keyed by layer index),
    and refuses a plain read of that field on the global config."""
    _transformers()
    from graphready.harness.targets.hf_configs import HEAD_DIM, small_config

    config = small_config("gemma4_text").to_dict()
    assert config["layer_types"] == ["sliding_attention", "full_attention"]
    assert (config["head_dim"], config["per_layer_config"]) == (HEAD_DIM, {"1": {"head_dim": 2 * HEAD_DIM}})


def test_the_zamba_hybrids_keep_two_shared_attention_layers():
    """A later hybrid layer ties its shared transformer to the first: with one alone transformers cannot
    build the model; Zamba2's attention also reads the embeddings next to the hidden states (twice as wide)."""
    _transformers()
    from graphready.harness.targets.hf_configs import HIDDEN, small_config

    assert small_config("zamba").layers_block_type.count("hybrid") == 2
    zamba2 = small_config("zamba2")
    assert (zamba2.hybrid_layer_ids, zamba2.attention_hidden_size) == ([1, 2], 2 * HIDDEN)
    assert zamba2.mamba_headdim * zamba2.n_mamba_heads == zamba2.mamba_expand * HIDDEN


def test_defaults_the_modeling_code_cannot_run_get_what_it_reads():
    """Per-type RoPE, a QKV clip, a sparse indexer, a language, axial position sizes: each default left
    unset made the model raise before its first step; the distinctive part stays."""
    _transformers()
    from graphready.harness.targets.hf_configs import HIDDEN, small_config

    compass = small_config("cohere_compass_text")
    assert compass.layer_types == ["sliding_attention", "full_attention"]
    assert compass.rope_parameters["full_attention"] is None  # NoPE full layers, rotating sliding ones
    assert small_config("dbrx").attn_config.clip_qkv == 8.0
    qsa = small_config("qwen4_exp_text")
    assert set(qsa.layer_types) == {"linear_attention", "qwen_sparse_attention"}
    assert qsa.indexer_budget % qsa.indexer_compress_ratio == 0 and qsa.indexer_kv_heads == 1
    assert small_config("qwen4_exp").text_config.indexer_budget == qsa.indexer_budget
    assert small_config("xmod").default_language == "en_XX"
    reformer = small_config("reformer")
    assert sum(reformer.axial_pos_embds_dim) == HIDDEN
    assert reformer.axial_pos_shape[0] * reformer.axial_pos_shape[1] == reformer.max_position_embeddings


def test_a_causal_lm_with_a_config_of_its_own_gets_that_configs_defaults():
    """MusicgenConfig needs its text and audio encoders; MusicgenForCausalLM takes the decoder's config alone."""
    _transformers()
    from graphready.harness.targets.hf_configs import small_config

    for model_type in ("musicgen", "musicgen_melody"):
        config = small_config(model_type)
        assert type(config).__name__.endswith("DecoderConfig") and config.num_codebooks == 4


# -- building and decoding -------------------------------------------------------------------------
def _unit(model_type: str, batch_sizes=(1, 2)):
    from graphready.harness.targets.hf import factory

    [unit] = factory(model_type=model_type, batch_sizes=list(batch_sizes), layers=False)
    return unit


def _decode_on_cpu(model_type: str, batch_sizes=(1, 2)):
    """Build on the CPU, then one step per batch size: the logits and the caches' position counters."""
    import torch

    unit = _unit(model_type, batch_sizes)
    arch = unit.fn.__self__
    arch.build("cpu")
    outputs = {}
    for key in unit.keys:
        tokens, positions = unit.make_inputs(0, key=key)
        outputs[key] = unit.fn(tokens, positions)
        assert torch.isfinite(outputs[key]).all()
    return arch, outputs


@pytest.mark.parametrize("model_type", DISTINCT)
def test_distinct_architectures_decode_one_token_per_row_on_their_static_cache(model_type):
    _transformers()
    from graphready.harness.targets.hf import PROMPT

    arch, outputs = _decode_on_cpu(model_type)
    assert [tuple(out.shape[:2]) for out in outputs.values()] == [(1, 1), (2, 1)]
    for cache in arch.caches.values():
        counters = [layer.cumulative_length for layer in cache.layers if hasattr(layer, "cumulative_length")]
        assert counters and all(int(c) in (PROMPT + 1, 0) for c in counters)  # the step advanced the cache


# architectures the builder got wrong before: each builds and decodes one token per row now
FIXED = ["cohere_compass_text", "dbrx", "qwen4_exp_text", "xmod", "musicgen"]


@pytest.mark.parametrize("model_type", FIXED)
def test_architectures_whose_defaults_could_not_run_decode_on_their_static_cache(model_type):
    _transformers()
    arch, outputs = _decode_on_cpu(model_type)
    assert [out.shape[0] for out in outputs.values()] == [arch.rows, 2 * arch.rows]
    assert arch.rows == (4 if model_type == "musicgen" else 1)  # a row per codebook, one cache per sequence
    assert all(layer.keys.shape[0] == batch for batch, cache in arch.caches.items() for layer in cache.layers
               if getattr(layer, "is_initialized", False) and hasattr(layer, "keys"))


def test_the_slots_past_the_prompt_hold_stale_values_that_a_right_mask_never_reads():
    """As in a cache reused across requests; zeros would hide a mask that reads one slot too far."""
    _transformers()
    import torch
    from transformers.cache_utils import StaticLayer

    from graphready.harness.targets.hf import PROMPT

    arch, _ = _decode_on_cpu("llama", batch_sizes=(1,))
    layers = [layer for layer in arch.caches[1].layers if isinstance(layer, StaticLayer)]
    assert layers and all(layer.keys[:, :, PROMPT + 1:].abs().sum() > 0 for layer in layers)
    twin, _ = _decode_on_cpu("llama", batch_sizes=(1,))
    assert all(torch.equal(a.keys, b.keys) for a, b in zip(layers, twin.caches[1].layers))  # the same every build
    tokens, positions = arch.inputs(1)
    stale = arch.step(tokens, positions)
    for layer in twin.caches[1].layers:
        for slots in (layer.keys[:, :, PROMPT + 1:], layer.values[:, :, PROMPT + 1:]):
            slots.zero_()
    assert torch.equal(stale, twin.step(tokens, positions))


def test_listing_builds_nothing_and_names_one_unit_per_architecture_keyed_by_batch_size():
    _transformers()
    from graphready.harness.targets.hf import factory

    units = factory(model_type=["llama", "mixtral"], layers=False)
    assert [(u.name, u.keys) for u in units] == [("llama.step", ("b1", "b4")), ("mixtral.step", ("b1", "b4"))]
    assert all(u.fn.__self__.model is None and u.setup is None for u in units)
    assert [u.name for u in units[0].expand()] == ["llama.step[b1]", "llama.step[b4]"]
    assert len(factory(all_architectures=True, layers=False)) == len(_all_types())


def test_a_worker_lists_only_the_architectures_of_its_units():
    _transformers()
    from graphready.harness.target import load_units

    units = load_units("hf", {"all_architectures": True, "batch_sizes": [1]},
                       only=["mixtral.step[b1]", "qwen3_next.layer1"])
    assert {u.name.split(".")[0] for u in units} == {"mixtral", "qwen3_next"}
    assert {"mixtral.step[b1]", "qwen3_next.layer1"} <= {u.name for u in units}


def test_a_graph_break_inside_torch_is_found_at_the_transformers_line_that_called_into_it():
    """CTRL re-registers its position table in `forward` (`self.pos_encoding = self.pos_encoding.to(...)`): the
    compiler reports the break in `Module.register_buffer`; GD602 goes to CTRL's line."""
    _transformers()
    import torch

    from graphready.harness.checks.compiled import CompileWatch
    from graphready.harness.frames import Location
    from graphready.harness.targets.hf import Architecture

    arch = Architecture("ctrl", "CTRLLMHeadModel", (1,))
    arch.build(torch.device("cpu"))
    torch._dynamo.reset()
    compiled = torch.compile(arch.step, backend="eager")
    watch = CompileWatch(None, Location("hf.py", 1))
    with watch, torch.no_grad():
        compiled(*arch.inputs(0, "b1"))
    places = {f.location.path for f in watch.findings() if f.rule == "GD602"}
    assert places and all("torch/nn" not in place for place in places), places
    assert any(place.endswith("models/ctrl/modeling_ctrl.py") for place in places), places


@pytest.mark.parametrize(("model_type", "reason"), [
    ("mamba", "keeps no state in it"),
    ("minimax", "keeps its own cache"),
    ("reformer", "keeps its own cache"),  # its axial position sizes now add up: it builds, then says so
])
def test_an_architecture_that_cannot_decode_on_a_static_cache_says_why_every_time(model_type, reason):
    _transformers()
    from graphready.harness.targets.hf import NotBuilt

    unit = _unit(model_type)
    with pytest.raises(NotBuilt, match=reason):
        unit.fn.__self__.build("cpu")
    with pytest.raises(NotBuilt, match=reason):  # remembered, not rebuilt: the unit's inputs raise it
        unit.make_inputs(0, key="b1")


def _limits():
    from graphready.harness.targets.hf_limits import LIMITS

    return sorted(LIMITS)


@pytest.mark.parametrize("model_type", _limits())
def test_each_known_transformers_limit_still_fails_where_it_says_and_its_row_says_why(model_type):
    """Building and one decode step on the CPU fail at the named transformers file (an entry transformers
    has since fixed fails here); the row then gives the one-line reason and keeps the line."""
    _transformers()
    import traceback

    from graphready.harness.targets.hf import NotBuilt, _library_line
    from graphready.harness.targets.hf_limits import LIMITS

    unit = _unit(model_type, batch_sizes=(1,))
    try:
        unit.fn.__self__.build("cpu")
        unit.fn(*unit.make_inputs(0, key="b1"))
    except NotBuilt as exc:
        error = f"the unit's make_inputs/state raised NotBuilt: {exc}"
        result = _result(f"{model_type}.step[b1]", error=error, capture=None)
    except Exception as exc:  # the eager step raised: the harness's GD201 at the transformers line
        where = _library_line(exc)
        path, line = where.rsplit(":", 1)
        error = f"the unit's eager step raised {type(exc).__name__}: {exc}"
        finding = make_finding("GD201", error, unit=f"{model_type}.step[b1]", path=f"/site/{path}", line=int(line))
        result = _result(f"{model_type}.step[b1]", finding, error=error, capture=None)
        assert traceback.extract_tb(exc.__traceback__)
    else:
        pytest.fail(f"{model_type} decodes on a StaticCache now: remove its hf_limits entry")
    [row] = architecture_rows([result], Severity.WARNING)
    assert row.verdict in ("not built", "step raises") and LIMITS[model_type][0] in row.where
    assert row.cause == LIMITS[model_type][1] and "\n" not in row.cause


def test_a_failure_elsewhere_keeps_its_own_message():
    """The reason applies only to the failure it was written for: the same type failing in another file
    (a changed transformers) shows that exception."""
    prefill = ("the unit's make_inputs/state raised NotBuilt: bloom: building the model raised KeyError: 'x' "
               "(transformers/modeling_utils.py:12)")
    [row] = architecture_rows([_result("bloom.step[b1]", error=prefill, capture=None)], Severity.WARNING)
    assert (row.cause, row.where) == ("building the model raised KeyError: 'x'", "transformers/modeling_utils.py:12")


def test_unknown_model_types_are_a_usage_error_with_suggestions():
    _transformers()
    from graphready.harness.targets.hf import factory

    with pytest.raises(UsageError, match="did you mean llama"):
        factory(model_type="lama")
    with pytest.raises(UsageError, match="one of"):
        factory(model_type="llama", all_architectures=True)


def test_a_save_pretrained_checkpoint_is_its_own_architecture(tmp_path):
    transformers = _transformers()
    import torch

    from graphready.harness.targets.hf import (
        LOW_PRECISION_TOLERANCE,
        MAX_LEN,
        PROMPT,
        factory,
    )
    from graphready.harness.targets.hf_configs import small_config

    torch.manual_seed(0)
    saved = transformers.LlamaForCausalLM(small_config("llama")).to(torch.bfloat16).eval()
    saved.save_pretrained(tmp_path)
    [unit] = factory(model=str(tmp_path), batch_sizes=[1], layers=False)
    assert unit.name == "llama.step" and unit.atol == LOW_PRECISION_TOLERANCE
    arch = unit.fn.__self__
    arch.build("cpu")
    assert arch.checkpoint == str(tmp_path.resolve()) and next(arch.model.parameters()).dtype == torch.bfloat16
    assert arch.model.config.num_hidden_layers == saved.config.num_hidden_layers  # its config, not a small one
    weights = saved.state_dict()
    assert all(torch.equal(value, weights[name]) for name, value in arch.model.state_dict().items())
    tokens, positions = unit.make_inputs(0, key="b1")
    logits = unit.fn(tokens, positions)
    cache = transformers.StaticCache(config=saved.config, max_cache_len=MAX_LEN)
    with torch.no_grad():  # the saved model's own decode step: the same prompt, then the same token
        saved(torch.arange(1, PROMPT + 1)[None], past_key_values=cache, use_cache=True)
        expected = saved(tokens, past_key_values=cache, use_cache=True, position_ids=positions).logits
    assert logits.shape[:2] == (1, 1) and torch.equal(logits, expected)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", _all_types() or ["llama"])
def test_every_architecture_builds_and_decodes_or_is_not_built(model_type):
    """Never another exception: what cannot be built is a row saying why (the step itself may still raise
    on the GPU for a model that needs more than tokens, such as GIT's images: that is a verdict)."""
    _transformers()
    from graphready.harness.targets.hf import NotBuilt

    unit = _unit(model_type, batch_sizes=(1,))
    try:
        unit.fn.__self__.build("cpu")
    except NotBuilt as exc:
        assert str(exc).startswith(f"{model_type}: ")


# -- the table -------------------------------------------------------------------------------------
def _result(name: str, *findings, error=None, capture="ok") -> UnitResult:
    return UnitResult(name=name, findings=list(findings), error=error, capture=capture)


def _table_results() -> list[UnitResult]:
    captured = make_finding("GD201", "capture failed: operation not permitted when stream is capturing",
                            unit="mixtral.step[b1]", path=HF_LINE, line=88)
    frozen = make_finding("GD301", "add got the Python value 6 now; the graph froze 5 at capture",
                          unit="mistral.step[b4]", path="/x/transformers/cache_utils.py", line=560)
    not_built = ("the unit's make_inputs/state raised NotBuilt: mamba: the prefill kept nothing in the "
                 "StaticCache: the model keeps its state elsewhere")
    prefill = ("the unit's make_inputs/state raised NotBuilt: bloom: the prefill with a StaticCache raised "
               "RuntimeError: The expanded size (transformers/models/bloom/modeling_bloom.py:270)")
    raised = "the unit's eager step raised AttributeError: 'NoneType' object has no attribute 'shape'"
    return [
        _result("llama.step[b1]"), _result("llama.step[b4]"),
        _result("mistral.step[b1]"), _result("mistral.step[b4]", frozen),
        _result("mixtral.step[b1]", captured, error="capture failed", capture="failed"),
        _result("mamba.step[b1]", make_finding("GD201", not_built, unit="mamba.step[b1]", path="hf.py", line=1),
                error=not_built, capture=None),
        _result("bloom.step[b1]", error=prefill, capture=None),
        _result("git.step[b1]", make_finding("GD201", raised, unit="git.step[b1]",
                                             path="/site/transformers/models/git/modeling_git.py", line=848),
                error=raised, capture=None),
        _result("opt.step[b1]", error="the worker died (signal SIGSEGV) during warm-up", capture=None),
        _result("other_unit"),
    ]


def test_the_first_cause_is_the_capture_error_then_a_transformers_line_and_cells_say_why():
    capture = make_finding("GD201", "capture failed at aten._grouped_mm: RuntimeError: Cannot copy between CPU and "
                           "CUDA tensors", unit="mixtral.step[b1]", path=HF_LINE, line=332)
    sync = make_finding("GD101", "synchronizing CUDA operation during an eager step", unit="mixtral.step[b1]",
                        path="/site/transformers/masking_utils.py", line=604)
    here = "graphready/harness/targets/hf.py"  # where a check that cannot place its finding leaves it
    freed = make_finding("GD307", "the captured graph holds a pointer into a freed buffer", path=here, line=199,
                         unit="recurrent_gemma.step[b1]")
    frozen = make_finding("GD301", "replay differs from eager on the same inputs and state: output 0 differs: max "
                          "abs diff 0.005 over 512/512 elements; add got the Python value 27 now; the graph froze 26 "
                          "at capture", unit="recurrent_gemma.step[b1]",
                          path="/site/transformers/masking_utils.py", line=510)
    rows = architecture_rows([_result("mixtral.step[b1]", sync, capture, error=None, capture="failed"),
                              _result("recurrent_gemma.step[b1]", freed, frozen)], Severity.WARNING)
    assert [(r.verdict, r.where) for r in rows] == [
        ("capture fails", "transformers/models/mixtral/modeling_mixtral.py:332"),
        ("not ready", "transformers/masking_utils.py:510")]
    assert rows[1].cause.startswith("GD301 replay differs from eager")  # the JSON keeps the message whole
    assert "| GD301 replay differs: add got the Python value 27 now; the graph froze 26 at capture |" in (
        render_markdown(rows))


def test_one_row_per_architecture_with_the_first_cause_at_the_transformers_line():
    rows = {row.architecture: row for row in architecture_rows(_table_results(), Severity.WARNING)}
    assert list(rows) == ["llama", "mistral", "mixtral", "mamba", "bloom", "git", "opt"]
    assert (rows["llama"].verdict, rows["llama"].keys) == ("ready", "b1 b4")
    assert (rows["mistral"].verdict, rows["mistral"].keys) == ("not ready", "b1 b4!")
    assert rows["mistral"].cause.startswith("GD301 add got the Python value 6")
    assert rows["mistral"].where == "transformers/cache_utils.py:560"
    assert (rows["mixtral"].verdict, rows["mixtral"].where) == (
        "capture fails", "transformers/models/mixtral/modeling_mixtral.py:88")
    assert rows["mamba"].verdict == "not built" and rows["mamba"].cause.startswith("the prefill kept nothing")
    assert (rows["bloom"].verdict, rows["bloom"].where) == ("not built", "transformers/models/bloom/modeling_bloom.py:270")
    assert rows["bloom"].cause.startswith("BLOOM's ALiBi takes a 2-D attention mask")  # hf_limits says why
    assert (rows["git"].verdict, rows["git"].where) == ("step raises", "transformers/models/git/modeling_git.py:848")
    assert rows["opt"].verdict == "not checked" and "SIGSEGV" in rows["opt"].cause
    stopped = _result("gpt2.step[b1]", error="not checked: the run's --time-limit of 300s ran out", capture=None)
    [row] = architecture_rows([stopped], Severity.WARNING)
    assert row.verdict == "not checked" and "--time-limit" in row.cause


def test_the_table_renders_as_text_with_counts_and_as_markdown():
    rows = architecture_rows(_table_results(), Severity.WARNING)
    text = render_text(rows)
    assert text.splitlines()[0].split() == ["architecture", "verdict", "first", "cause", "where"]
    assert text.splitlines()[-1] == ("7 architectures: 1 ready, 1 not ready, 1 capture fails, 2 not built, "
                                     "1 step raises, 1 not checked")
    assert max(len(line) for line in text.splitlines()) < 200  # long reasons are cut in text
    markdown = render_markdown(rows)
    assert markdown.startswith("| architecture | verdict | first cause | where |\n|---|---|---|---|\n")
    assert "| llama | ready | - | - |" in markdown


def test_the_layer_and_compiled_verdicts_are_columns_of_their_own():
    def frozen(unit):
        return make_finding("GD301", "add got the Python value 6 now; the graph froze 5 at capture", unit=unit,
                            path="/x/transformers/masking_utils.py", line=510)

    skipped = make_finding("GD601", "torch.compile(mode=\"reduce-overhead\") skipped CUDA graphs", unit="m",
                           path="/x/transformers/cache_utils.py", line=1, severity=Severity.WARNING)
    not_built = "the unit's make_inputs/state raised NotBuilt: mamba: the prefill kept nothing in the StaticCache"
    rows = architecture_rows([
        _result("llama.step[b1]"), _result("llama.layer0"), _result("llama.compiled[b1]"),
        _result("mistral.step[b1]", frozen("mistral.step[b1]")), _result("mistral.layer0", frozen("mistral.layer0")),
        _result("mistral.layer1"), _result("mistral.compiled[b1]", skipped, capture="skipped"),
        _result("mamba.step[b1]", error=not_built, capture=None), _result("mamba.layer0", error=not_built, capture=None),
        _result("qwen.layer0"),  # no step unit: no row
    ], Severity.WARNING)
    assert [(r.architecture, r.verdict, r.layers, r.compiled) for r in rows] == [
        ("llama", "ready", "ready", "ready"),
        ("mistral", "not ready", "layer0 not ready GD301", "no graphs"),
        ("mamba", "not built", "not built", "")]
    assert render_markdown(rows).startswith("| architecture | verdict | layers | compiled | first cause | where |")
    assert "| mamba | not built | not built | - |" in render_markdown(rows)
    assert render_text(rows).splitlines()[0].split()[:4] == ["architecture", "verdict", "layers", "compiled"]
    assert rows[1].to_json()["layers"] == "layer0 not ready GD301"


def test_the_text_report_ends_with_the_table_and_the_json_carries_the_rows(tmp_path):
    results = _table_results()
    rows = architecture_rows(results, Severity.WARNING)
    text = build_report(results, Severity.WARNING, "text", tmp_path, architectures=rows)
    assert text.rstrip().splitlines()[-1].startswith("7 architectures:")
    summary = json.loads(build_report(results, Severity.WARNING, "json", tmp_path, architectures=rows))["summary"]
    assert [row["verdict"] for row in summary["architectures"]] == [
        "ready", "not ready", "capture fails", "not built", "not built", "step raises", "not checked"]


# -- per-layer units and --compile ----------------------------------------------------------------
@pytest.mark.parametrize(("model_type", "layers"), [
    ("llama", ["layer0"]),  # every layer alike: one unit
    ("gemma3_text", ["layer0", "layer1"]),  # sliding, then full attention (one class, two layer_types)
    ("qwen3_next", ["layer0", "layer1"]),  # linear attention, then full attention
    ("deepseek_v3", ["layer0", "layer1"]),  # a dense MLP, then the experts
    ("gemma3", ["layer0", "layer1"]),  # the language model's layers, not the vision tower's as many
    ("longcat_flash", ["layer0"]),  # two sublayers per layer: the config counts twice the list
])
def test_one_layer_unit_per_distinct_decoder_layer_called_as_the_model_calls_it(model_type, layers):
    _transformers()
    import torch

    from graphready.harness.targets.hf import PROMPT, factory

    units = [u for u in factory(model_type=model_type, batch_sizes=[1]) if ".layer" in u.name]
    assert [u.name for u in units] == [f"{model_type}.{name}" for name in layers]
    units[0].fn.arch.build("cpu")
    assert all(u.fn.layer is None for u in units)  # nothing recorded at listing
    for unit in units:
        call = unit.fn
        hidden = unit.make_inputs(1)
        cache = call.arch.layer_cache(call.index)
        written = [int(layer.cumulative_length) for layer in cache.layers if hasattr(layer, "cumulative_length")]
        assert set(written) <= {PROMPT, 0}  # recording put the cache back as the prefill left it
        assert call.kwargs["past_key_values"] is cache and "position_ids" in call.kwargs
        out = unit.fn(*hidden)
        assert out.shape == hidden[0].shape and torch.isfinite(out).all()
        assert not torch.equal(unit.make_inputs(1)[0], unit.make_inputs(2)[0])


def test_the_recorded_call_reproduces_the_models_own_layer_output():
    """With the hidden states the model gave the layer, the unit's call returns what the model's call did."""
    _transformers()
    import torch

    from graphready.harness.targets.hf import factory
    from graphready.harness.targets.hf_layers import (
        _put_back,
        _snapshot,
        decoder_layers,
        first_tensor,
    )

    [unit] = [u for u in factory(model_type="llama", batch_sizes=[1]) if u.name == "llama.layer0"]
    call = unit.fn
    call.arch.build("cpu")
    unit.make_inputs(0)
    arch = call.arch
    cache = arch.layer_cache(0)
    seen = []
    layer = decoder_layers(arch.model, arch.model.config)[0]
    handle = layer.register_forward_hook(lambda _m, args, out: seen.append((args[0].clone(), first_tensor(out).clone())))
    saved = _snapshot(cache)
    tokens, positions = arch.inputs(0)
    with torch.no_grad():
        arch.model(tokens, past_key_values=cache, use_cache=True, position_ids=positions)
    handle.remove()
    _put_back(cache, saved)
    hidden, expected = seen[0]
    assert torch.allclose(call(hidden), expected, atol=1e-6)


def test_an_architecture_that_cannot_be_built_has_a_layer_unit_that_says_why():
    _transformers()
    from graphready.harness.targets.hf import NotBuilt, factory

    layer_units = [u for u in factory(model_type="mamba", batch_sizes=[1]) if ".layer" in u.name]
    assert [u.name for u in layer_units] == ["mamba.layer0"]
    with pytest.raises(NotBuilt, match="keeps no state in it"):
        layer_units[0].fn.arch.build("cpu")
    with pytest.raises(NotBuilt, match="keeps no state in it"):  # the layer unit says so, every time
        layer_units[0].make_inputs(0)


def test_compile_adds_the_step_under_reduce_overhead_which_the_harness_checks_as_compiled():
    _transformers()
    from graphready.harness.checks.compiled import eager_callable, uses_compiler_graphs
    from graphready.harness.targets.hf import factory

    units = factory(model_type=["llama", "mixtral"], batch_sizes=[1, 2], layers=False, compile=True)
    assert [(u.name, u.keys) for u in units] == [
        ("llama.step", ("b1", "b2")), ("llama.compiled", ("b1", "b2")),
        ("mixtral.step", ("b1", "b2")), ("mixtral.compiled", ("b1", "b2"))]
    step, compiled = units[0], units[1]
    assert uses_compiler_graphs(compiled.fn) and not uses_compiler_graphs(step.fn)
    assert eager_callable(compiled.fn) == step.fn  # its Python original is the eager step, on the same caches
    assert compiled.make_inputs == step.make_inputs


# -- the options -----------------------------------------------------------------------------------
def _args(*argv: str):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_hf_options_reach_the_factory(tmp_path):
    assert json.loads(_validate(_args("hf", "--model-type", "llama", "--model-type", "mistral"))[1]) == {
        "model_type": ["llama", "mistral"]}
    assert json.loads(_validate(_args("hf", "--all-architectures", "--batch-sizes", "1,8"))[1]) == {
        "all_architectures": True, "batch_sizes": [1, 8]}
    assert json.loads(_validate(_args("hf", "--model", str(tmp_path)))[1]) == {"model": str(tmp_path.resolve())}
    assert json.loads(_validate(_args("hf", "--model-type", "llama", "--compile", "--no-layers"))[1]) == {
        "model_type": ["llama"], "compile": True, "layers": False}


@pytest.mark.parametrize(("argv", "message"), [
    (["hf"], "one of --model-type"),
    (["hf", "--model-type", "llama", "--all-architectures"], "one of --model-type"),
    (["hf", "--model", "/no/such/dir"], "no such directory"),
    (["hf", "--all-architectures", "--batch-sizes", "1,x"], "comma-separated integers"),
    (["hf", "--all-architectures", "--batch-sizes", "0"], "positive"),
    (["dsv4", "--model-type", "llama"], "only to the built-in hf target"),
    (["dsv4", "--compile"], "only to the built-in hf target"),
])
def test_hf_usage_errors(argv, message):
    with pytest.raises(UsageError, match=message):
        _validate(_args(*argv))


# -- docs/hf.md --------------------------------------------------------------------------------------
def _benchmark(name: str):
    """benchmarks/<name>.py as a module (registered, since a dataclass looks its module up)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _readiness():
    return _benchmark("hf_readiness")


def test_the_page_is_rebuilt_from_the_json_between_its_markers_and_compared_with_the_twins(tmp_path):
    readiness = _readiness()
    results = _table_results()
    doc = json.loads(build_report(results, Severity.WARNING, "json", tmp_path, settings={
        "fail-on": "warning", "steps": 4, "jobs": 5, "timeout": 90.0, "all_architectures": True,
        "batch_sizes": [1]}, run={"wall_s": 12.0}))
    twins = [{"architecture": "llama", "verdict": "ready", "cause": "", "blocking": ["cudaStreamSynchronize x1"]},
             {"architecture": "mistral", "verdict": "wrong from step 2", "cause": "max |diff| 0.1"},
             {"architecture": "mixtral", "verdict": "capture fails", "cause": "",
              "where": "transformers/models/mixtral/modeling_mixtral.py:88"},
             {"architecture": "opt", "verdict": "ready", "cause": ""}]
    bf16 = [{"architecture": "mixtral", "verdict": "ready", "cause": "max |diff| 0.001 over 32 steps",
             "dtype": "bfloat16"}]
    generated = readiness.render([doc], {"transformers": "5.17.0", "torch": "2.11"}, twins, bf16)
    assert "transformers 5.17.0, torch 2.11" in generated
    assert "graphready check hf --all-architectures --batch-sizes 1 --steps 4 --jobs 5 --timeout 90" in generated
    assert "no blocking call where the check says ready: 2 of 4." in generated
    assert "| llama | ready | ready | - | cudaStreamSynchronize x1 | **no** |" in generated  # ready, yet it syncs
    assert "| opt | not checked | ready | - | - | **no** |" in generated
    assert "### The twins in bfloat16" in generated and "| mixtral | capture fails | ready |" in generated
    assert "| mistral | not ready | GD301 add got the Python value 6 now" in generated
    page = readiness.place("# Title\n\nhand-written\n", generated)
    assert page.startswith("# CUDA-graph readiness") and readiness.BEGIN in page  # no markers: a new page
    kept = "# Title\n\nhand-written\n\n" + page[page.index(readiness.BEGIN):] + "\nafter\n"
    assert readiness.place(kept, generated) == kept  # the text around the markers stays


# -- benchmarks/hf_device_run.py -------------------------------------------------------------------
def _device_run():
    return _benchmark("hf_device_run")


def test_the_device_run_plans_the_check_first_then_the_twins_in_what_remains(tmp_path, capsys):
    device = _device_run()
    assert device.main(["--out", str(tmp_path), "--dry-run", "--jobs", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["30s", "330s", "160s", "20s"]
    assert "--jobs 3" in lines[1] and "--time-limit 300" in lines[1]  # it stops itself and still reports
    assert "hf_twins.py --all-architectures" in lines[2] and not list(tmp_path.iterdir())  # nothing ran
    assert device.main(["--out", str(tmp_path), "--dry-run", "--stages", "check", "--check-seconds", "500"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["500s"]
    with pytest.raises(SystemExit):
        device.main(["--out", str(tmp_path), "--total", "300"])  # no time left for the twins
    with pytest.raises(SystemExit):
        device.main(["--out", str(tmp_path), "--jobs", "0"])
    with pytest.raises(SystemExit):
        device.main(["--out", str(tmp_path), "--stages", "check,lint"])


def test_a_step_past_its_time_box_is_stopped_and_recorded(tmp_path):
    import sys

    device = _device_run()
    step = device.Step("sleeper", [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                       str(tmp_path / "sleeper.log"))
    device.run_step(step, 2)
    assert step.timed_out and step.rc is not None and step.wall_s < 2 + device.GRACE_S
    device._record(tmp_path, [step])
    assert json.loads((tmp_path / "run.json").read_text())["steps"][0]["timed_out"] is True
    assert (tmp_path / "sleeper.log").read_text() == "up\n"  # what it wrote stays


def test_the_page_renders_from_whatever_json_the_stopped_run_left(tmp_path):
    """One shard wrote its JSON, another was stopped mid-way (a cut file), the twins wrote some rows."""
    device, readiness = _device_run(), _readiness()
    (tmp_path / "check1.json").write_text(build_report(_table_results(), Severity.WARNING, "json", tmp_path, settings={
        "fail-on": "warning", "steps": 4, "jobs": 4, "timeout": 90.0, "all_architectures": True, "batch_sizes": [1]},
        run={"wall_s": 12.0}))
    (tmp_path / "check2.json").write_text('{"units": [')
    assert device.render_argv(tmp_path / "none") is None
    (tmp_path / "twins.json").write_text(json.dumps([{"architecture": "llama", "verdict": "ready", "cause": ""}]))
    argv = device.render_argv(tmp_path)
    assert argv[3:] == [str(tmp_path / "check1.json"), "--twins", str(tmp_path / "twins.json"),
                        "--output", str(tmp_path / "hf.md")]
    assert argv[2] == "render" and readiness.main(argv[2:]) == 0
    page = (tmp_path / "hf.md").read_text()
    assert "7 architectures in 12 s" in page and "| llama | ready | ready | - | - | yes |" in page


# -- benchmarks/hf_twins.py --compile -------------------------------------------------------------
def test_the_compiled_twin_follows_the_eager_one_and_says_when_it_does_not():
    """CPU (the compiler's CUDA graphs need a GPU; the decoding, the comparison and the verdicts do not)."""
    _transformers()
    import torch

    from graphready.harness.targets.hf import PROMPT, Architecture

    twins = _benchmark("hf_twins")

    def pair():
        eager, compiled = (Architecture("llama", "LlamaForCausalLM", (1,)) for _ in range(2))
        for arch in (eager, compiled):
            arch.build(torch.device("cpu"))
            arch.step(torch.full((1, 1), 7), torch.full((1, 1), PROMPT))
        return eager, compiled

    eager, compiled = pair()
    said = twins._compiled_steps(eager, compiled, torch.full((1, 1), 7), PROMPT + 1, 4, 1e-4)
    assert said["verdict"] == "ready" and said["cause"].endswith("over 4 steps")
    eager, compiled = pair()
    with torch.no_grad():
        compiled.model.lm_head.weight.mul_(1.01)  # a twin that decodes differently is caught at once
    said = twins._compiled_steps(eager, compiled, torch.full((1, 1), 7), PROMPT + 1, 4, 1e-4)
    assert said["verdict"] == "wrong from step 1"
