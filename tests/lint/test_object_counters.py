"""Step counters kept on an object other than `self` (GR303): a decode state handed to the step."""

from __future__ import annotations

import textwrap

STEP = """
    from dataclasses import dataclass

    import torch
    from graphready import hot_path


    @dataclass
    class DecodeState:
        tokens: torch.Tensor
        position: torch.Tensor
        step: {step_type}


    @hot_path
    def step(model, state: DecodeState) -> torch.Tensor:
        {body}
        logits = model(state.tokens, state.position)
        state.step += 1
        return logits
    """


def _findings(lint_project, body: str, step_type: str = "int", annotated: bool = True) -> list[tuple[str, int]]:
    source = textwrap.dedent(STEP).replace("{body}", body).replace("{step_type}", step_type)
    if not annotated:
        source = source.replace("state: DecodeState", "state")
    return [(f.rule, f.line) for f in lint_project({"pkg/step.py": source}, select=["GR303"]).findings]


def test_a_counter_on_the_state_object_is_frozen_into_the_graph(lint_project):
    assert _findings(lint_project, "state.position.fill_(state.step)") == [("GR303", 17)]


def test_without_annotations_the_step_itself_says_it_is_a_counter(lint_project):
    assert _findings(lint_project, "state.position.fill_(state.step)", annotated=False) == [("GR303", 17)]


def test_a_counter_kept_in_a_device_tensor_is_updated_on_the_device(lint_project):
    """`step: torch.Tensor`: `state.step += 1` is a kernel the graph replays, and `copy_` reads it on the device."""
    assert _findings(lint_project, "state.position.copy_(state.step)", step_type="torch.Tensor") == []


def test_a_counter_used_only_for_host_decisions_is_not_frozen(lint_project):
    assert _findings(lint_project, "if state.step % 8 == 0:\n        print('step', state.step)") == []
