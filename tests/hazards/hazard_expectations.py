"""What each hazard unit in units.py must produce, and where: read from the `# hazard:` markers."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

UNITS_FILE = Path(__file__).with_name("units.py")
# The GD202 kernel module units.py loads, by backend: an escaped launch made inside it is reported there.
KERNEL_FILES = {"cutedsl": UNITS_FILE.with_name("cute_kernels.py"), "triton": UNITS_FILE.with_name("triton_kernels.py")}
# Units whose escaped launch runs in the kernel module's `double_without_stream` (the Triton stand-in of a
# kernel compiled ahead launches there too), by backend.
LAUNCHED_IN_KERNEL_MODULE = {"cutedsl": ("StreamlessKernel",), "triton": ("StreamlessKernel", "CompiledStreamlessKernel")}
TARGET = "tests/hazards/units.py:hazard_units"
MARKER = re.compile(r"#\s*hazard:\s*(?P<codes>GD\d{3}(?:\s*,\s*GD\d{3})*)")

# hazard unit -> (class holding its markers, the codes it must raise)
HAZARDS = {
    "sync_item": ("PeakNormItem", ("GD101", "GD201")),
    "sync_bincount": ("ExpertCountsBincount", ("GD101", "GD201")),
    "sync_bool_mask": ("PositiveSumMask", ("GD101", "GD201")),
    "sync_pageable_copy": ("PageableBias", ("GD101", "GD201")),
    "frozen_step_counter": ("HostStepCounter", ("GD301",)),
    "replaced_buffer": ("ReplacedRunningMean", ("GD301",)),
    "escaped_kernel": ("StreamlessKernel", ("GD202",)),
    "escaped_compiled_kernel": ("CompiledStreamlessKernel", ("GD202",)),
    "degenerate_capture_path": ("CaptureFallbackScale", ("GD302",)),
    "unstable_dropout": ("TrainingDropout", ("GD303",)),
    "freed_prefetch": ("PrefetchedWeight", ("GD304",)),
    "growing_cache": ("GrowingCache", ("GD401",)),
    "capture_alloc": ("WideTemporary", ("GD402",)),
    "default_stream": ("DefaultStreamNorm", ("GD501",)),
    "rebound_attribute": ("ReboundBias", ("GD305",)),
    "undeclared_counter": ("UndeclaredCounter", ("GD306",)),
    "cached_table": ("CachedRotaryTable", ("GD307",)),
    "dropped_scratch": ("DroppedScratch", ("GD307",)),
    "stale_output": ("DriftMonitor", ("GD308",)),
    "keyed_batch[8]": ("BatchCompaction", ("GD101", "GD201")),
    "silent_sync_pageable": ("PageableNonBlockingBias", ("GD102",)),
    "silent_sync_strided": ("StridedPinnedColumn", ("GD102",)),
    "lazy_scratch": ("LazyScratch", ("GD203",)),
    "lazy_triton": ("ColdTritonScale", ("GD203",)),
    "lazy_pinned": ("LazyPinnedBias", ("GD203",)),
    "lazy_compile": ("ColdCompiledActivation", ("GD203",)),
    "compile_skipped_cudagraphs": ("RunningTotal", ("GD601",)),
    "compile_graph_break": ("BrokenScale", ("GD602",)),
}
if importlib.util.find_spec("cupy") is not None:  # units.py builds the CuPy pair only where CuPy imports
    HAZARDS["cupy_sync"] = ("CupyDeviceSync", ("GD101", "GD201"))
# A hazard's clean twin is `clean_<name>`, except a capture key whose twin is another key of its unit.
TWIN_OF = {"keyed_batch[8]": "keyed_batch[1]"}
# Clean units with no hazard twin: the GD306 counter with its state left out (discovered by the check),
# cuBLAS workspaces and Triton arguments the pointer audit must classify, and a step whose eager-only
# check launches kernels the graph does not hold (no GD202: nothing escaped).
ALSO_CLEAN = ("discovered_counter", "clean_cublas_triton", "eager_only_check")
CLEAN_TWINS = tuple(TWIN_OF.get(name, f"clean_{name}") for name in HAZARDS) + ALSO_CLEAN
# Units graphed by torch.compile itself: their "graph" kernels are the compiler's (fused, plus input copies).
COMPILER_GRAPHED = ("clean_compile_skipped_cudagraphs", "clean_compile_graph_break")


def marker_lines(path: Path = UNITS_FILE) -> dict[str, dict[str, int]]:
    """class or module-level function name -> {code: line of its `# hazard: CODE` marker}."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    markers: dict[str, dict[str, int]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            continue
        for lineno in range(node.lineno, node.end_lineno + 1):
            match = MARKER.search(lines[lineno - 1])
            if match:
                for code in match.group("codes").split(","):
                    markers.setdefault(node.name, {})[code.strip()] = lineno
    return markers


def expected_markers(backend: str) -> dict[str, dict[str, int]]:
    """marker_lines() with the GD202 of the units that launch through the `backend` kernel module moved there."""
    markers = marker_lines()
    launch = marker_lines(KERNEL_FILES[backend])["double_without_stream"]["GD202"]
    for cls in LAUNCHED_IN_KERNEL_MODULE[backend]:
        markers.setdefault(cls, {})["GD202"] = launch
    return markers


def cuda_available() -> bool:
    from graphready.harness.pytest_plugin import gpu_available

    return gpu_available()


def gpu_count() -> int:
    """Visible GPUs, counted through NVML so that this process never initialises CUDA."""
    if not cuda_available():
        return 0
    import os

    import torch

    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    return torch.cuda.device_count()
