"""Where dsv4's Triton kernels run: on CUDA tensors, and on CPU tensors under Triton's interpreter.

With ``TRITON_INTERPRET=1`` Triton runs kernels in numpy on CPU tensors, so a machine without a GPU can run
every fused path of the model (the kernel inventory in `benchmarks/dsv4_kernels.py`, the CPU variants of the
kernel tests). The interpreter is a check of a kernel's logic, not of its rounding (measured with Triton 3.6):
its fp32 -> bf16 cast truncates, its fp32 -> e4m3 cast does not carry a mantissa that rounds up into the next
binade (1.987 -> 1.0, not 2.0), and it has no libdevice. Interpreted results are compared with the torch forms
to a unit of the output's last place, never bit for bit; the GPU tests hold the bit-for-bit claims.
"""

from __future__ import annotations

import os

import torch

try:  # every kernel module imports these from here
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
except ImportError:  # CPU-only installs: the torch forms are used
    triton = tl = libdevice = None

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# fusions switched off by name (DSV4_FUSION_OFF=route,combine): their torch forms run, for A/B timing on one machine
FUSION_OFF = frozenset(filter(None, os.environ.get("DSV4_FUSION_OFF", "").split(",")))


def runs_triton(t: torch.Tensor, fusion: str = "") -> bool:
    """Whether the Triton kernels run on `t`'s device (and `fusion`, if named, is not switched off)."""
    return triton is not None and (t.is_cuda or (INTERPRET and t.device.type == "cpu")) and fusion not in FUSION_OFF
