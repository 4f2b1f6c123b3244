"""GD301 replay-mismatch, GD302 replay-degenerate, GD303 replay-unstable.

Replay runs with fresh inputs copied into the static buffers and the state restored, and is
compared with an eager step on the same inputs and state. A mismatch is explained by the first
op whose Python scalars or outside buffers changed since capture, or by a state tensor the step
replaced instead of writing in place.
"""

from __future__ import annotations

from graphready.harness.frames import Location
from graphready.harness.tracer import OpTracer, first_divergence


def explain_mismatch(
    capture_trace: OpTracer,
    eager_trace: OpTracer | None,
    replaced_state: list[tuple[int, int]],
) -> tuple[Location | None, str]:
    """Where a replay mismatch comes from and why; (None, "") when the traces cannot tell."""
    for index, address in replaced_state:
        location = capture_trace.producer_location(address)
        if location is not None:
            return location, (
                f"state tensor {index} was replaced by a new tensor here instead of written in place; "
                "the graph keeps reading and writing the old buffer"
            )
    if eager_trace is not None:
        divergence = first_divergence(capture_trace.records, eager_trace.records)
        if divergence is not None:
            record, why = divergence
            return record.location, why
    return None, ""


def mismatch_message(difference: str, why: str) -> str:
    text = f"replay differs from eager on the same inputs and state: {difference}"
    return f"{text}; {why}" if why else text

