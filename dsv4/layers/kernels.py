"""Where dsv4's Triton kernels run: on CUDA tensors, and on CPU tensors under Triton's interpreter.

With ``TRITON_INTERPRET=1`` Triton runs kernels in numpy on CPU tensors, so a machine without a GPU can run
every fused path of the model (the kernel inventory in `benchmarks/dsv4_kernels.py`, the CPU variants of the
kernel tests). The interpreter is a check of a kernel's logic, not of its rounding (measured with Triton 3.6):
its fp32 -> bf16 cast truncates, its fp32 -> e4m3 cast does not carry a mantissa that rounds up into the next
binade (1.987 -> 1.0, not 2.0), and it has no libdevice. Interpreted results are compared with the torch forms
to a unit of the output's last place, never bit for bit; the GPU tests hold the bit-for-bit claims.
"""

from __future__ import annotations

import functools
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


# Programmatic dependent launch (Hopper and later): each kernel lets the next one on its stream launch at once and
# the next waits, first thing, for it to finish and its writes to show (griddepcontrol), so nothing a kernel reads or
# writes moves; what overlaps is the launch and block scheduling that otherwise sit between dependent kernels
# (measured, 2x H200: Flash 14.28 -> 13.52 ms/token, pro-4L 2.899 -> 2.840). DSV4_PDL=0 switches it off (A/B timing).
PDL_OFF = os.environ.get("DSV4_PDL") == "0"


@functools.cache
def pdl_options() -> dict[str, bool]:
    """The launch options of every dsv4 kernel: PDL where the GPU has it (compute capability 9.0 or later)."""
    on = (triton is not None and not INTERPRET and not PDL_OFF and torch.cuda.is_available()
          and torch.cuda.get_device_capability() >= (9, 0))
    return {"PDL": on, "launch_pdl": on}


wait_for_previous_kernel = None  # without Triton: nothing calls it
if triton is not None:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    @triton.jit
    def wait_for_previous_kernel(PDL: tl.constexpr):
        """A dsv4 kernel's first statement: with PDL, wait for the kernel before it and let the next one launch."""
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
