"""What torch (and friends) names mean, shared by the ast index and the libcst rules.

Plain data and string tests only: importing this never imports libcst or torch.
"""

from __future__ import annotations

import re

# Kinds of values, as the rules' type inference (lint/inference/tensors.py) and the index use them.
TENSOR, BOOL, SCALAR, HOST = "tensor", "bool", "scalar", "host"
TENSORS = "tensors"  # a list/tuple/dict of tensors: indexing or iterating it gives a TENSOR
# `seq_lens_cpu`, `cpu_positions`, `ids_np`, `lens_list`: the engines' names for host mirrors
HOST_NAME = re.compile(r"(?:^|_)(?:cpu|np|numpy|host|list|lst)$|^(?:cpu|np|host)_|_cpu_")

NON_TENSOR_TORCH = {
    "is_tensor", "is_storage", "device", "dtype", "Size", "get_default_dtype", "set_default_dtype",
    "manual_seed", "numel", "is_grad_enabled", "no_grad", "enable_grad", "inference_mode",
    "set_grad_enabled", "compile", "finfo", "iinfo", "typename", "is_floating_point", "is_complex",
    "result_type", "promote_types", "can_cast", "get_num_threads", "set_num_threads", "Generator",
    "Stream", "Event", "broadcast_shapes", "equal", "allclose", "use_deterministic_algorithms",
    "set_printoptions", "get_device", "is_nonzero", "cond",
}
NON_TENSOR_TORCH_PREFIXES = (
    "torch.cuda.", "torch.backends.", "torch.distributed.", "torch.jit.", "torch.compiler.",
    "torch._dynamo.", "torch.library.", "torch.utils.", "torch.autograd.", "torch.testing.",
    "torch.fx.", "torch.profiler.", "torch.nn.Module", "torch.multiprocessing.", "torch.export.",
    "torch.accelerator.", "torch.xpu.", "torch.mps.", "torch.npu.", "torch.version.",
)
FACTORIES = {
    "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "rand", "randn", "randint",
    "randperm", "tensor", "as_tensor", "empty_strided", "eye", "from_numpy", "asarray",
}
GRAPH_CONTEXT = "torch.cuda.graph"  # `with torch.cuda.graph(g):` opens a capture body
LOCK_TYPES = {
    "threading.Lock", "threading.RLock", "threading.Condition", "threading.Semaphore",
    "threading.BoundedSemaphore", "multiprocessing.Lock", "multiprocessing.RLock",
}


def non_tensor_torch(name: str) -> bool:
    """A `torch.*` callable that returns no tensor: namespaces like `torch.cuda.`, `torch.dtype`, and
    the flags and settings `torch.is_*` / `get_*` / `set_*` (`torch.is_autocast_enabled()`)."""
    short = name.rsplit(".", 1)[-1]
    return name.startswith(NON_TENSOR_TORCH_PREFIXES) or short in NON_TENSOR_TORCH \
        or short.startswith(("is_", "get_", "set_"))


def is_tensor_callee(name: str) -> bool:
    """A module-level `X = torch.something(...)` makes X a tensor global."""
    short = name.rsplit(".", 1)[-1]
    return (
        name.startswith("torch.")
        and not non_tensor_torch(name)
        and not (name.startswith("torch.nn.") and not name.startswith("torch.nn.functional."))
        and short[:1].islower()
    )


def annotation_kind(text: str) -> str | None:
    """The kind an annotation promises: `torch.Tensor`, `Optional[Tensor]`, `list[int]`, `np.ndarray`.

    A union with anything but None (`torch.dtype | torch.Tensor`) promises nothing, and so do
    classes that merely contain the word (`IntermediateTensors`)."""
    text = re.sub(r"\s*\|\s*None\b|\bNone\s*\|\s*", "", text.strip())
    if text.startswith(("Optional[", "typing.Optional[")) and text.endswith("]"):
        text = text[text.index("[") + 1:-1]
    if "|" in text or "Union[" in text:
        return None
    lowered = text.lower()
    containers = ("list", "tuple", "dict", "sequence", "mapping", "iterable")
    if re.search(r"\bTensor\b", text):
        return TENSORS if any(c in lowered for c in containers) else TENSOR
    if text in ("int", "float", "bool", "str"):
        return SCALAR
    if "ndarray" in text or lowered.startswith(containers):
        return HOST
    return None
