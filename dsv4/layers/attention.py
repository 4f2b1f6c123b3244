"""Sparse MQA attention with sink over a window ring buffer plus compressed entries (spec section 4).

Cache layout per layer: `kv_cache[:, :ring]` is the ring (slot p % ring), `kv_cache[:, ring + j]` the
compressed entry j. The ring holds window + T - 1 entries when a step carries T consecutive tokens of a
sequence (T = 2 for speculative decoding), so writing the later tokens' entries first never evicts an entry
an earlier token of the step still attends to. Both paths attend over the whole fixed-size cache with masks
(the last `window` positions, compressed entries < (p+1)//m, CSA: the indexer's fixed-size top-k); the eager
path computes the masks and cache slots from a host position, the graph path from `pos`, a [1] int64 device
tensor. Rows are ordered (sequence, token): row b*T + t is token t of sequence b, at position pos + t.
"""

from __future__ import annotations

import torch

from dsv4.layers.compressor import Compressor
from dsv4.layers.indexer_scores import fused_index_scores
from dsv4.layers.primitives import FP8_BLOCK, hadamard_fp4, norm_rope_tail, rms_norm_for_gemm, rope_tail
from dsv4.layers.sink_attention import KEY_BLOCK, fused_sink_attention, rope_in_attention
from dsv4.layers.weights import Dense, StackedDense, dense_tensor


def top_entries(scores: torch.Tensor, k: int):
    """The official indexer's top-k of bf16 `scores` along the last dim: CUDA `torch.topk` itself on CUDA, the same
    algorithm in torch ops elsewhere.

    Ties are common: scores are bf16 (as the official indexer's), and an entry whose every head product is
    negative scores exactly 0 after the ReLU. CUDA `topk` finds the k-th value by the radix keys of the bit
    patterns (-0.0 below +0.0), gathers the entries above it in index order, then those equal to it in index
    order until k are taken, and sorts the picks by value (-0.0 equal to +0.0; stably for more than 32 picks).
    Slots not yet written are -inf and last: they change none of this, so the fixed-size call over all slots
    picks what the official call over the written slots picks.
    """
    if scores.is_cuda:
        return torch.topk(scores, k)
    bits = scores.view(torch.int16).int()
    radix = bits ^ ((bits >> 15) & 0x7FFF)  # the bit patterns in value order, -0.0 just below +0.0
    picks = torch.sort(radix, dim=-1, descending=True, stable=True).indices[..., :k].sort(dim=-1).values
    keys = radix.gather(-1, picks)
    at_kth = (keys == keys.amin(-1, keepdim=True)).to(torch.int8)  # gathered after the others
    picks = picks.gather(-1, torch.sort(at_kth, dim=-1, stable=True).indices)
    values = scores.gather(-1, picks)
    picks = picks.gather(-1, torch.sort(values.float(), dim=-1, descending=True, stable=True).indices)
    return torch.return_types.topk((scores.gather(-1, picks), picks))


