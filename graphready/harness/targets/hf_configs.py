"""Small configurations of HF transformers causal LMs, derived from each config class's own defaults.

`small_config(model_type)` builds the config class's defaults, then shrinks every size it knows by
name (hidden size, heads, MLP and expert widths, the ranks of MLA, linear-attention and SSM heads,
vocabulary) and the layer count, keeping what makes the architecture what it is: the experts
(fewer, still routed), every distinct layer type (sliding, full, chunked, linear attention, Mamba:
the first layer of each, in order), a dense layer before the MoE ones where the defaults have
one, and sliding windows and attention chunks shorter than the cache (see WINDOW). A field
whose class default is None is left for the class to derive (MLA's head_dim from its rope part).
Sub-configs (a multimodal model's text and vision parts) shrink the same way. `FAMILY` holds the
few per-architecture settings the generic rules cannot guess (where the attention layers of a
hybrid sit, a default with no experts). CPU only, no weights: cheap enough for every architecture.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

VOCAB = 512
HIDDEN = 64
HEADS = 4
HEAD_DIM = 16
# Sliding windows and attention chunks: shorter than the cache (hf.MAX_LEN), longer than the eager steps a
# check runs before it captures. A sliding-window layer counts its tokens in a Python int that eager calls
# advance and restoring tensors does not reset; once it reaches the window the layer takes another branch
# (a pageable index copy capture rejects), so a window of 16 made the capture see that branch where a
# decoder capturing early would not (the twins of benchmarks/hf_twins.py replay wrong from step 2 instead).
WINDOW = 48
SPECIAL_IDS = 32  # token ids a config reserves (image, audio, pad...) move into the vocabulary's top

# Size fields set to this value whenever the defaults have a larger one.
_FIXED = {
    "vocab_size": VOCAB,
    "hidden_size": HIDDEN, "d_model": HIDDEN, "n_embd": HIDDEN, "n_embed": HIDDEN, "embed_dim": HIDDEN,
    "emb_dim": HIDDEN, "attention_hidden_size": HIDDEN, "lru_width": HIDDEN, "hidden_size_per_layer_input": 16,
    "intermediate_size": 128, "ffn_dim": 128, "decoder_ffn_dim": 128, "encoder_ffn_dim": 128, "n_inner": 128,
    "ffn_hidden_size": 128, "d_ff": 128, "dim_ff": 128, "feed_forward_size": 128, "dense_intermediate_size": 128,
    "intermediate_size_mlp": 128, "d_inner": 128,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "moe_shared_expert_intermediate_size": 32,
    "expert_ffn_hidden_size": 32, "shared_intermediate_size": 32,
    "num_attention_heads": HEADS, "n_head": HEADS, "n_heads": HEADS, "num_heads": HEADS,
    "decoder_attention_heads": HEADS, "encoder_attention_heads": HEADS, "attention_heads": HEADS,
    "head_dim": HEAD_DIM, "attention_head_dim": HEAD_DIM, "kv_channels": HEAD_DIM, "d_head": HEAD_DIM,
    "dim_head": HEAD_DIM, "attention_head_size": HEAD_DIM, "rotary_dim": HEAD_DIM // 2,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "q_lora_rank": 32, "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "index_head_dim": 16, "index_n_heads": 2, "o_lora_rank": 32,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
    "linear_num_heads": 2, "linear_head_dim": 16,
    "mamba_d_state": 16, "state_size": 16, "ssm_state_size": 16, "mamba_n_heads": 8, "mamba_num_heads": 8,
    "mamba_d_head": 16, "mamba_head_dim": 16, "mamba_headdim": 16, "time_step_rank": 8, "mamba_dt_rank": 8,
    "n_mamba_heads": 2,
    "sliding_window": WINDOW, "attention_chunk_size": WINDOW, "sliding_window_size": WINDOW,
    "attention_window_size": WINDOW, "window_size": WINDOW,
}
# Counts kept at most this large: top-k routing over the fewer experts, the grouped router's groups.
_AT_MOST = {"num_experts_per_tok": 2, "num_experts_per_token": 2, "moe_topk": 2, "moe_k": 2, "top_k": 2,
            "n_group": 2, "topk_group": 1, "n_shared_experts": 1, "index_topk": 8, "first_k_dense_replace": 1,
            "n_groups": 1, "num_kv_shared_layers": 1}
# Fields some defaults leave at None although the modeling code divides by them.
_UNSET = {"head_dim": HIDDEN // HEADS, "num_key_value_heads": HEADS}
_LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "num_decoder_layers")
_OTHER_STACKS = ("encoder_layers", "num_encoder_layers")  # an encoder-decoder family's other stack: as short
_LAYER_TYPES = ("layer_types", "layers_block_type", "block_types", "hybrid_override_pattern")
_PER_LAYER = "per_layer_config"  # a heterogeneous config's overrides by layer index (Gemma 4)

# What the generic rules cannot guess. "layers": indices of the default layers to keep.
FAMILY: dict[str, dict[str, Any]] = {
    # hybrids whose defaults put the attention layers (and experts) where two layers never reach
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
    # two hybrid layers: the later ones tie their shared transformer to the first, which one alone cannot
    "zamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "layers": [0, 2, 7]},
    "zamba2": {"layers": [0, 6, 12], "attention_hidden_size": 2 * HIDDEN, "attention_head_dim": 2 * HIDDEN // HEADS},
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["mamba", "attention"]},
    # defaults with no experts at all
    "dots1": {"n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2},
    "deepseek_v2": {"num_experts_per_tok": 2},
    # no layer types by default, and the modeling code reads them
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    # the last layers reuse the KV of the last earlier layer of their type: two of each type
    "gemma3n_text": {"layers": [3, 4, 8, 9], "num_kv_shared_layers": 2},
    # defaults the modeling code cannot run: no RoPE for any layer type (sliding layers rotate, full ones are
    # NoPE, the class allowing it; the rotary sections cover the small head), no QKV clip (DBRX clamps by it), a
    # sparse indexer left unset (Qwen4-Exp's QSA: four blocks of four under a 64-slot cache), no language (X-MOD)
    "cohere_compass_text": {"layer_types": ["sliding_attention", "full_attention"], "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [3, 3, 2]},
        "full_attention": None}},
    "dbrx": {"attn_config": {"rope_theta": 10000.0, "clip_qkv": 8.0}},
    "qwen4_exp_text": {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": HEAD_DIM, "indexer_budget": 16,
                       "indexer_compress_ratio": 4, "hc_lowrank": 16},
    "xmod": {"default_language": "en_XX"},
    # axial position embeddings: their widths add up to the hidden size, their shape multiplies to the positions
    "reformer": {"axial_pos_embds_dim": [16, HIDDEN - 16], "axial_pos_shape": [8, 8], "max_position_embeddings": 64},
    "blt": {"encoder_hash_byte_group_vocab": VOCAB},  # hash embeddings of 500k rows per function
}
FAMILY["gemma3n"] = {"text_config": FAMILY["gemma3n_text"]}
FAMILY["qwen4_exp"] = {"text_config": FAMILY["qwen4_exp_text"]}


class ShrinkError(Exception):
    """The architecture has no config class, or its config rejects the small sizes."""


@dataclass(frozen=True)
class Plan:
    """An architecture's small config, or why there is none."""

    model_type: str
    model_class: str | None
    config: Any = None
    reason: str | None = None


