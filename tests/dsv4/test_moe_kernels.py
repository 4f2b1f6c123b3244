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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_shared", [True, False])
def test_mhc_post_combining_the_expert_outputs_equals_combine_then_post(device, with_shared):
    """mHC post reads the experts' outputs and combines them itself (one launch fewer): the same bits as the
    combine kernel followed by post, on CUDA and under the interpreter alike (both run the same combine code)."""
    from dsv4.layers.mhc import HyperConnection
    from dsv4.layers.routing import ExpertOutputs

    g = torch.Generator().manual_seed(21)
    batch, k, d = 2, 6, 4096 if device == "cuda" else 256
    down = (torch.randn(batch * k, d, generator=g) * torch.logspace(-3, 3, d)).to(torch.bfloat16).to(device)
    shared = [torch.randn(batch, d, generator=g).to(torch.bfloat16).to(device)] if with_shared else []
    streams = torch.randn(batch, 4, d, generator=g).to(torch.bfloat16).to(device)
    post = torch.rand(batch, 4, generator=g).to(device)
    comb = torch.rand(batch, 4, 4, generator=g).to(device)
    experts = ExpertOutputs(down, shared, k)
    assert experts.combine_kernel_reads()
    fused = HyperConnection.post(experts, streams, post, comb)
    assert torch.equal(fused, HyperConnection.post(experts.combined(), streams, post, comb))


def _expert_stacks(device, experts=5, out=48, inp=256, seed=0):
    """Two NVFP4 expert stacks (gate, up) and the shared expert's two matching matrices, on `device`."""
    from dsv4.formats import quantize_nvfp4

    g = torch.Generator().manual_seed(seed)
    stacks = [quantize_nvfp4(torch.randn(experts, out, inp, generator=g) * 0.02).to(device) for _ in range(2)]
    shared = [quantize_nvfp4(torch.randn(out, inp, generator=g) * 0.02).to(device) for _ in range(2)]
    return stacks, shared, g


@pytest.mark.parametrize("device", DEVICES)
def test_gate_up_and_the_shared_expert_in_one_launch_equal_one_launch_each(device):
    """The shared expert's rows computed with the routed ones equal the shared matrix run alone as a one-expert
    stack, and gate and up in one launch equal one launch each: the same arithmetic, bit for bit (also in the
    interpreter, which runs one kernel both ways)."""
    from dsv4.formats import NVFP4Weight
    from dsv4.layers.expert_matvec import expert_matvecs

    (gate, up), shared, g = _expert_stacks(device)
    batch, k = 2, 3
    ids = torch.tensor([4, 0, 4, 1, 1, 2], device=device)
    x = torch.randn(batch, 256, generator=g).to(torch.bfloat16).to(device)
    outs = [torch.full((batch * k + batch, 48), float("nan"), dtype=torch.bfloat16, device=device) for _ in range(2)]
    expert_matvecs([gate, up], ids, x, outs, shared)
    for stack, matrix, out in zip((gate, up), shared, outs):
        alone = expert_matvecs([stack], ids, x.repeat_interleave(k, dim=0),
                               [torch.empty(batch * k, 48, dtype=torch.bfloat16, device=device)])[0]
        assert torch.equal(out[: batch * k], alone)
        one = NVFP4Weight(matrix.packed[None], matrix.scale[None], matrix.global_scale[None])
        by_itself = expert_matvecs([one], torch.zeros(batch, dtype=torch.long, device=device), x,
                                   [torch.empty(batch, 48, dtype=torch.bfloat16, device=device)])[0]
        assert torch.equal(out[batch * k :], by_itself)
        dense = x.float() @ matrix.dequantize(dtype=torch.float32).T  # the weights' exact values
        assert (out[batch * k :].float() - dense).abs().max() <= 0.01 * dense.abs().max()


@pytest.mark.parametrize("device", DEVICES)
def test_the_down_projection_reads_one_input_row_per_row_then_the_shared_rows(device):
    from dsv4.layers.expert_matvec import expert_matvecs

    (down, _), (shared, _), g = _expert_stacks(device, seed=1)
    ids = torch.tensor([3, 1], device=device)
    h = torch.randn(3, 256, generator=g).to(torch.bfloat16).to(device)  # two routed rows, then the shared row
    out = expert_matvecs([down], ids, h, [torch.empty(3, 48, dtype=torch.bfloat16, device=device)], [shared])[0]
    want = torch.stack([h[0].float() @ down.dequantize(dtype=torch.float32)[3].T,
                        h[1].float() @ down.dequantize(dtype=torch.float32)[1].T,
                        h[2].float() @ shared.dequantize(dtype=torch.float32).T])
    assert (out.float() - want).abs().max() <= 0.01 * want.abs().max()
