"""GR306 on lazy conversions: a registered buffer re-bound by `.to()` in the step is a warning (torch.compile
writes it back as new storage: vLLM's Phi-3 LongRoPE, PR #11596), a plain attribute a note, load time nothing;
annotated assignments read like plain ones."""

from __future__ import annotations

import textwrap

import pytest

HOT = {"hot-paths": ["pkg.rope:Rope.forward"]}


def _rope(init: str, step: str) -> str:
    return textwrap.dedent(f"""
        import torch


        class Rope(torch.nn.Module):
            def __init__(self, cache: torch.Tensor):
                super().__init__()
                {init}

            def forward(self, idx: torch.Tensor) -> torch.Tensor:
                {step}
                return torch.index_select(self.cache, 0, idx)
        """)


BUFFER = 'self.register_buffer("cache", cache, persistent=False)'
ATTRIBUTE = "self.cache = cache"


@pytest.mark.parametrize(("init", "step", "expected"), [
    (BUFFER, "self.cache: torch.Tensor = self.cache.to(idx.device)", [("GR306", "WARNING")]),
    (BUFFER, "self.cache = self.cache.to(idx.device)", [("GR306", "WARNING")]),
    (ATTRIBUTE, "self.cache: torch.Tensor = self.cache.to(idx.device)", [("GR306", "INFO")]),
    (BUFFER, "idx = idx.long()", []),  # the engines' fix: the buffer moves with the module, at load time
])
def test_lazy_conversion_severity(lint_project, init, step, expected):
    result = lint_project({"pkg/rope.py": _rope(init, step)}, HOT, select=["GR306"])
    assert [(f.rule, f.severity.name) for f in result.findings] == expected