class Indexer:
    """CSA's lightning indexer: scores every compressed entry and keeps the top-k (spec section 4)."""

    def __init__(self, weights: dict, prefix: str, ctx, positions):
        cfg = ctx.config
        self.ctx = ctx
        self.heads, self.dim = cfg.index_n_heads, cfg.index_head_dim
        n = ctx.max_len // 4
        self.wq_b = Dense(weights[f"{prefix}.wq_b"], ctx.device, ctx.resident, quantize_input=True)
        self.weights_proj = Dense(weights[f"{prefix}.weights_proj"], ctx.device, True)
        # the entries and, last, the scratch rows (one per token of a step) the compressor commits to between
        # window boundaries
        self.store = torch.zeros(ctx.batch, n + ctx.tokens_per_step, self.dim, dtype=torch.bfloat16, device=ctx.device)
        self.cache = self.store[:, :n]
        self.compressor = Compressor(weights, f"{prefix}.compressor", 4, self.dim, self.store, ctx, indexer=True,
                                     positions=positions)
        self.scale = self.dim**-0.5 * self.heads**-0.5
        self.topk = min(cfg.index_topk, n)

    def reset(self) -> None:
        self.store.zero_()
        self.compressor.reset()

    def query(self, qr: torch.Tensor, x: torch.Tensor, cos_sin: torch.Tensor, q_out: torch.Tensor | None = None,
              w_out: torch.Tensor | None = None, qr_quantized: torch.Tensor | None = None):
        """Indexer queries [B, heads, dim] (RoPE, Hadamard, FP4) and head weights [B, heads], both bf16 (written
        to `q_out`, `w_out` when given). `qr_quantized`: `act_quant(qr)`, when the caller has it."""
        q = self.wq_b(qr, xq=qr_quantized).unflatten(-1, (self.heads, self.dim))
        q = rope_tail(q, self.ctx.config.qk_rope_head_dim, cos_sin)
        q = hadamard_fp4(q, self.ctx.fp4_tables, out=q_out)
        w = self.weights_proj(x)
        return q, w * self.scale if w_out is None else torch.mul(w, self.scale, out=w_out)

    def scores(self, q: torch.Tensor, w: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """score_j = sum_h w_h relu(q_h . k_j) in bf16 [B, n], as the official indexer (bf16 GEMM, bf16 products
        and head sum): bf16 scores tie often (`top_entries` breaks ties as CUDA topk does)."""
        dots = torch.einsum("bhd,bnd->bhn", q, keys)
        return (torch.relu(dots) * w.unsqueeze(-1)).sum(1)

    def select(self, q, w, masked: torch.Tensor, valid_out: torch.Tensor | None = None):
        """Fixed-size top-k over all slots, those where `masked` ([n] bool: not yet written) at -inf.

        Returns (indices [B, k], valid [B, k], into `valid_out` when given); a pick is invalid when it landed on a
        masked slot.
        """
        s = fused_index_scores(q, w, self.cache, masked)  # one kernel on CUDA (to a bf16 unit of the torch form)
        if s is None:
            s = self.scores(q, w, self.cache).masked_fill(masked, float("-inf"))
        top = top_entries(s, self.topk)
        return top.indices, torch.gt(top.values, float("-inf"), out=valid_out)


class Attention:
    def __init__(self, weights: dict, prefix: str, layer: int, ctx, positions):
        """`positions`: the device's `StepPositions`, which the graph-ready path reads its slots and masks from."""
        cfg = ctx.config
        self.ctx = ctx
        self.kind = cfg.layer_kind(layer)
        self.ratio = cfg.compress_ratios[layer]
        self.heads, self.head_dim, self.rope_dim = cfg.num_attention_heads, cfg.head_dim, cfg.qk_rope_head_dim
        self.window = cfg.sliding_window
        self.steps = ctx.tokens_per_step
        self.ring = self.window + self.steps - 1
        self.groups = cfg.o_groups
        dev, res = ctx.device, ctx.resident
        self.wq_a_wkv = StackedDense([weights[f"{prefix}.wq_a"], weights[f"{prefix}.wkv"]], dev, res,
                                     quantize_input=True)
        self.q_norm = dense_tensor(weights[f"{prefix}.q_norm.weight"], dev, torch.float32)
        self.wq_b = Dense(weights[f"{prefix}.wq_b"], dev, res, quantize_input=True)
        self.kv_norm = dense_tensor(weights[f"{prefix}.kv_norm.weight"], dev, torch.float32)
        self.wo_a = Dense(weights[f"{prefix}.wo_a"], dev, res)
        self.wo_b = Dense(weights[f"{prefix}.wo_b"], dev, res, quantize_input=True)
        self.sink = dense_tensor(weights[f"{prefix}.attn_sink"], dev, torch.float32)
        self.rope = ctx.rope_compressed if self.ratio else ctx.rope_window
        self.positions = positions
        self.at_ratio = positions.use(self.ratio)
        n_comp = ctx.max_len // self.ratio if self.ratio else 0
        # the ring, the compressed entries and (compressed layers) the compressor's scratch rows, one per token
        scratch = self.steps if self.ratio else 0
        self.kv_cache = torch.zeros(ctx.batch, self.ring + n_comp + scratch, self.head_dim, dtype=torch.bfloat16,
                                    device=dev)
        self.window_slots = torch.arange(self.window, device=dev)
        self.comp_slots = torch.arange(n_comp, device=dev)
        self.comp_entry_slots = self.comp_slots + self.ring  # where compressed entry j sits in the cache
        self.compressor = None
        if self.ratio:
            self.compressor = Compressor(weights, f"{prefix}.compressor", self.ratio, self.head_dim,
                                         self.kv_cache[:, self.ring :], ctx, indexer=False, positions=positions)
        self.indexer = Indexer(weights, f"{prefix}.indexer", ctx, positions) if self.kind == "csa" else None

    def reset(self) -> None:
        self.kv_cache.zero_()
        for part in (self.compressor, self.indexer):
            if part is not None:
                part.reset()

    @property
    def bytes_read(self) -> int:
        dense = [self.wq_a_wkv, self.wq_b, self.wo_a, self.wo_b]
        if self.indexer is not None:
            dense += [self.indexer.wq_b, self.indexer.weights_proj]
        return sum(d.bytes_read for d in dense)

    # -- shared math ---------------------------------------------------------------------------------
    def project(self, x: torch.Tensor, cos_sin: torch.Tensor, q_out: torch.Tensor | None = None,
                xq: torch.Tensor | None = None, kv_slots: torch.Tensor | None = None):
        """x (normed, bf16 [rows,D]; `xq` its `act_quant` when the caller has it) -> q [rows,H,hd] (into `q_out`
        when given), the tokens' cache entries kv [rows,hd] (with `kv_slots`, the step's [T] cache slots on the
        device, written to the cache there and the cache returned), qr [rows,q_lora] and its `act_quant`."""
        eps = self.ctx.config.rms_norm_eps
        q_low, kv = self.wq_a_wkv(x, xq=xq)
        qr, qr_quantized, _ = rms_norm_for_gemm(q_low, self.q_norm, eps)
        q = self.wq_b(qr, xq=qr_quantized).unflatten(-1, (self.heads, self.head_dim))
        q = norm_rope_tail(q, None, eps, self.rope_dim, cos_sin, out=q_out)
        kv = norm_rope_tail(kv, self.kv_norm, eps, self.rope_dim, cos_sin, quant_block=FP8_BLOCK,  # RoPE stays bf16
                            scatter=None if kv_slots is None else (self.kv_cache, kv_slots))
        return q, kv, qr, qr_quantized

    def attend(self, q: torch.Tensor, keys: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Softmax with sink over `keys` [B,S,hd] where `valid` [B or 1,S] (None: all); V = K. o [B,H,hd] bf16.

        The official sparse-attention kernel's online softmax: fp32 scores, then the keys in blocks of 64 in
        their order. Per block the running max takes the block's scores, the denominator and the output so far
        are rescaled by exp(old max - new max), the block's exponentials against the new max join the
        denominator (their sum taken in fp64 and rounded once: the official order inside a block is its thread
        layout's, this one cannot depend on order or on masked slots) and, cast to bf16, the P.V product. The
        sink joins the denominator at the end as exp(sink - max), then one divide. Keys come oldest window entry
        first (always valid, so the running max is finite from the first block on) and masked ones after the
        valid ones of their part, so the blocks hold the keys the official kernel's blocks hold.
        """
        scores = torch.einsum("bhd,bsd->bhs", q.float(), keys.float()) * self.head_dim**-0.5
        if valid is not None:
            scores = scores.masked_fill(~valid.unsqueeze(1), float("-inf"))
        values = keys.float()
        top = scores.new_full(scores.shape[:-1] + (1,), float("-inf"))
        denom = scores.new_zeros(top.shape)
        acc = scores.new_zeros(q.shape)
        for start in range(0, scores.shape[-1], KEY_BLOCK):
            block = scores[..., start : start + KEY_BLOCK]
            new_top = torch.maximum(top, block.amax(-1, keepdim=True))
            rescale = torch.exp(top - new_top)
            e = torch.exp(block - new_top)
            denom = denom * rescale + e.double().sum(-1, keepdim=True).float()
            p = e.to(torch.bfloat16).float()
            acc = acc * rescale + torch.einsum("bhs,bsd->bhd", p, values[:, start : start + KEY_BLOCK])
            top = new_top
        denom = denom + torch.exp(self.sink.view(1, -1, 1) - top)
        return (acc / denom).to(torch.bfloat16)

    def output(self, o: torch.Tensor, cos_sin: torch.Tensor | None) -> torch.Tensor:
        """Inverse RoPE (None: `o`'s RoPE channels are rotated back already), grouped low-rank wo_a, then wo_b ->
        [B,D] bf16."""
        if cos_sin is not None:
            o = rope_tail(o, self.rope_dim, cos_sin, inverse=True)
        # wo_a: [G * o_lora, (H/G) * hd], group g reads o's g
        return self.wo_b(self.wo_a(o.flatten(1), groups=self.groups))

    # -- eager path (host position) -----------------------------------------------------------------
    def forward_eager(self, x: torch.Tensor, position: int) -> torch.Tensor:
        """Cache writes and compressor boundaries branch on the host position; attention is the same
        fixed-size masked computation as the graph-ready path, so both give bit-identical results."""
        cos_sin = self.rope.index_select(0, position + self.ctx.row_offsets)
        q, kv, qr, qr_quantized = self.project(x, cos_sin)
        qi = wi = None
        for t in range(self.steps):
            self.kv_cache[:, (position + t) % self.ring] = kv[t :: self.steps]
        for compressor in self._compressors():
            compressor.update_eager(x, position, self.rope)
        if self.indexer is not None:
            qi, wi = self.indexer.query(qr, x, cos_sin, qr_quantized=qr_quantized)
        return self.output(self._attend_rows(q, qi, wi, lambda t, qi, wi: self.key_slots(qi, wi, position + t)),
                           cos_sin)

    # -- graph-ready path (device position, fixed shapes) ---------------------------------------------
    def prepare_graph(self, x: torch.Tensor, q_out: torch.Tensor, qi_out: torch.Tensor | None,
                      wi_out: torch.Tensor | None, xq: torch.Tensor | None = None,
                      x32: torch.Tensor | None = None) -> None:
        """Projections and all cache/state writes for this step's tokens (slots from `positions`); what attention
        needs goes to the buffers `q_out` and (CSA) `qi_out`, `wi_out`. `xq` (`act_quant(x)`) and `x32` (x in
        fp32, the compressors' input): when the caller has them."""
        cos_sin = self.positions.rope_rows[bool(self.ratio)]
        _, _, qr, qr_quantized = self.project(x, cos_sin, q_out, xq, self.positions.kv_slot)
        for compressor in self._compressors():
            compressor.update_graph(x, x32)
        if self.indexer is not None:
            self.indexer.query(qr, x, cos_sin, qi_out, wi_out, qr_quantized)

    def attend_graph(self, q, qi, wi, out: torch.Tensor, cos_sin: torch.Tensor) -> None:
        """The step's attention output into `out`, its RoPE channels rotated back (`cos_sin`). Each token's key
        list is a row of the step's [T, B or 1, S] buffers (CSA writes its picks there first), so on CUDA one
        kernel attends for all the step's tokens, and rotates too where the head layout lets it."""
        lists = [self.graph_key_slots(t, None if qi is None else qi[t :: self.steps],
                                      None if wi is None else wi[t :: self.steps]) for t in range(self.steps)]
        slots, valid = self._step_lists()
        rotate = rope_in_attention(q, self.rope_dim, cos_sin)
        if fused_sink_attention(q, self.kv_cache, slots, valid, self.sink, self.head_dim**-0.5, out=out,
                                inverse_rope=cos_sin if rotate else None) is None:
            self._attend_rows(q, None, None, lambda t, *_: lists[t], out)
            rotate = False
        if not rotate:
            out.copy_(rope_tail(out, self.rope_dim, cos_sin, inverse=True))

    def _step_lists(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The buffers whose row t is token t's key list (slots, valid), [T, B or 1, S] each."""
        if not self.ratio:
            return self.positions.order.unsqueeze(1), self.positions.valid_window
        if self.indexer is None:
            return self.at_ratio.key_slots, self.at_ratio.key_valid
        return self.at_ratio.pick_slots, self.at_ratio.pick_valid

    def _compressors(self) -> list[Compressor]:
        found = [self.compressor] if self.compressor is not None else []
        return found + ([self.indexer.compressor] if self.indexer is not None else [])

    def _attend_rows(self, q, qi, wi, slots_for, out: torch.Tensor | None = None) -> torch.Tensor:
        """Each token t of the step attends at its own position (pos + t) over the slots `slots_for(t, qi, wi)`
        gives; rows back in (sequence, token) order, in `out` when given (token t's rows written straight into
        its rows of `out`: no stack of the tokens' outputs)."""
        outs = []
        for t in range(self.steps):
            rows = slice(t, None, self.steps)
            slots, valid = slots_for(t, None if qi is None else qi[rows], None if wi is None else wi[rows])
            outs.append(self.masked_attention(q[rows], slots, valid, None if out is None else out[rows]))
        if out is not None:
            return out
        return outs[0] if self.steps == 1 else torch.stack(outs, dim=1).flatten(0, 1)

    def window_slots_at(self, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The cache slots of the window's entries for a token at `pos`, oldest first (the official kernel's
        order), and which exist: [W], [1,W]. Before the window fills, slot i holds position i and the empty
        slots trail; after, the oldest entry (position pos - W + 1) sits at slot (pos - W + 1) % ring. A fixed
        order makes the P.V sum run in the same order at any position and for any token of a step.
        `StepPositions.refresh` computes the same from the device position.
        """
        start = pos - self.window + 1 if pos >= self.window - 1 else 0
        return torch.remainder(self.window_slots + start, self.ring), (self.window_slots <= pos).unsqueeze(0)

    def key_slots(self, qi, wi, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The cache slots a token at host position `pos` attends to and which are valid, [B or 1, S] each: the
        window's entries up to pos, then the compressed entries < (pos + 1) // ratio (CSA: the indexer's top-k
        of them)."""
        order, valid_window = self.window_slots_at(pos)
        if not self.ratio:
            return order.unsqueeze(0), valid_window
        count = (pos + 1) // self.ratio
        if self.indexer is None:
            slots = torch.cat([order, self.comp_entry_slots]).unsqueeze(0)
            return slots, torch.cat([valid_window, (self.comp_slots < count).unsqueeze(0)], dim=1)
        return self._with_picks(order, valid_window, *self.indexer.select(qi, wi, self.comp_slots >= count))

    def graph_key_slots(self, t: int, qi, wi) -> tuple[torch.Tensor, torch.Tensor]:
        """`key_slots` for the step's token t, from the values `positions` computed for this step."""
        p = self.positions
        if not self.ratio:
            return p.order[t : t + 1], p.valid_window[t]
        values = self.at_ratio
        if self.indexer is None:
            return values.key_slots[t], values.key_valid[t]
        # the window's part of the step's CSA key list is in place; the picks go after it
        slots, valid = values.pick_slots[t], values.pick_valid[t]
        picked, _ = self.indexer.select(qi, wi, values.masked[t], valid[:, self.window :])
        torch.add(picked, self.ring, out=slots[:, self.window :])
        return slots, valid

    def _with_picks(self, order, valid_window, picked, picked_valid) -> tuple[torch.Tensor, torch.Tensor]:
        """CSA (eager path): the window's slots, then the cache slots of the indexer's picks."""
        slots = torch.cat([order.expand(picked.shape[0], -1), picked + self.ring], dim=1)
        return slots, torch.cat([valid_window.expand(picked.shape[0], -1), picked_valid], dim=1)

    def masked_attention(self, q, slots, valid, out: torch.Tensor | None = None) -> torch.Tensor:
        """Attention over the fixed-size cache at `slots` where `valid` ([B or 1, S] each), into `out` when given.
        On CUDA one kernel reads the keys from the cache (and writes a contiguous `out`); elsewhere the keys are
        gathered and `attend` runs the same arithmetic in torch ops."""
        fused = fused_sink_attention(q, self.kv_cache, slots, valid, self.sink, self.head_dim**-0.5, out=out)
        if fused is not None:
            return fused
        if slots.shape[0] == 1:
            keys = self.kv_cache.index_select(1, slots[0])
        else:
            keys = self.kv_cache.gather(1, slots.unsqueeze(-1).expand(-1, -1, self.head_dim))
        o = self.attend(q, keys, valid)
        return o if out is None else out.copy_(o)
