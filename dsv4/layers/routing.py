"""The MoE's routing after the gate GEMV, and its combine of the experts' outputs, as one Triton kernel each.

In torch ops the routing is seven small kernels per layer at batch 1 (softplus, sqrt, the bias add and top-k or
the hash table's lookup, gather, sum, divide, multiply) and the combine five (two casts, the sum over the
top-k, the shared expert's add, the cast back): launch cost, nothing else. The gate GEMV itself stays a
cuBLAS fp32 GEMM.

* `_route`: per row ``sigma = sqrt(softplus(logits))`` (libdevice ``expf``/``log1pf`` and a correctly
  rounded square root, as torch's CUDA kernels; softplus is linear above 20, as torch's threshold), the top-k
  of ``sigma + bias`` by repeated arg-max (ties to the lowest index, in descending order as `topk` returns
  them) or the hash table's ids, then ``w / sum(w) * scale``. The sum adds the k weights in pick order, so
  weights agree with the torch form to fp32 rounding; ids agree except on exactly tied scores.
* `_combine`: ``bf16(sum_j down[j] + shared)`` in fp32, the k rows summed in the order torch's CUDA reduction
  adds a strided dim (four accumulators taking rows round robin, then combined in index order; with k <= 4
  that is index order, as `sinkhorn.py` measured for four rows), then the shared expert added.

Other devices, and more than one shared expert, use the torch form.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsv4.layers.kernels import INTERPRET, libdevice, pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

ACCUMULATORS = 4  # torch's CUDA reduction: values per thread kept apart before they combine
BLOCK_D = 1024

if triton is not None:

    @triton.jit
    def _route(logits, bias, tid2eid, tokens, ids_out, w_out, n, scale,
               K: tl.constexpr, K_PAD: tl.constexpr, HASHED: tl.constexpr, BLOCK_E: tl.constexpr,
               LIBDEVICE: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        row = tl.program_id(0)
        lanes = tl.arange(0, BLOCK_E)
        ok = lanes < n
        v = tl.load(logits + row * n + lanes, mask=ok, other=0.0)
        if LIBDEVICE:  # torch's softplus (threshold 20) with its CUDA functions
            soft = tl.where(v > 20.0, v, libdevice.log1p(libdevice.exp(v)))
        else:  # Triton's interpreter has no libdevice
            soft = tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(v)))
        sigma = tl.sqrt_rn(soft)
        if not HASHED:
            score = tl.where(ok, sigma + tl.load(bias + lanes, mask=ok, other=0.0), float("-inf"))
        picks = tl.arange(0, K_PAD)
        ids = tl.zeros([K_PAD], dtype=tl.int64)
        weights = tl.zeros([K_PAD], dtype=tl.float32)
        total = 0.0
        for j in tl.static_range(K):
            if HASHED:
                at = tl.load(tid2eid + tl.load(tokens + row) * K + j)
            else:
                _, at = tl.max(score, axis=0, return_indices=True, return_indices_tie_break_left=True)
                score = tl.where(lanes == at, float("-inf"), score)
            w = tl.sum(tl.where(lanes == at, sigma, 0.0), axis=0)
            ids = tl.where(picks == j, at.to(tl.int64), ids)
            weights = tl.where(picks == j, w, weights)
            total = total + w
        tl.store(ids_out + row * K + picks, ids, mask=picks < K)
        tl.store(w_out + row * K + picks, tl.math.div_rn(weights, total) * scale, mask=picks < K)

    @triton.jit
    def combined_row(down, shared, row, cols, ok, d, K: tl.constexpr, HAS_SHARED: tl.constexpr, ACC: tl.constexpr):
        """fp32 sum of `row`'s K expert outputs at `cols`, in torch's order, plus the shared expert's; unrounded."""
        rows = down + (row * K).to(tl.int64) * d + cols
        # ACC = min(4, K) accumulators (with K <= 4 no row follows another): accumulator 0 takes rows 0, 4, 8, ...
        y = tl.load(rows, mask=ok, other=0.0).to(tl.float32)
        for j in tl.static_range(ACC, K, ACC):
            y = y + tl.load(rows + j * d, mask=ok, other=0.0).to(tl.float32)
        for first in tl.static_range(1, ACC):  # then accumulators 1, 2, ... join in index order
            acc = tl.load(rows + first * d, mask=ok, other=0.0).to(tl.float32)
            for j in tl.static_range(first + ACC, K, ACC):
                acc = acc + tl.load(rows + j * d, mask=ok, other=0.0).to(tl.float32)
            y = y + acc
        if HAS_SHARED:
            y = y + tl.load(shared + row.to(tl.int64) * d + cols, mask=ok, other=0.0).to(tl.float32)
        return y

    @triton.jit
    def _combine(down, shared, out, d, K: tl.constexpr, HAS_SHARED: tl.constexpr, ACC: tl.constexpr,
                 BLOCK_D: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        ok = cols < d
        y = combined_row(down, shared, row, cols, ok, d, K, HAS_SHARED, ACC)
        tl.store(out + row.to(tl.int64) * d + cols, y.to(tl.bfloat16), mask=ok)


def fused_route(logits: torch.Tensor, bias: torch.Tensor | None, tid2eid: torch.Tensor | None,
                tokens: torch.Tensor, k: int, scale: float):
    """(expert ids [B,k] int64, weights [B,k] fp32) from the fp32 gate logits [B,E], or None where the torch form
    must run. `tid2eid` (hash layers, [vocab,k] int64, ids looked up by `tokens`) or `bias` ([E] fp32)."""
    hashed = tid2eid is not None
    table = tid2eid if hashed else bias
    if (not runs_triton(logits, "route") or logits.dim() != 2 or logits.dtype != torch.float32
            or not logits.is_contiguous() or table is None or not table.is_contiguous()
            or (hashed and (tid2eid.dtype != torch.int64 or tid2eid.shape[1] != k or tokens.dtype != torch.int64))
            or (not hashed and bias.dtype != torch.float32)):
        return None
    batch, n = logits.shape
    ids = torch.empty(batch, k, dtype=torch.int64, device=logits.device)  # graphready: ignore[GR301] graph pool
    w = torch.empty(batch, k, dtype=torch.float32, device=logits.device)  # graphready: ignore[GR301] graph pool
    _route[(batch,)](logits, table if not hashed else logits, table if hashed else ids, tokens, ids, w, n, scale,
                     K=k, K_PAD=triton.next_power_of_2(k), HASHED=hashed, BLOCK_E=triton.next_power_of_2(n),
                     LIBDEVICE=not INTERPRET, num_warps=4, **pdl_options())
    return ids, w


@dataclass
class ExpertOutputs:
    """A layer's expert outputs before their combine: `routed` [B*k, D] (row b*k + j: token b's j-th expert),
    `shared` the shared experts' [B, D] each. A kernel that reads the combined output can combine them itself
    where `combine_kernel_reads` says so (mHC post does); else `combined()`."""

    routed: torch.Tensor
    shared: list[torch.Tensor]
    k: int

    def combine_kernel_reads(self) -> bool:
        """Whether `combined_row` can read these (bf16, contiguous, at most one shared expert, on CUDA)."""
        down, shared = self.routed, self.shared
        return (len(shared) <= 1 and runs_triton(down, "combine") and down.dim() == 2 and down.shape[0] % self.k == 0
                and down.is_contiguous() and down.dtype == torch.bfloat16
                and all(s.is_contiguous() and s.dtype == torch.bfloat16 for s in shared))

    def combined(self) -> torch.Tensor:
        """bf16 [B,D]: each token's k expert outputs summed, plus the shared experts'; one kernel on CUDA."""
        if self.combine_kernel_reads():
            return fused_combine(self.routed, self.shared[0] if self.shared else None, self.k)
        y = self.routed.float().unflatten(0, (-1, self.k)).sum(1)
        for out in self.shared:
            y = y + out.float()
        return y.to(torch.bfloat16)


def fused_combine(down: torch.Tensor, shared: torch.Tensor | None, k: int) -> torch.Tensor:
    """bf16 [B,D]: the sum of each row's k expert outputs (`down` [B*k,D] bf16) plus `shared` ([B,D] bf16 or None),
    where `ExpertOutputs.combine_kernel_reads`."""
    batch, d = down.shape[0] // k, down.shape[1]
    out = torch.empty(batch, d, dtype=torch.bfloat16, device=down.device)  # graphready: ignore[GR301] graph pool
    _combine[(batch, triton.cdiv(d, BLOCK_D))](down, shared if shared is not None else down, out, d, K=k,
                                               HAS_SHARED=shared is not None, ACC=min(ACCUMULATORS, k),
                                               BLOCK_D=BLOCK_D, **pdl_options())
    return out
