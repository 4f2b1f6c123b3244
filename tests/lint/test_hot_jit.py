"""GR501's severities: what recompiles every step is an error; what compiles on its first call is a note."""

from __future__ import annotations

import pytest

STEP = """import torch
from graphready import hot_path
from torch._dynamo.backends.common import aot_autograd
from engine import get_compiler_backend


def topk_impl(x: torch.Tensor, k: int):
    return torch.topk(torch.sigmoid(x), k, dim=-1)


@hot_path
def route(x: torch.Tensor):
    fn = torch.compile(topk_impl, dynamic=True{backend})
    return fn(x, 8)
"""


@pytest.mark.parametrize(("backend", "severity"), [
    ("", "INFO"),  # SGLang's biased_grouped_topk fallback: Dynamo reuses the first call's code
    (', backend="inductor"', "INFO"),
    (", backend=get_compiler_backend()", "INFO"),
    (", backend=aot_autograd(fw_compiler=None)", "ERROR"),  # a new backend object every call: recompiles
    (", backend=lambda gm, inputs: gm", "ERROR"),
])
def test_torch_compile_in_the_step(lint_project, backend, severity):
    result = lint_project({"pkg/route.py": STEP.format(backend=backend)})
    assert [(f.rule, f.severity.name) for f in result.findings] == [("GR501", severity)]
