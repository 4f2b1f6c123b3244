"""dsv4.model against the plain reference decoder on synthetic `tiny` weights: the same logits, bit for bit.

Tolerance: zero. Both follow the official numerics and round at the same points (bf16 GEMM outputs, e4m3
GEMM inputs and KV entries, FP4 indexer entries, bf16 indexer scores and P), and where two summation
orders would both be legitimate they use the same torch primitive (a GEMM for the mHC mix and the q.k
scores, oldest-first keys for P.V, fp64 for the softmax denominator). Any slack would be meaningless: an
e4m3 step is 2^-3 relative where a bf16 ulp is 2^-8, so a single-ulp difference in a GEMM input flips
activations and, through the FP8 KV entries, moves every later step by percents (measured while aligning
the two: a ulp in one fp32 compressor sum became a 2-5% logit difference within 30 steps). Equal
logits at every step therefore also pin the greedy tokens, the indexer's picks and the expert choices.
The graph-ready step is checked against the eager step elsewhere (test_model.py, test_graphs_gpu.py).
"""

from __future__ import annotations

import pytest
import torch

from dsv4.config import preset
from dsv4.model import DSV4Model
from dsv4.reference import ReferenceDecoder
from dsv4.synth import synthetic_weights
from dsv4_decode_helpers import eager_run, one_thread, three_layer_tiny  # noqa: F401


def assert_same_decode(config, fmt: str, steps: int) -> None:
    weights = synthetic_weights(config, fmt, seed=1)
    model = DSV4Model(config, weights, max_len=512)
    fed, logits = eager_run(model, steps)
    reference = ReferenceDecoder(config, weights)
    for pos, token in enumerate(fed):
        expected = reference.step(token, pos)
        assert int(logits[pos].argmax()) == int(expected.argmax()), f"greedy token differs at step {pos}"
        assert torch.equal(logits[pos], expected), \
            f"step {pos}: logits differ by {(logits[pos] - expected).abs().max():.3g} (max |logit| {expected.abs().max():.3g})"


@pytest.mark.parametrize("fmt", ["nvfp4", "official", "bf16"])
def test_model_matches_reference_across_an_hca_boundary(fmt):
    """140 steps: 35 CSA entries (indexer top-k active from step 19), one HCA entry at step 127."""
    assert_same_decode(three_layer_tiny(), fmt, 140)


@pytest.mark.slow
def test_model_matches_reference_over_320_steps_of_full_tiny():
    """Two HCA boundaries, 80 CSA boundaries, the window ring wrapped twice."""
    assert_same_decode(preset("tiny"), "nvfp4", 320)
