"""The CSA indexer's score kernel (`dsv4/layers/indexer_scores.py`) against the torch form it replaces.

On a GPU: masked entries -inf, every score within one bf16 unit (of the score and of its terms' magnitude) of the
torch form's (the kernel rounds where the torch form rounds; only the order of the fp32 additions differs), zeros +0. On the CPU under Triton's
interpreter (TRITON_INTERPRET=1 with Triton importable; skipped otherwise): the same logic, to a few units, since the
interpreter's fp32 -> bf16 casts truncate at each of the three roundings (`dsv4.layers.kernels`).
"""

from __future__ import annotations

import pytest
import torch

from dsv4.layers.indexer_scores import fused_index_scores, triton
from dsv4.layers.kernels import INTERPRET

CUDA = torch.cuda.is_available() and triton is not None
DEVICES = [pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")]),
           pytest.param("cpu", marks=pytest.mark.skipif(triton is None or not INTERPRET,
                                                        reason="needs Triton with TRITON_INTERPRET=1"))]
SHAPES = [(64, 128, 1024), (4, 32, 40)]  # Pro/Flash's heads, dim and 4096 tokens' entries; a narrowed config's


def scores_torch(q, w, keys, masked):
    """`Indexer.scores`, then the mask, in torch ops."""
    dots = torch.einsum("bhd,bnd->bhn", q, keys)
    return (torch.relu(dots) * w.unsqueeze(-1)).sum(1).masked_fill(masked, float("-inf"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads,dim,n", SHAPES)
def test_fused_index_scores_match_the_torch_form(device, heads, dim, n):
    g = torch.Generator().manual_seed(heads + n)
    batch = 2
    q = torch.randn(batch, heads, dim, generator=g).to(torch.bfloat16)
    w = (torch.randn(batch, heads, generator=g) * 0.1).to(torch.bfloat16)
    # the indexer's cache: entries then the compressor's scratch row (a strided batch), the last entries unwritten
    store = torch.randn(batch, n + 1, dim, generator=g).to(torch.bfloat16)
    store[:, n * 3 // 4 :] = 0
    keys = store[:, :n]
    masked = torch.arange(n) >= n * 3 // 4
    q, w, store, masked = (t.to(device) for t in (q, w, store, masked))
    keys = store[:, :n]
    fused = fused_index_scores(q, w, keys, masked)
    assert fused is not None and fused.dtype == torch.bfloat16 and fused.shape == (batch, n)
    expected = scores_torch(q, w, keys, masked)
    assert torch.equal(torch.isinf(fused), torch.isinf(expected))
    live = ~masked
    got, want = fused[:, live].float(), expected[:, live].float()
    # a rounding moved by one bf16 unit (2^-8 relative) in a term or in the sum: bounded by the terms' magnitude
    terms = (torch.relu(torch.einsum("bhd,bnd->bhn", q.float(), keys.float())) * w.float().unsqueeze(-1)).abs().sum(1)
    units = 1 if device == "cuda" else 4
    assert ((got - want).abs() <= units * 2.0**-8 * (want.abs() + terms[:, live])).all()
    assert not torch.signbit(got[got == 0]).any()  # an all-zero head sum is +0, as torch's


def test_fused_index_scores_leaves_other_devices_to_the_torch_form():
    q = torch.zeros(1, 4, 32, dtype=torch.bfloat16)
    if INTERPRET and triton is not None:
        pytest.skip("the interpreter runs the kernel on the CPU")
    assert fused_index_scores(q, q[:, :, 0], q, torch.zeros(1, dtype=torch.bool)) is None
