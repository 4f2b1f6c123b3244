"""Where dsv4's Triton kernels run: on CUDA tensors, and on CPU tensors under Triton's interpreter.

With ``TRITON_INTERPRET=1`` Triton runs kernels in numpy on CPU tensors, so a machine without a GPU can run
every fused path of the model (the kernel inventory in `benchmarks/dsv4_kernels.py`, the CPU variants of the
kernel tests). The interpreter is a check of a kernel's logic, not of its rounding: its fp32 -> e4m3 cast does
not carry a mantissa that rounds up into the next binade (measured with Triton 3.6: 1.987 -> 1.0, not 2.0),
so interpreted results are compared with other interpreted kernels, never with the torch forms bit for bit.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
except ImportError:  # CPU-only installs: the torch forms are used
    triton = None

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def runs_triton(t: torch.Tensor) -> bool:
    """Whether the Triton kernels run on `t`'s device."""
    return triton is not None and (t.is_cuda or (INTERPRET and t.device.type == "cpu"))
