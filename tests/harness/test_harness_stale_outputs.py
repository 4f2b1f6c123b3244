"""GD308 on the CPU: the harness's graphed step over a stand-in replay that rewrites one static
output in place on every call, the way a replay rewrites graph-pool memory; the tracer must name
the line of the loop that reads a kept output after the next step, and stay quiet on a copy."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch

from graphready.harness.checks.replay.stale_outputs import StaleReadTracer, graphed_step, stale_message

ROOT = Path(__file__).resolve().parents[2]


def _replaying_step(tracer: StaleReadTracer, rewritten: bool = True):
    """The harness's graphed step over a stand-in replay that writes input * 2 into one static output."""
    static_in, static_out = torch.zeros(4), torch.zeros(4)
    return graphed_step(lambda: static_out.copy_(static_in * 2), [static_in], [static_out], [rewritten], tracer)


def _line_of(function, marker: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def kept_loop(step):
    previous = step(torch.ones(4))
    current = step(torch.full((4,), 3.0))
    return current - previous  # reads the kept output


def copied_loop(step):
    previous = step(torch.ones(4)).clone()
    current = step(torch.full((4,), 3.0))
    return current - previous


def sliced_loop(step):
    head = step(torch.ones(4))[:2]
    step(torch.full((4,), 3.0))
    return head * 1.0  # reads a view of the kept output


def fed_back_loop(step):
    first = step(torch.ones(4))
    step(torch.full((4,), 3.0))
    return step(first)  # feeds the kept output back in


def _run(loop, rewritten: bool = True):
    tracer = StaleReadTracer(ROOT)
    with tracer:
        result = loop(_replaying_step(tracer, rewritten))
    return tracer, result


def test_a_kept_output_read_after_the_next_step_is_found_at_its_line():
    tracer, result = _run(kept_loop)
    assert torch.equal(result, torch.zeros(4))  # what a graph gives; eager would give 4s
    [read] = tracer.reads
    assert (read.location.path, read.location.line) == ("tests/harness/test_harness_stale_outputs.py",
                                                        _line_of(kept_loop, "reads the kept output"))
    assert (read.returned_at, read.read_after) == (1, 2)


def test_a_copied_output_is_not_stale():
    tracer, result = _run(copied_loop)
    assert tracer.reads == [] and torch.equal(result, torch.full((4,), 4.0))


def test_views_of_a_kept_output_are_as_old_as_the_output():
    tracer, _ = _run(sliced_loop)
    assert [read.location.line for read in tracer.reads] == [_line_of(sliced_loop, "reads a view")]


def test_a_kept_output_fed_back_into_the_step_is_found():
    tracer, _ = _run(fed_back_loop)
    assert [(read.location.line, read.op) for read in tracer.reads] == [(_line_of(fed_back_loop, "feeds"), "step input")]


def test_outputs_the_step_updates_in_place_eager_too_are_not_tagged():
    tracer, _ = _run(kept_loop, rewritten=False)
    assert tracer.reads == []


def test_an_unchanged_kept_output_is_not_a_stale_read():
    def same_inputs(step):
        previous = step(torch.ones(4))
        current = step(torch.ones(4))
        return current - previous

    tracer, _ = _run(same_inputs)
    assert tracer.reads == []


def test_message_names_both_replays_and_the_fix():
    tracer, _ = _run(kept_loop)
    text = stale_message(tracer.reads[0], "output 0 differs: max abs diff 4")
    assert "kept from replay 1 after replay 2" in text and "output 0 differs" in text and ".clone()" in text
