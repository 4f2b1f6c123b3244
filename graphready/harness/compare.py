"""Tensor comparisons behind the replay checks; pure torch, so they are tested on the CPU."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from graphready.harness.blame import UnitContractError
from graphready.harness.tracer import tensors_in


def as_outputs(value: Any) -> tuple[torch.Tensor, ...]:
    """A step's result as a tuple of tensors (a step returns a tensor or a tuple of tensors)."""
    if isinstance(value, torch.Tensor):
        return (value,)
    tensors = tuple(tensors_in(value))
    if not tensors:
        raise UnitContractError(f"the unit's fn returned {type(value).__name__}; expected a tensor or a tuple of tensors")
    return tensors


def clone_all(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(t.detach().clone() for t in tensors)


def first_difference(
    expected: Sequence[torch.Tensor], actual: Sequence[torch.Tensor], atol: float, rtol: float, what: str = "output"
) -> str | None:
    """None when every pair matches within atol/rtol (NaN equals NaN), else what differs first."""
    if len(expected) != len(actual):
        return f"{len(actual)} {what}s instead of {len(expected)}"
    for i, (e, a) in enumerate(zip(expected, actual)):
        if e.shape != a.shape or e.dtype != a.dtype:
            return f"{what} {i} is {tuple(a.shape)} {a.dtype}, expected {tuple(e.shape)} {e.dtype}"
        if e.dtype == torch.bool or not (e.is_floating_point() or e.is_complex()):
            equal = torch.equal(e, a)
        else:
            equal = torch.allclose(a, e, atol=atol, rtol=rtol, equal_nan=True)
        if not equal:
            return f"{what} {i} differs: {_difference_summary(e, a)}"
    return None


def _difference_summary(expected: torch.Tensor, actual: torch.Tensor) -> str:
    e = expected.detach().to("cpu", torch.float64)
    a = actual.detach().to("cpu", torch.float64)
    both_nan = torch.isnan(e) & torch.isnan(a)
    diff = (a - e).abs().masked_fill(both_nan, 0.0).nan_to_num(nan=float("inf"))
    mismatched = int((diff > 0).sum())
    return f"max abs diff {float(diff.max()):.4g} over {mismatched}/{e.numel()} elements"


def degenerate(eager: Sequence[torch.Tensor], replay: Sequence[torch.Tensor]) -> str | None:
    """Why the replay output is all zeros, NaN or Inf where eager's is not; None if it is not."""
    for i, (e, r) in enumerate(zip(eager, replay)):
        if r.numel() == 0:
            continue
        if not (r.is_floating_point() or r.is_complex()):
            if not bool(r.any()) and bool(e.any()):
                return f"output {i} is all zeros in replay but not in eager"
            continue
        if not bool(r.any()) and bool(e.any()):
            return f"output {i} is all zeros in replay but not in eager"
        r_bad = ~torch.isfinite(r)
        if bool(r_bad.any()) and bool(torch.isfinite(e).all()):
            kind = "NaN" if bool(torch.isnan(r).any()) else "Inf"
            return f"output {i} has {int(r_bad.sum())} {kind} values in replay; eager has none"
    return None
