"""GD601/GD602: the compiler's own skip reasons and graph breaks, read from its logs at the user line."""

from __future__ import annotations

import importlib.util

import torch

from graphready.harness.checks.compiled import (
    CompileWatch,
    cudagraph_skip_finding,
    eager_callable,
    graph_break_finding,
    uses_compiler_graphs,
)
from graphready.harness.frames import Location

STEP = '''import torch


@torch.compiler.disable
def hidden(y):
    return y


def step(x):
    y = x * 2
    y = hidden(y)
    return y + 1
'''


def _module(tmp_path):
    path = tmp_path / "steps.py"
    path.write_text(STEP)
    spec = importlib.util.spec_from_file_location("graphready_test_steps", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_real_graph_break_is_found_at_its_line(tmp_path):
    steps = _module(tmp_path)
    compiled = torch.compile(steps.step, backend="eager")
    watch = CompileWatch(tmp_path, Location("steps.py", 9))
    with watch:
        out = compiled(torch.ones(3))
    assert out.tolist() == [3.0, 3.0, 3.0]
    [finding] = watch.findings()
    assert finding.rule == "GD602" and finding.location == Location("steps.py", 11)
    assert "torch.compiler.disable" in finding.message
    assert not watch.skipped


def test_graph_break_messages_in_both_forms(tmp_path):
    full = (f"Graph break in user code at {tmp_path}/m.py:7\nGraph Break Reason: Data-dependent branching\n"
            "User code traceback:\n")
    finding = graph_break_finding(full, tmp_path)
    assert finding.location == Location("m.py", 7) and "Data-dependent branching" in finding.message
    duplicate = (f"Graph break (user stack suppressed due to duplicate graph break) in user code at {tmp_path}/m.py:9\n"
                 "Graph Break Reason: Unsupported: call_method")
    assert graph_break_finding(duplicate, tmp_path).location == Location("m.py", 9)
    assert graph_break_finding("Restarting analysis due to ...", tmp_path) is None


def test_cudagraph_skip_reason_is_located_at_the_innermost_user_frame(tmp_path):
    text = ("skipping cudagraphs due to mutated inputs (1 instances). Found from : \n"
            f'   File "{tmp_path}/units.py", line 30, in __call__\n    return self.step(x)\n'
            f'   File "{tmp_path}/units.py", line 12, in step\n    self.total.add_(x)\n')
    finding = cudagraph_skip_finding(text, tmp_path)
    assert finding.rule == "GD601" and finding.location == Location("units.py", 12)
    assert "mutated inputs (1 instances)" in finding.message
    bare = cudagraph_skip_finding("skipping cudagraphs due to incompatible op aten._local_scalar_dense.default", tmp_path)
    assert bare.location is None and "incompatible op aten._local_scalar_dense.default" in bare.message
    assert cudagraph_skip_finding("compiled 3 graphs", tmp_path) is None


def test_reduce_overhead_units_are_recognised_and_their_python_original_found():
    def step(x):
        return x * 2

    module = torch.nn.GELU()
    assert uses_compiler_graphs(torch.compile(step, mode="reduce-overhead"))
    assert not uses_compiler_graphs(torch.compile(step)) and not uses_compiler_graphs(step)
    assert eager_callable(torch.compile(step, mode="reduce-overhead")) is step
    assert eager_callable(torch.compile(module, mode="reduce-overhead")) is module
    assert eager_callable(step) is step



def test_a_repeated_break_with_its_stack_suppressed_takes_the_line_of_the_first(tmp_path):
    """The compiler's "user code" is whatever it traced, torch's own modules included (CTRL's
    `self.pos_encoding = ...to(...)` breaks in `Module.register_buffer`): the model's line, repeated breaks too."""
    torch_file = torch.nn.modules.module.__file__
    first = (f"Graph break in user code at {torch_file}:587\nGraph Break Reason: Unsupported python_type() call\n"
             f'User code traceback:\n  File "{tmp_path}/model.py", line 317, in forward\n'
             f'  File "{torch_file}", line 587, in register_buffer\n')
    again = (f"Graph break (user stack suppressed due to duplicate graph break) in user code at {torch_file}:587\n"
             "Graph Break Reason: Failed to handle graph break gracefully.")
    sites: dict = {}
    assert graph_break_finding(first, tmp_path, sites).location == Location("model.py", 317)
    assert graph_break_finding(again, tmp_path, sites).location == Location("model.py", 317)
    assert graph_break_finding(again, tmp_path, {}).location is None  # no user line known: the unit's callable
