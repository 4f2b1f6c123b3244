"""The padding fixtures (tests/fixtures/padding) and what GD309 must say about each: shared by the CPU and GPU tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "padding"
TARGET = "tests/fixtures/padding/targets.py:units"
MARKER = "# padded: GD309"

# case -> (the shipped bug it reproduces, severity of its GD309, capture keys the bug shows at)
CASES = {
    "eagle_positions": ("SGLang S5", "warning", (4, 8)),
    "eagle_topk": ("SGLang S11", "warning", (4, 8)),
    "swa_cache_loc": ("SGLang S8", "error", (4, 8)),
    "mamba_track": ("SGLang S9", "error", (4,)),
    "gdn_conv_indices": ("vLLM V5", "error", (4, 8)),
    "jamba_state": ("vLLM V9", "error", (4, 8)),
}
KEYS = (4, 8)


def marked_line(case: str) -> int:
    """The line of `<case>_bug.py` the finding must point at."""
    lines = (FIXTURES / f"{case}_bug.py").read_text(encoding="utf-8").splitlines()
    return next(number for number, text in enumerate(lines, 1) if MARKER in text)


def load(name: str, device: str):
    """A fresh copy of one fixture module whose tensors go to `device`."""
    spec = importlib.util.spec_from_file_location(f"padding_case_{name}_{device}", FIXTURES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.DEVICE = device
    return module
