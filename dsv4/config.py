"""DeepSeek-V4 model configuration: load a checkpoint's ``config.json`` or build a named preset.

Attribute names are the ``config.json`` keys, so a config round-trips through JSON unchanged.
Presets (see ``preset``):

* ``pro`` / ``flash``: the released models (spec section 1).
* ``pro-<N>L``: full Pro widths with the first N Pro layers (their real CSA/HCA/hash mix), for GPU
  benchmarks that cannot hold 61 layers.
* ``tiny``: runs on a CPU in seconds yet has every layer kind: hash-routed HCA / window / CSA layers, then
  non-hash CSA / HCA / window layers, 8 experts (top 2). Its widths make every quantized block format
  divide (NVFP4 16, MXFP4 32) except FP8's 128x128 blocks, whose padding path it therefore exercises.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAYER_KINDS = {0: "window", 4: "csa", 128: "hca"}
YARN_ROPE_SCALING = {
    "type": "yarn",
    "factor": 16.0,
    "original_max_position_embeddings": 65536,
    "beta_fast": 32,
    "beta_slow": 1,
}


class ConfigError(ValueError):
    """A config file or preset name that cannot describe a DeepSeek-V4 model."""


@dataclass(frozen=True)
class DSV4Config:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    qk_rope_head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    n_routed_experts: int
    num_experts_per_tok: int
    n_shared_experts: int
    moe_intermediate_size: int
    num_hash_layers: int
    scoring_func: str
    norm_topk_prob: bool
    routed_scaling_factor: float
    swiglu_limit: float
    sliding_window: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    hc_mult: int
    hc_sinkhorn_iters: int
    hc_eps: float
    rms_norm_eps: float
    rope_theta: float
    compress_rope_theta: float
    rope_scaling: dict = field(hash=False)
    max_position_embeddings: int
    compress_ratios: tuple[int, ...]
    num_nextn_predict_layers: int
    bos_token_id: int
    eos_token_id: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "compress_ratios", tuple(self.compress_ratios))
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", dict(self.rope_scaling))
        _validate(self)
        for name in _FLOAT_FIELDS:
            object.__setattr__(self, name, float(getattr(self, name)))

    def layer_kind(self, i: int) -> str:
        """"window" | "csa" | "hca" for layer ``i`` (``i == num_hidden_layers`` is the MTP layer)."""
        if not 0 <= i < len(self.compress_ratios):
            raise IndexError(f"layer {i} out of range 0..{len(self.compress_ratios) - 1}")
        return LAYER_KINDS[self.compress_ratios[i]]

    def is_hash_layer(self, i: int) -> bool:
        """Hash-routed MoE layers (expert ids looked up from ``tid2eid``) are the first ``num_hash_layers``."""
        return 0 <= i < self.num_hash_layers

    @property
    def nope_head_dim(self) -> int:
        return self.head_dim - self.qk_rope_head_dim

    @property
    def hc_dim(self) -> int:
        """Width of the flattened hyper-connection streams (hc_mult * hidden_size)."""
        return self.hc_mult * self.hidden_size

    @property
    def hc_mix_dim(self) -> int:
        """Rows of ``hc_{attn,ffn}_fn``: pre (hc) + post (hc) + combine (hc*hc)."""
        return (2 + self.hc_mult) * self.hc_mult

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["compress_ratios"] = list(self.compress_ratios)
        return d


_FIELDS = {f.name: f for f in dataclasses.fields(DSV4Config)}
_INT_FIELDS = {n for n, f in _FIELDS.items() if f.type == "int"}
_FLOAT_FIELDS = {n for n, f in _FIELDS.items() if f.type == "float"}


def _validate(c: DSV4Config) -> None:
    for name in _INT_FIELDS:
        v = getattr(c, name)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{name} must be an integer, got {v!r}")
    for name in _FLOAT_FIELDS:
        v = getattr(c, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"{name} must be a number, got {v!r}")
    if not isinstance(c.rope_scaling, dict):
        raise ConfigError(f"rope_scaling must be an object, got {c.rope_scaling!r}")
    positive = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                "q_lora_rank", "o_groups", "o_lora_rank", "n_routed_experts", "num_experts_per_tok",
                "moe_intermediate_size", "index_n_heads", "index_head_dim", "index_topk", "hc_mult",
                "sliding_window"]
    for name in positive:
        if getattr(c, name) <= 0:
            raise ConfigError(f"{name} must be positive, got {getattr(c, name)}")
    if not 0 < c.qk_rope_head_dim < c.head_dim or c.qk_rope_head_dim % 2:
        raise ConfigError(f"qk_rope_head_dim ({c.qk_rope_head_dim}) must be even and below head_dim ({c.head_dim})")
    if c.qk_rope_head_dim >= c.index_head_dim:
        raise ConfigError(f"qk_rope_head_dim ({c.qk_rope_head_dim}) must be below index_head_dim ({c.index_head_dim})")
    if c.num_attention_heads % c.o_groups:
        raise ConfigError(f"num_attention_heads ({c.num_attention_heads}) must be a multiple of o_groups ({c.o_groups})")
    if c.num_experts_per_tok > c.n_routed_experts:
        raise ConfigError(f"num_experts_per_tok ({c.num_experts_per_tok}) exceeds n_routed_experts ({c.n_routed_experts})")
    if not 0 <= c.num_hash_layers <= c.num_hidden_layers:
        raise ConfigError(f"num_hash_layers ({c.num_hash_layers}) must lie in 0..num_hidden_layers")
    want = c.num_hidden_layers + c.num_nextn_predict_layers
    if len(c.compress_ratios) != want:
        raise ConfigError(f"compress_ratios has {len(c.compress_ratios)} entries, expected {want} "
                          f"(num_hidden_layers + num_nextn_predict_layers, the last ones being MTP layers)")
    bad = [r for r in c.compress_ratios if r not in LAYER_KINDS]
    if bad:
        raise ConfigError(f"compress_ratios may only hold 0 (window), 4 (CSA) or 128 (HCA); got {bad[0]!r}")


def config_from_dict(d: dict[str, Any], source: str = "config") -> DSV4Config:
    """Build a config from ``config.json`` content; unknown keys are ignored, missing keys are an error."""
    if not isinstance(d, dict):
        raise ConfigError(f"{source}: expected a JSON object")
    d = dict(d)
    if "rope_scaling" not in d and "rope_parameters" in d:  # newer HF configs rename the key
        d["rope_scaling"] = d["rope_parameters"]
    missing = [n for n in _FIELDS if n not in d]
    if missing:
        raise ConfigError(f"{source}: missing key(s) {', '.join(missing)}")
    if not isinstance(d["compress_ratios"], (list, tuple)):
        raise ConfigError(f"{source}: compress_ratios must be a list, got {d['compress_ratios']!r}")
    try:
        return DSV4Config(**{n: d[n] for n in _FIELDS})
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def load_config(path: str | Path) -> DSV4Config:
    """Load ``config.json`` (or the ``config.json`` inside a checkpoint directory)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(f"{p}: no such config file")
    try:
        d = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{p}: not valid JSON ({e})") from None
    return config_from_dict(d, str(p))


