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
    # LMDeploy's FP8 scales: moved only if the device differs, which loading (`model.to(device)`) already made true
    (BUFFER, "if self.cache.device != idx.device:\n                    self.cache = self.cache.to(idx.device)", []),
    (BUFFER, "if idx.device != self.cache.device:\n                    self.cache = self.cache.to(idx.device)", []),
    # a plain attribute does not move with the module: its first call moves it, as without the test
    (ATTRIBUTE, "if self.cache.device != idx.device:\n                    self.cache = self.cache.to(idx.device)",
     [("GR306", "INFO")]),
])
def test_lazy_conversion_severity(lint_project, init, step, expected):
    result = lint_project({"pkg/rope.py": _rope(init, step)}, HOT, select=["GR306"])
    assert [(f.rule, f.severity.name) for f in result.findings] == expected


@pytest.mark.parametrize(("not_compiled", "severity"), [([], "WARNING"), (["*:*.forward_cuda"], "INFO")])
def test_buffer_conversion_where_torch_compile_never_traces_is_a_note(lint_project, not_compiled, severity):
    """vLLM's and SGLang's custom ops run `forward_native` under torch.compile: the re-bind in `forward_cuda`
    never becomes a compiled buffer write-back (the profiles say so with `not-compiled`)."""
    source = _rope(BUFFER, "self.cache = self.cache.to(idx.device)").replace("def forward(", "def forward_cuda(")
    table = {"hot-paths": ["pkg.rope:Rope.forward_cuda"], "not-compiled": not_compiled}
    result = lint_project({"pkg/rope.py": source}, table, select=["GR306"])
    assert [(f.rule, f.severity.name) for f in result.findings] == [("GR306", severity)]


def test_device_checked_buffer_move_whose_first_call_is_a_capture_is_reported(lint_project):
    """The module was never moved if the step's first call is the capture: the move runs inside it."""
    step = "if self.cache.device != idx.device:\n                    self.cache = self.cache.to(idx.device)"
    source = _rope(BUFFER, step) + textwrap.dedent("""

        def capture(rope: Rope, idx: torch.Tensor) -> torch.cuda.CUDAGraph:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
                rope.forward(idx)
            return graph
        """)
    result = lint_project({"pkg/rope.py": source}, {}, select=["GR306"])  # hot through the capture only
    assert [(f.rule, f.severity.name) for f in result.findings] == [("GR306", "WARNING")]


DEVICE_TEST = "if self.cache.device != idx.device:"
MOVES_UNDER_DEVICE_TEST = {  # issue 26: a compound statement under the device test crashed the rule
    "if": "\n                    if idx.dim() == 1:\n                        self.cache = self.cache.to(idx.device)",
    "if-else": ("\n                    if idx.dim() == 1:\n                        pass\n                    else:\n"
                "                        self.cache = self.cache.to(idx.device)"),
    "for": "\n                    for _ in range(1):\n                        self.cache = self.cache.to(idx.device)",
    "with": ("\n                    with torch.no_grad():\n"
             "                        self.cache = self.cache.to(idx.device)"),
    "try": ("\n                    try:\n                        self.cache = self.cache.to(idx.device)\n"
            "                    finally:\n                        pass"),
    "same-line": " self.cache = self.cache.to(idx.device)",
}


@pytest.mark.parametrize("block", MOVES_UNDER_DEVICE_TEST.values(), ids=MOVES_UNDER_DEVICE_TEST.keys())
@pytest.mark.parametrize(("init", "expected"), [(BUFFER, []), (ATTRIBUTE, [("GR306", "INFO")])],
                         ids=["buffer", "attribute"])
def test_move_nested_under_a_device_test_reads_like_a_direct_one(lint_project, block, init, expected):
    """However deep the re-bind sits under `if self.cache.device != idx.device:`, it runs only when the test
    holds: a registered buffer stays quiet and a plain attribute is a note, as for a re-bind directly below it."""
    result = lint_project({"pkg/rope.py": _rope(init, DEVICE_TEST + block)}, HOT, select=["GR306"])
    assert [(f.rule, f.severity.name) for f in result.findings] == expected


def test_move_in_the_else_of_a_device_test_is_not_under_it(lint_project):
    """`else:` runs when the devices already match: a buffer re-bound there is the plain warning."""
    step = ("if self.cache.device != idx.device:\n                    pass\n                else:\n"
            "                    if idx.dim() == 1:\n                        self.cache = self.cache.to(idx.device)")
    result = lint_project({"pkg/rope.py": _rope(BUFFER, step)}, HOT, select=["GR306"])
    assert [(f.rule, f.severity.name) for f in result.findings] == [("GR306", "WARNING")]


ISSUE_26 = '''\
import torch


class M(torch.nn.Module):
    def forward(self, x):  # graphready: hot
        if self.w.device != x.device:
            if x.dim() == 2:
                self.w = self.w.to(x.device)
        return x + self.w
'''


def test_issue_26_snippet_lints(tmp_path, monkeypatch, capsys):
    """The issue's file: nothing says `self.w` is a tensor (no constructor), so GR306 has nothing to report
    and the run is clean, not an internal error."""
    from graphready.cli import main

    (tmp_path / "m.py").write_text(ISSUE_26)
    monkeypatch.chdir(tmp_path)
    assert main(["lint", "--no-cache", "m.py"]) == 0
    out = capsys.readouterr().out
    assert "internal error" not in out and out.startswith("graphready lint: all clear")