def causal_lm_types() -> dict[str, str]:
    """Every causal-LM model type of the installed transformers and the class name it maps to."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return dict(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _derived(config_class) -> set[str]:
    """Fields the class computes when left at None (its dataclass default)."""
    if not dataclasses.is_dataclass(config_class):
        return set()
    return {f.name for f in dataclasses.fields(config_class) if f.default is None}


def _kv_heads(default: int, heads: int) -> int:
    """The attention kind stays: multi-head stays multi-head, multi-query one head, grouped gets 2."""
    if default >= heads:
        return HEADS
    return 1 if default == 1 else 2


def _first_of_each(types) -> list[int]:
    first: dict[str, int] = {}
    for index, kind in enumerate(types):
        first.setdefault(str(kind), index)
    return sorted(first.values())


def _layer_types(fields: dict[str, Any]) -> tuple[str, Any] | None:
    """The field that lists the layer types (or their repeated pattern); a property derived from others is no
    such field (Jamba's `layers_block_type`)."""
    for name in _LAYER_TYPES:
        types = fields.get(name)
        if isinstance(types, (list, tuple, str)) and types:
            return name, types
    return None


def _shrunk_layers(fields: dict[str, Any], overrides: dict[str, Any], keep: list[int] | None) -> None:
    """The layer count, and every per-layer list or layer-index list cut down to the kept layers.

    A type list shorter than the layer count is a pattern repeated over the layers (RecurrentGemma's
    block types): the pattern itself is cut, to one entry per type."""
    count_name = next((n for n in _LAYER_COUNTS if isinstance(fields.get(n), int) and fields[n] > 0), None)
    if count_name is None:
        return
    layers = fields[count_name]
    found = _layer_types(fields)
    if keep is None:
        keep = _first_of_each(found[1]) if found else []
        keep = sorted(keep + [i for i in range(layers) if i not in keep][: max(0, 2 - len(keep))])
    if found and len(found[1]) < layers:
        pattern = found[1]
        cut = [pattern[i] for i in _first_of_each(pattern)]
        overrides[found[0]] = "".join(cut) if isinstance(pattern, str) else cut
        overrides[count_name] = max(2, len(cut))
        return
    keep = [i for i in keep if i < layers] or [0]
    renumber = {old: new for new, old in enumerate(keep)}
    overrides[count_name] = len(keep)
    for name in (*_LAYER_COUNTS, *_OTHER_STACKS):
        if name != count_name and isinstance(fields.get(name), int) and fields[name] > len(keep):
            overrides[name] = len(keep)
    for name, value in fields.items():
        if name == count_name or name in overrides:
            continue
        if isinstance(value, (list, tuple)) and len(value) == layers and layers > 1:
            overrides[name] = [value[i] for i in keep]
        elif isinstance(value, str) and name in _LAYER_TYPES and len(value) == layers:
            overrides[name] = "".join(value[i] for i in keep)
        elif (name.endswith(("_layers", "_idxs", "_indices", "_layer_ids")) and isinstance(value, (list, tuple))
              and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            overrides[name] = [renumber[v] for v in value if v in renumber]
        elif name == _PER_LAYER and isinstance(value, dict):
            overrides[name] = {str(renumber[int(i)]): _per_layer_sizes(sizes, fields)
                               for i, sizes in value.items() if int(i) in renumber}


def _per_layer_sizes(sizes: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """One layer's overrides of a heterogeneous config, shrunk in proportion to the global size they replace
    (Gemma 4's full-attention layers keep twice the head_dim of its sliding ones)."""
    shrunk = dict(sizes)
    for name, value in sizes.items():
        if name in _FIXED and isinstance(value, int) and not isinstance(value, bool) and value > _FIXED[name]:
            base = fields.get(name)
            ratio = value // base if isinstance(base, int) and base > 0 else 1
            shrunk[name] = _FIXED[name] * max(ratio, 1)
    return shrunk


def _token_ids(fields: dict[str, Any], vocab: int, overrides: dict[str, Any]) -> None:
    """Special token ids outside the small vocabulary move to its top; distinct ids stay distinct."""
    spare = iter(range(vocab - 1, vocab - SPECIAL_IDS - 1, -1))
    moved: dict[int, int] = {}
    for name, value in sorted(fields.items()):
        if not name.endswith(("_token_id", "_token_index", "_token_ids")):
            continue
        ids = value if isinstance(value, list) else [value]
        if not ids or not all(isinstance(v, int) and not isinstance(v, bool) for v in ids):
            continue
        new = []
        for token in ids:
            if token >= vocab - SPECIAL_IDS:
                token = moved.setdefault(token, next(spare, vocab - 1))
            new.append(token)
        if new != ids:
            overrides[name] = new if isinstance(value, list) else new[0]


def _sizes(fields: dict[str, Any], derived: set[str], overrides: dict[str, Any]) -> None:
    for name, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, int) or name in derived:
            continue
        if name in _FIXED and value > _FIXED[name]:
            overrides[name] = _FIXED[name]
        elif name in _AT_MOST and value > _AT_MOST[name]:
            overrides[name] = _AT_MOST[name]
    rope = fields.get("qk_rope_head_dim")
    if isinstance(rope, int) and fields.get("head_dim") == rope:  # MLA: the rotary part is the head_dim
        overrides["head_dim"] = _FIXED["qk_rope_head_dim"]
    heads = fields.get("num_attention_heads")
    if isinstance(fields.get("num_key_value_heads"), int) and isinstance(heads, int):
        overrides["num_key_value_heads"] = _kv_heads(fields["num_key_value_heads"], heads)
    if all(isinstance(fields.get(n), int) for n in ("expand", "num_heads", "head_dim")):  # Mamba2's heads
        hidden = overrides.get("hidden_size", fields.get("hidden_size", HIDDEN))
        overrides["num_heads"] = fields["expand"] * hidden // overrides.get("head_dim", fields["head_dim"])
    if all(isinstance(fields.get(n), int) for n in ("mamba_expand", "n_mamba_heads", "mamba_headdim")):  # Zamba2's
        hidden = overrides.get("hidden_size", fields.get("hidden_size", HIDDEN))
        heads = overrides.get("n_mamba_heads", fields["n_mamba_heads"])
        overrides["mamba_headdim"] = fields["mamba_expand"] * hidden // heads


def _read(config, name: str, fallback: Any = None) -> Any:
    """A field's global value. A heterogeneous config refuses plain reads of its per-layer fields (Gemma 4's
    head_dim); its own unchecked read gives the global value the class was built with."""
    read = getattr(config, "_getattr_without_heterogeneous_validation", None)
    try:
        return read(name) if read is not None else getattr(config, name)
    except AttributeError:
        return fallback


def _fields(config) -> dict[str, Any]:
    """The config's fields by name, the per-layer overrides as the dict the class takes (`to_dict`'s)."""
    data = config.to_dict()
    missing = object()
    fields = {name: value for name in data if (value := _read(config, name, missing)) is not missing}
    if isinstance(data.get(_PER_LAYER), dict):
        fields[_PER_LAYER] = data[_PER_LAYER]
    return fields


def _overrides(default, family: dict[str, Any]) -> dict[str, Any]:
    fields = _fields(default)
    family = dict(family)
    overrides: dict[str, Any] = {}
    _sizes(fields, _derived(type(default)), overrides)
    subs = getattr(default, "sub_configs", {}) or {}
    overrides.update({k: v for k, v in family.items() if k != "layers" and not (k in subs and isinstance(v, dict))})
    _shrunk_layers(fields, overrides, family.get("layers"))
    vocab = overrides.get("vocab_size", fields.get("vocab_size"))
    if isinstance(vocab, int):
        _token_ids(fields, vocab, overrides)
    if fields.get("is_decoder") is False and not fields.get("is_encoder_decoder"):
        overrides["is_decoder"] = True  # encoder families (BERT, RoBERTa) decode causally, with a cache, only so
    for name in subs:
        sub = getattr(default, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            overrides[name] = shrink(sub, family.get(name, {}))
    return overrides


def shrink(default, family: dict[str, Any] | None = None):
    """A small config of the same class as `default`, built by the class from shrunk sizes."""
    config_class = type(default)
    config = config_class(**_overrides(default, family or {}))
    # the modeling code reads `getattr(config, "head_dim", hidden // heads)`, which a None left there defeats
    unset = {name: value for name, value in _UNSET.items()
             if name in config.to_dict() and _read(config, name, 0) is None}
    return config_class(**_overrides(default, {**unset, **(family or {})})) if unset else config


def small_config(model_type: str):
    """The small config of `model_type`; ShrinkError when the installed transformers cannot make one."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        config_class = CONFIG_MAPPING[model_type]
    except KeyError:
        raise ShrinkError(f"transformers has no config class for {model_type!r}") from None
    try:
        default = config_class()
    except Exception as exc:  # the class has no usable defaults (a required sub-config)
        decoder_class = _causal_lm_config_class(model_type)
        if decoder_class in (None, config_class):
            raise ShrinkError(f"{config_class.__name__}() has no defaults: {first_line(exc)}") from None
        try:  # the causal LM takes a config of its own (Musicgen's decoder): its defaults do
            config_class, default = decoder_class, decoder_class()
        except Exception as inner:
            raise ShrinkError(f"{decoder_class.__name__}() has no defaults: {first_line(inner)}") from None
    try:
        return shrink(default, FAMILY.get(model_type))
    except Exception as exc:
        raise ShrinkError(f"{config_class.__name__} rejects the small sizes: {first_line(exc)}") from None


def _causal_lm_config_class(model_type: str):
    """The config class the model type's causal-LM class takes, where transformers names one."""
    import transformers

    return getattr(getattr(transformers, causal_lm_types().get(model_type, ""), None), "config_class", None)


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def plan(model_type: str) -> Plan:
    """The small config for `model_type`, or the reason there is none."""
    model_class = causal_lm_types().get(model_type)
    try:
        return Plan(model_type, model_class, config=small_config(model_type))
    except ShrinkError as exc:
        return Plan(model_type, model_class, reason=str(exc))
