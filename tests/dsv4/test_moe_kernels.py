"""The MoE routing and combine kernels (`dsv4/layers/routing.py`) against the torch form they replace.

On a GPU: expert ids equal, routing weights to fp32 rounding, the combine bit for bit. On the CPU under Triton's
interpreter (TRITON_INTERPRET=1 with Triton importable; skipped otherwise): the same logic, outputs to one unit
in the last place, since the interpreter's casts truncate (`dsv4.layers.kernels`).
"""

from __future__ import annotations

import pytest
import torch

from dsv4.layers.kernels import INTERPRET
from dsv4.layers.routing import fused_combine, fused_route, triton

CUDA = torch.cuda.is_available() and triton is not None
DEVICES = [pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")]),
           pytest.param("cpu", marks=pytest.mark.skipif(triton is None or not INTERPRET,
                                                        reason="needs Triton with TRITON_INTERPRET=1"))]
SHAPES = [(384, 6, 2.5), (8, 2, 1.5)]  # Pro's experts, top-k and scale; tiny's


def route_torch(logits, bias, tid2eid, tokens, k, scale):
    """`MoE.route` after its gate GEMV, in torch ops."""
    sigma = torch.sqrt(torch.nn.functional.softplus(logits))
    idx = tid2eid.index_select(0, tokens) if bias is None else (sigma + bias).topk(k, dim=-1).indices
    w = sigma.gather(1, idx)
    return idx, w / w.sum(-1, keepdim=True) * scale


def combine_torch(down, shared, k):
    y = down.float().unflatten(0, (down.shape[0] // k, k)).sum(1)
    return (y if shared is None else y + shared.float()).to(torch.bfloat16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("experts,k,scale", SHAPES)
@pytest.mark.parametrize("hashed", [False, True])
def test_fused_route_picks_the_torch_experts_and_weights(device, experts, k, scale, hashed):
    g = torch.Generator().manual_seed(experts + k)
    batch, vocab = 4, 64
    logits = (torch.randn(batch, experts, generator=g) * 4).to(device)
    logits[0, :3] = torch.tensor([25.0, -30.0, 20.0])  # both sides of softplus's linear threshold
    bias = (torch.randn(experts, generator=g) * 0.1).to(device)
    tid2eid = torch.rand(vocab, experts, generator=g).argsort(-1)[:, :k].contiguous().to(device)
    tokens = torch.randint(0, vocab, (batch,), generator=g).to(device)
    args = (None, tid2eid) if hashed else (bias, None)
    ids, w = fused_route(logits, *args, tokens, k, scale)
    ref_ids, ref_w = route_torch(logits, *args, tokens, k, scale)
    assert torch.equal(ids, ref_ids)
    if device == "cuda":  # the k weights summed in pick order: fp32 rounding
        torch.testing.assert_close(w, ref_w, rtol=4e-7, atol=0)
    else:  # the interpreter's softplus is log(1 + exp(x)): no log1p for the tiny weight of logit -30
        torch.testing.assert_close(w, ref_w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [1, 2, 6, 9])
@pytest.mark.parametrize("with_shared", [True, False])
def test_fused_combine_is_the_torch_sum_over_experts(device, k, with_shared):
    g = torch.Generator().manual_seed(k)
    batch, d = 3, 7168 if device == "cuda" else 300
    down = (torch.randn(batch * k, d, generator=g) * torch.logspace(-3, 3, d)).to(torch.bfloat16).to(device)
    shared = torch.randn(batch, d, generator=g).to(torch.bfloat16).to(device) if with_shared else None
    out = fused_combine(down, shared, k)
    ref = combine_torch(down, shared, k)
    if device == "cuda":  # torch's CUDA reduction order over the experts, then the shared expert: the same bits
        assert torch.equal(out, ref), f"{(out != ref).float().mean():.2%} of outputs differ"
    else:
        torch.testing.assert_close(out.float(), ref.float(), rtol=2**-7, atol=0)