def _pro_ratios(n: int) -> list[int]:
    """Pro: layers 0 and 1 HCA, then CSA on even and HCA on odd layers."""
    return [128 if i < 2 or i % 2 else 4 for i in range(n)]


def _flash_ratios(n: int) -> list[int]:
    """Flash: layers 0 and 1 window-only, then CSA on even and HCA on odd layers."""
    return [0 if i < 2 else (4 if i % 2 == 0 else 128) for i in range(n)]


_COMMON = dict(
    vocab_size=129280, num_key_value_heads=1, head_dim=512, qk_rope_head_dim=64,
    num_experts_per_tok=6, n_shared_experts=1, num_hash_layers=3, scoring_func="sqrtsoftplus",
    norm_topk_prob=True, swiglu_limit=10.0, sliding_window=128, index_n_heads=64, index_head_dim=128,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6, rope_theta=10000.0,
    compress_rope_theta=160000.0, rope_scaling=YARN_ROPE_SCALING, max_position_embeddings=1048576,
    num_nextn_predict_layers=1, bos_token_id=0, eos_token_id=1,
)
_PRO = dict(_COMMON, hidden_size=7168, num_hidden_layers=61, num_attention_heads=128, q_lora_rank=1536,
            o_groups=16, o_lora_rank=1024, n_routed_experts=384, moe_intermediate_size=3072,
            routed_scaling_factor=2.5, index_topk=1024)
_FLASH = dict(_COMMON, hidden_size=4096, num_hidden_layers=43, num_attention_heads=64, q_lora_rank=1024,
              o_groups=8, o_lora_rank=1024, n_routed_experts=256, moe_intermediate_size=2048,
              routed_scaling_factor=1.5, index_topk=512)
# tiny: layers 0..2 hash-routed (HCA, window, CSA), then CSA, HCA, window; MTP window-only.
_TINY = dict(_COMMON, vocab_size=512, hidden_size=64, num_hidden_layers=6, num_attention_heads=4, head_dim=80,
             qk_rope_head_dim=16, q_lora_rank=32, o_groups=2, o_lora_rank=32, n_routed_experts=8,
             num_experts_per_tok=2, moe_intermediate_size=32, routed_scaling_factor=1.5, index_n_heads=4,
             index_head_dim=32, index_topk=4, max_position_embeddings=8192,
             compress_ratios=[128, 0, 4, 4, 128, 0, 0])

PRESET_NAMES = ("tiny", "pro", "flash", "pro-<N>L")


def preset(name: str) -> DSV4Config:
    """A named configuration: ``tiny``, ``pro``, ``flash`` or ``pro-<N>L`` (Pro widths, first N Pro layers)."""
    if name == "tiny":
        return DSV4Config(**_TINY)
    if name == "pro":
        return DSV4Config(**_PRO, compress_ratios=_pro_ratios(61) + [0])
    if name == "flash":
        # The Flash MTP layer's ratio is not in the spec; window-only like Pro's is a guess.
        return DSV4Config(**_FLASH, compress_ratios=_flash_ratios(43) + [0])
    m = re.fullmatch(r"pro-(\d+)L", name)
    if m and 1 <= int(m.group(1)) <= 61:
        n = int(m.group(1))
        return DSV4Config(**dict(_PRO, num_hidden_layers=n, num_hash_layers=min(3, n)),
                          compress_ratios=_pro_ratios(n) + [0])
    raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESET_NAMES)} (N in 1..61)")
