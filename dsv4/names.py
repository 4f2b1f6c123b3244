"""The tensors a DeepSeek-V4 checkpoint holds (derived from the config) and their names on disk.

Loaded weights are keyed by the OFFICIAL names (``deepseek-ai`` release, spec section 7). Linear layers are
keyed without a ``.weight`` suffix and hold a ``QuantizedWeight``; routed experts are one stacked entry per
projection (``layers.{i}.ffn.experts.w1``, ``[E, out, in]``). Everything else is a plain tensor under its full
name (``...q_norm.weight``, ``...compressor.ape``, ``hc_head_fn``).

Official name (per layer, prefix ``layers.{i}.``) -> HF / NVIDIA NVFP4 release name (prefix ``model.layers.{i}.``),
as used in the engineering log. [GUESS] marks names not seen in the log or spec.

=================================  =================================================
official                           HF / NVFP4
=================================  =================================================
embed.weight                       model.embed_tokens.weight
head.weight                        lm_head.weight
norm.weight                        model.norm.weight
hc_head_fn / _base / _scale        model.hc_head.hc_fn / hc_base / hc_scale
hc_attn_fn / _base / _scale        attn_hc.fn / base / scale
hc_ffn_fn / _base / _scale         ffn_hc.fn / base / scale
attn_norm.weight                   input_layernorm.weight
ffn_norm.weight                    post_attention_layernorm.weight
attn.wq_a                          self_attn.q_a_proj
attn.q_norm.weight                 self_attn.q_a_norm.weight
attn.wq_b                          self_attn.q_b_proj
attn.wkv                           self_attn.kv_proj
attn.kv_norm.weight                self_attn.kv_norm.weight
attn.wo_a / attn.wo_b              self_attn.o_a_proj / o_b_proj
attn.attn_sink                     self_attn.sinks  [GUESS]
attn.compressor.wkv / wgate        self_attn.compressor.kv_proj / gate_proj
attn.compressor.ape                self_attn.compressor.position_bias
attn.compressor.norm.weight        self_attn.compressor.kv_norm.weight
attn.indexer.wq_b                  self_attn.compressor.indexer.q_b_proj
attn.indexer.weights_proj          self_attn.compressor.indexer.weights_proj
attn.indexer.compressor.wkv/wgate  self_attn.compressor.indexer.kv_proj / gate_proj
attn.indexer.compressor.ape        self_attn.compressor.indexer.position_bias
attn.indexer.compressor.norm.w..   self_attn.compressor.indexer.kv_norm.weight
ffn.gate.weight                    mlp.gate.weight
ffn.gate.bias                      mlp.gate.e_score_correction_bias
ffn.gate.tid2eid                   mlp.gate.tid2eid
ffn.experts.{e}.w1 / w3 / w2       mlp.experts.{e}.gate_proj / up_proj / down_proj
ffn.shared_experts.w1 / w3 / w2    mlp.shared_experts.gate_proj / up_proj / down_proj
=================================  =================================================

The MTP layer (``mtp.0.*``, loaded on request) is the official names' ``mtp.0.`` prefix; HF-style files store it as
layer ``model.layers.{num_hidden_layers}`` (block tensors under the names above, ``e_proj``, ``h_proj``, ``enorm``,
``hnorm``, ``hc_head_fn``/``_base``/``_scale`` as they are, ``norm`` as ``shared_head.norm``), as vLLM reads it.

HF transformers' scheme (``transformers``) is the HF / NVFP4 one except for two things: the indexer's head
weights sit under ``self_attn.compressor.indexer.scorer.weights_proj``, and each layer's routed experts are two
fused tensors, ``mlp.experts.gate_up_proj`` ``[E, 2I, D]`` (w1 rows, then w3 rows) and ``mlp.experts.down_proj``
``[E, D, I]`` (w2), see ``dsv4.fused_experts``.

Quantized linears store components under suffixes of the module name, whichever scheme:
BF16 ``.weight``; FP8 ``.weight`` + ``.scale`` (official; HF-style files may say ``.weight_scale_inv`` or
``.weight_scale`` [GUESS for the NVFP4 release]); MXFP4 ``.weight`` + ``.scale``; NVFP4 ``.weight`` +
``.weight_scale`` + ``.weight_scale_2`` (+ ``.input_scale``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsv4.config import DSV4Config

GLOBAL_HF = {
    "embed.weight": "model.embed_tokens.weight",
    "head.weight": "lm_head.weight",
    "norm.weight": "model.norm.weight",
    "hc_head_fn": "model.hc_head.hc_fn",
    "hc_head_base": "model.hc_head.hc_base",
    "hc_head_scale": "model.hc_head.hc_scale",
}
LAYER_HF = {
    "hc_attn_fn": "attn_hc.fn", "hc_attn_base": "attn_hc.base", "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn", "hc_ffn_base": "ffn_hc.base", "hc_ffn_scale": "ffn_hc.scale",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn.wq_a": "self_attn.q_a_proj",
    "attn.q_norm.weight": "self_attn.q_a_norm.weight",
    "attn.wq_b": "self_attn.q_b_proj",
    "attn.wkv": "self_attn.kv_proj",
    "attn.kv_norm.weight": "self_attn.kv_norm.weight",
    "attn.wo_a": "self_attn.o_a_proj",
    "attn.wo_b": "self_attn.o_b_proj",
    "attn.attn_sink": "self_attn.sinks",
    "attn.compressor.wkv": "self_attn.compressor.kv_proj",
    "attn.compressor.wgate": "self_attn.compressor.gate_proj",
    "attn.compressor.ape": "self_attn.compressor.position_bias",
    "attn.compressor.norm.weight": "self_attn.compressor.kv_norm.weight",
    "attn.indexer.wq_b": "self_attn.compressor.indexer.q_b_proj",
    "attn.indexer.weights_proj": "self_attn.compressor.indexer.weights_proj",
    "attn.indexer.compressor.wkv": "self_attn.compressor.indexer.kv_proj",
    "attn.indexer.compressor.wgate": "self_attn.compressor.indexer.gate_proj",
    "attn.indexer.compressor.ape": "self_attn.compressor.indexer.position_bias",
    "attn.indexer.compressor.norm.weight": "self_attn.compressor.indexer.kv_norm.weight",
    "ffn.gate.weight": "mlp.gate.weight",
    "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.gate.tid2eid": "mlp.gate.tid2eid",
    "ffn.shared_experts.w1": "mlp.shared_experts.gate_proj",
    "ffn.shared_experts.w3": "mlp.shared_experts.up_proj",
    "ffn.shared_experts.w2": "mlp.shared_experts.down_proj",
}
LAYER_TRANSFORMERS = {**LAYER_HF, "attn.indexer.weights_proj": "self_attn.compressor.indexer.scorer.weights_proj"}
EXPERT_HF = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
FUSED_EXPERT_HF = {"w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj"}
SCHEMES = ("official", "hf", "transformers")
# the MTP layer's own tensors in HF-style files (vLLM's names); its decoder block uses LAYER_HF
MTP_HF = {"e_proj": "e_proj", "h_proj": "h_proj", "enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight",
          "norm.weight": "shared_head.norm.weight", "hc_head_fn": "hc_head_fn", "hc_head_base": "hc_head_base",
          "hc_head_scale": "hc_head_scale"}

F32, BF16 = (torch.float32,), (torch.bfloat16,)
NORM_DTYPES = (torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class TensorSpec:
    """One entry of a loaded checkpoint.

    kind: ``linear`` (a QuantizedWeight of logical shape [out, in]), ``experts`` (one stacked QuantizedWeight
    [E, out, in] from E per-expert linears), ``dense`` (a plain BF16 matrix that a release may store quantized;
    dequantized on load), or ``tensor`` (plain, dtype one of ``dtypes``).
    role picks the synthetic format: ``attn`` and ``shared`` linears are FP8 in the releases, ``expert`` FP4,
    ``plain`` BF16. init says how synth draws it.
    """

    name: str
    shape: tuple[int, ...]
    kind: str
    dtypes: tuple[torch.dtype, ...] = BF16
    role: str = "plain"
    init: str = "linear"


def global_specs(c: DSV4Config) -> list[TensorSpec]:
    d, hc = c.hidden_size, c.hc_mult
    return [
        TensorSpec("embed.weight", (c.vocab_size, d), "dense", init="embed"),
        TensorSpec("norm.weight", (d,), "tensor", NORM_DTYPES, init="ones"),
        TensorSpec("hc_head_fn", (hc, hc * d), "tensor", F32, init="hc_fn"),
        TensorSpec("hc_head_base", (hc,), "tensor", F32, init="small"),
        TensorSpec("hc_head_scale", (1,), "tensor", F32, init="hc_scale"),
        TensorSpec("head.weight", (c.vocab_size, d), "dense"),
    ]


def _compressor(p: str, c: DSV4Config, width: int, ratio: int, role: str) -> list[TensorSpec]:
    d, cols = c.hidden_size, (2 if ratio == 4 else 1) * width
    return [
        TensorSpec(f"{p}.wkv", (cols, d), "linear", role=role),
        TensorSpec(f"{p}.wgate", (cols, d), "linear", role=role),
        TensorSpec(f"{p}.ape", (ratio, cols), "tensor", F32, init="small"),
        TensorSpec(f"{p}.norm.weight", (width,), "tensor", NORM_DTYPES, init="ones"),
    ]


def layer_specs(c: DSV4Config, i: int) -> list[TensorSpec]:
    """Every tensor of decoder layer ``i`` (0 <= i < num_hidden_layers; the MTP layer is `mtp_specs`)."""
    if not 0 <= i < c.num_hidden_layers:
        raise IndexError(f"layer {i} out of range 0..{c.num_hidden_layers - 1}")
    return _block_specs(c, i, f"layers.{i}")


def mtp_specs(c: DSV4Config) -> list[TensorSpec]:
    """The MTP layer ``mtp.0``: a decoder block of layer index num_hidden_layers (its compress ratio, non-hash
    routing) plus the token/hidden projections and norms and its own hc_head; embedding and head are shared."""
    if c.num_nextn_predict_layers < 1:
        raise IndexError("the config has no MTP layer (num_nextn_predict_layers is 0)")
    p, d, hc = "mtp.0", c.hidden_size, c.hc_mult
    return _block_specs(c, c.num_hidden_layers, p) + [
        TensorSpec(f"{p}.e_proj", (d, d), "linear", role="attn"),
        TensorSpec(f"{p}.h_proj", (d, d), "linear", role="attn"),
        TensorSpec(f"{p}.enorm.weight", (d,), "tensor", NORM_DTYPES, init="ones"),
        TensorSpec(f"{p}.hnorm.weight", (d,), "tensor", NORM_DTYPES, init="ones"),
        TensorSpec(f"{p}.norm.weight", (d,), "tensor", NORM_DTYPES, init="ones"),
        TensorSpec(f"{p}.hc_head_fn", (hc, hc * d), "tensor", F32, init="hc_fn"),
        TensorSpec(f"{p}.hc_head_base", (hc,), "tensor", F32, init="small"),
        TensorSpec(f"{p}.hc_head_scale", (1,), "tensor", F32, init="hc_scale"),
    ]


def _block_specs(c: DSV4Config, i: int, p: str) -> list[TensorSpec]:
    d, hd, h, g = c.hidden_size, c.head_dim, c.num_attention_heads, c.o_groups
    mix, e, inter = c.hc_mix_dim, c.n_routed_experts, c.moe_intermediate_size
    s = []
    for site in ("attn", "ffn"):
        s += [TensorSpec(f"{p}.hc_{site}_fn", (mix, c.hc_dim), "tensor", F32, init="hc_fn"),
              TensorSpec(f"{p}.hc_{site}_base", (mix,), "tensor", F32, init="small"),
              TensorSpec(f"{p}.hc_{site}_scale", (3,), "tensor", F32, init="hc_scale")]
    s += [
        TensorSpec(f"{p}.attn_norm.weight", (d,), "tensor", NORM_DTYPES, init="ones"),
        TensorSpec(f"{p}.ffn_norm.weight", (d,), "tensor", NORM_DTYPES, init="ones"),
        TensorSpec(f"{p}.attn.wq_a", (c.q_lora_rank, d), "linear", role="attn"),
        TensorSpec(f"{p}.attn.q_norm.weight", (c.q_lora_rank,), "tensor", NORM_DTYPES, init="ones"),
        TensorSpec(f"{p}.attn.wq_b", (h * hd, c.q_lora_rank), "linear", role="attn"),
        TensorSpec(f"{p}.attn.wkv", (hd, d), "linear", role="attn"),
        TensorSpec(f"{p}.attn.kv_norm.weight", (hd,), "tensor", NORM_DTYPES, init="ones"),
        TensorSpec(f"{p}.attn.wo_a", (g * c.o_lora_rank, (h // g) * hd), "linear", role="attn"),
        TensorSpec(f"{p}.attn.wo_b", (d, g * c.o_lora_rank), "linear", role="attn"),
        TensorSpec(f"{p}.attn.attn_sink", (h,), "tensor", F32, init="small"),
    ]
    ratio = c.compress_ratios[i]
    if ratio:
        s += _compressor(f"{p}.attn.compressor", c, hd, ratio, "plain")
    if ratio == 4:
        s += [TensorSpec(f"{p}.attn.indexer.wq_b", (c.index_n_heads * c.index_head_dim, c.q_lora_rank), "linear",
                         role="attn"),
              TensorSpec(f"{p}.attn.indexer.weights_proj", (c.index_n_heads, d), "linear")]
        s += _compressor(f"{p}.attn.indexer.compressor", c, c.index_head_dim, 4, "plain")
    s.append(TensorSpec(f"{p}.ffn.gate.weight", (e, d), "dense"))
    if c.is_hash_layer(i):
        s.append(TensorSpec(f"{p}.ffn.gate.tid2eid", (c.vocab_size, c.num_experts_per_tok), "tensor",
                            (torch.int32, torch.int64), init="tid2eid"))
    else:
        s.append(TensorSpec(f"{p}.ffn.gate.bias", (e,), "tensor", F32, init="small"))
    s += [TensorSpec(f"{p}.ffn.experts.w1", (e, inter, d), "experts", role="expert"),
          TensorSpec(f"{p}.ffn.experts.w3", (e, inter, d), "experts", role="expert"),
          TensorSpec(f"{p}.ffn.experts.w2", (e, d, inter), "experts", role="expert")]
    si = c.n_shared_experts * inter
    s += [TensorSpec(f"{p}.ffn.shared_experts.w1", (si, d), "linear", role="shared"),
          TensorSpec(f"{p}.ffn.shared_experts.w3", (si, d), "linear", role="shared"),
          TensorSpec(f"{p}.ffn.shared_experts.w2", (d, si), "linear", role="shared")]
    return s


def _disk_layer(official: str, layers: int | None) -> tuple[int, str]:
    """(on-disk layer index, local name) of a per-layer official name; MTP layer k is layer num_hidden_layers + k."""
    group, k, local = official.split(".", 2)
    if group == "layers":
        return int(k), local
    if layers is None:
        raise ValueError(f"{official}: the HF name of an MTP tensor needs num_hidden_layers")
    return layers + int(k), local


def disk_name(official: str, scheme: str, layers: int | None = None) -> str:
    """On-disk name (or module base, for linears) of an official name in ``scheme`` (one of ``SCHEMES``).

    ``layers`` (num_hidden_layers) places the MTP layer: HF-style files store ``mtp.0`` as layer
    ``model.layers.{layers}`` (as vLLM reads them), with ``norm`` under ``shared_head``."""
    if scheme == "official":
        return official
    if official in GLOBAL_HF:
        return GLOBAL_HF[official]
    i, local = _disk_layer(official, layers)
    if official.startswith("mtp.") and local in MTP_HF:
        return f"model.layers.{i}.{MTP_HF[local]}"
    table = LAYER_TRANSFORMERS if scheme == "transformers" else LAYER_HF
    return f"model.layers.{i}.{table[local]}"


def expert_disk_base(stacked: str, e: int, scheme: str, layers: int | None = None) -> str:
    """Module base of expert ``e`` of a stacked entry such as ``layers.3.ffn.experts.w1`` (per-expert schemes)."""
    head, proj = stacked.rsplit(".", 1)
    if scheme == "official":
        return f"{head}.{e}.{proj}"
    i, _ = _disk_layer(stacked, layers)
    return f"model.layers.{i}.mlp.experts.{e}.{EXPERT_HF[proj]}"


def fused_experts_name(stacked: str, layers: int | None = None) -> str:
    """The transformers tensor holding a stacked entry: ``layers.3.ffn.experts.w3`` -> ``...experts.gate_up_proj``."""
    i, _ = _disk_layer(stacked, layers)
    return f"model.layers.{i}.mlp.experts.{FUSED_EXPERT_HF[stacked.rsplit('.', 1)[1]]}"


def detect_scheme(names) -> str:
    """"transformers" for ``model.``-prefixed names with fused experts or the indexer's ``scorer``, "hf" for other
    ``model.``-prefixed names, else "official"."""
    names = list(names)
    if not any(n.startswith("model.") for n in names):
        return "official"
    if any(".mlp.experts.gate_up_proj" in n or ".indexer.scorer." in n for n in names):
        return "transformers"
    return "hf"
