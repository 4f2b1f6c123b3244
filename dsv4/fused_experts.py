"""HF transformers' fused routed-expert tensors, split into and built from dsv4's stacked w1 / w3 / w2.

transformers keeps a layer's experts as two parameters: ``mlp.experts.gate_up_proj`` ``[E, 2I, D]`` (gate rows
first, then up) and ``mlp.experts.down_proj`` ``[E, D, I]``, no ``.weight`` suffix. Quantized, the packed or e4m3
tensor keeps that name and its scale is ``<name>_scale_inv``: FP8 block scales ``[E, ceil(rows/128),
ceil(cols/128)]``, MXFP4 E8M0 scales ``[E, rows, cols/32]`` over int8/uint8 packed e2m1 ``[E, rows, cols/2]``.

Splitting gate from up is a row slice of the weight and of an MXFP4 scale. An FP8 block scale row covers
128 weight rows, so gate and up separate cleanly when I is a multiple of 128 (every released width), or
share their one block row when 2I <= 128 (test widths). NVFP4 experts have no fused layout in transformers.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dsv4.formats import FP8_BLOCK, QuantizedWeight

SCALE_SUFFIXES = ("_scale_inv", "_scale")
FUSED_FORMATS = ("bf16", "fp8", "mxfp4")


class FusedLayoutError(ValueError):
    """Expert tensors that the fused layout cannot hold or that cannot be split into gate and up."""


def fp8_scale_rows(inter: int, half: int) -> tuple[int, int]:
    """Scale-grid rows [start, stop) of the gate (half 0) or up (half 1) part of a fused FP8 gate_up."""
    if inter % FP8_BLOCK == 0:
        blocks = inter // FP8_BLOCK
        return half * blocks, (half + 1) * blocks
    if 2 * inter <= FP8_BLOCK:
        return 0, 1
    raise FusedLayoutError(f"fused FP8 gate_up with intermediate size {inter}: gate and up share a 128-row scale "
                           "block that splits neither at a block edge nor within one block")


def fuse_gate_up(gate: QuantizedWeight, up: QuantizedWeight) -> dict[str, Tensor]:
    """Suffix ("" for the weight, or a scale suffix) -> fused tensor of stacked gate [E, I, D] and up [E, I, D]."""
    if gate.format != up.format or gate.format not in FUSED_FORMATS:
        raise FusedLayoutError(f"fused experts hold BF16, FP8 or MXFP4 weights, got {gate.format} and {up.format}")
    g, u = gate.parts(), up.parts()
    weight_key = "packed" if gate.format == "mxfp4" else "weight"
    out = {"": torch.cat([g[weight_key], u[weight_key]], dim=-2)}
    if gate.format == "bf16":
        return out
    inter = gate.shape[-2]
    if gate.format == "fp8" and inter % FP8_BLOCK:
        if fp8_scale_rows(inter, 0) != (0, 1) or not torch.equal(g["scale"], u["scale"]):
            raise FusedLayoutError("fused FP8 gate_up needs gate and up to share their 128-row block scales")
        out["_scale_inv"] = g["scale"]
    else:
        out["_scale_inv"] = torch.cat([g["scale"], u["scale"]], dim=-2)
    return out


def fused_parts(w: QuantizedWeight) -> dict[str, Tensor]:
    """Suffix -> tensor of a down_proj (a stacked [E, D, I] weight) in the fused layout."""
    if w.format not in FUSED_FORMATS:
        raise FusedLayoutError(f"fused experts hold BF16, FP8 or MXFP4 weights, got {w.format}")
    parts = w.parts()
    out = {"": parts["packed" if w.format == "mxfp4" else "weight"]}
    if "scale" in parts:
        out["_scale_inv"] = parts["scale"]
    return out
