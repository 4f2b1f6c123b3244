"""What third-party kernels do with their arguments, as their documentation states it.

The code of a kernel library is not in the linted tree, so what it does with an argument is a fact
stated here, like torch's names in torchnames.py. Plain data and string tests only.
"""

from __future__ import annotations

# FlashInfer's attention wrappers (`BatchDecodeWithPagedKVCacheWrapper`, `BatchPrefillWithPagedKVCacheWrapper`,
# ...) and its single-request functions document their scales as Python floats (`k_scale : Optional[float]`,
# "the calibration scale of key for fp8 input"): `run` multiplies `q_scale` and `k_scale` into `sm_scale` on the
# host and hands the kernel a float, and its cute-dsl decode backend folds `v_scale` in with `float(v_scale)`, so a
# tensor given there is read back to the host (a sync).
FLASHINFER_FLOAT_ARGUMENTS = frozenset({
    "q_scale", "k_scale", "v_scale", "sm_scale", "logits_soft_cap", "rope_scale", "rope_theta",
})
FLASHINFER_RUN_METHODS = frozenset({"run", "forward", "run_return_lse", "forward_return_lse"})
FLASHINFER_FUNCTIONS = frozenset({
    "single_decode_with_kv_cache", "single_prefill_with_kv_cache", "single_prefill_with_kv_cache_return_lse",
})

# `layer.k_scale = torch.nn.Parameter(...)`, `layer.register_parameter("k_scale", ...)`: what makes an attribute a
# parameter tensor, whichever object it is set on
PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
PARAMETER_REGISTRATIONS = frozenset({"register_parameter", "register_buffer"})


def flashinfer_wrapper(dotted: str | None) -> bool:
    """A FlashInfer attention wrapper class: `flashinfer.BatchDecodeWithPagedKVCacheWrapper`,
    `flashinfer.decode.CUDAGraphBatchDecodeWithPagedKVCacheWrapper`."""
    return bool(dotted) and dotted.startswith("flashinfer.") and dotted.rsplit(".", 1)[-1].endswith("Wrapper")


def flashinfer_function(dotted: str | None) -> bool:
    """A FlashInfer single-request attention function (`flashinfer.single_decode_with_kv_cache`)."""
    return bool(dotted) and dotted.startswith("flashinfer.") and dotted.rsplit(".", 1)[-1] in FLASHINFER_FUNCTIONS
