"""A second, deliberately plain DeepSeek-V4 decoder used only to check `dsv4.model` (spec sections 2-6).

It shares no code with the model: Python lists instead of preallocated caches, one attention head, one
hyper-connection stream, one expert at a time, its own RoPE, Sinkhorn, Hadamard
(butterflies), block scales and FP4 rounding, and each compressed entry is recomputed from the stored
per-token history of its window instead of a rolling state. It is slow and that is fine.

It follows the official inference code's numerics (DeepSeek-V4 `inference/model.py` and `kernel.py`),
written here from their behaviour: residual streams and projections bf16, norms and softmaxes fp32; the
input of every GEMM whose weight is stored FP8/FP4 (wq_a, wq_b, wkv, wo_b, the indexer's wq_b, shared and
routed experts; not wo_a) goes through e4m3 with one power-of-two scale per 128 values.
"""

from __future__ import annotations

import math

import torch

BF16 = torch.bfloat16
FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _stores_quantized(w) -> bool:
    """An FP8/FP4 checkpoint entry (the official model feeds such a GEMM FP8 activations)."""
    return getattr(w, "format", "bf16") != "bf16" and not isinstance(w, torch.Tensor)


def _plain(w) -> torch.Tensor:
    """A checkpoint entry as an fp32 tensor (quantized weights dequantized through bf16, as the model does)."""
    if hasattr(w, "dequantize") and not isinstance(w, torch.Tensor):
        return w.dequantize(dtype=BF16).float()
    if w.dtype in (torch.int32, torch.int64):
        return w.long()
    return w.to(BF16).float() if w.dtype == BF16 else w.float()


def _lin(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A bf16 GEMM (fp32 accumulation, bf16 result) of one activation row and a bf16-valued weight."""
    return torch.nn.functional.linear(x.to(BF16).unsqueeze(0), w.to(BF16))[0]


def _lin32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """An fp32 GEMM of one activation row (fp32 input, fp32 weight, fp32 result)."""
    return torch.nn.functional.linear(x.float().unsqueeze(0), w.float())[0]


def _rmsnorm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    """fp32 RMSNorm as the official one: times rsqrt(mean(x^2) + eps), then the weight; input dtype out."""
    v = x.float()
    out = v * torch.rsqrt((v * v).mean(-1, keepdim=True) + eps)
    if w is not None:
        out = out * w
    return out.to(x.dtype)


def _head_norm(q: torch.Tensor, eps: float) -> torch.Tensor:
    """The query heads' RMSNorm without weight, every op in bf16 as the official code runs it."""
    return q * torch.rsqrt((q * q).mean() + eps)


def _round_fp4(v: float) -> float:
    """Nearest e2m1 magnitude, ties to the even code (0, 1, 2, 4)."""
    a = abs(v)
    best = 0
    for i, g in enumerate(FP4_VALUES):
        d, bd = abs(a - g), abs(a - FP4_VALUES[best])
        if d < bd or (d == bd and i % 2 == 0 and best % 2 == 1):
            best = i
    return math.copysign(FP4_VALUES[best], v) if FP4_VALUES[best] else 0.0


def _pow2_scale(amax: float, qmax: float, floor: float) -> float:
    """Official ue8m0 scale: 2^ceil(log2(y)) for y = max(amax, floor) * (1/qmax), both factors and y in fp32."""
    y = (torch.tensor(max(amax, floor), dtype=torch.float32) * torch.tensor(1 / qmax, dtype=torch.float32)).item()
    mant, exp = math.frexp(y)  # y = mant * 2^exp, mant in [0.5, 1): a power of two has mant == 0.5
    return math.ldexp(1.0, exp - 1 if mant == 0.5 else exp)


def _fake_fp8(x: torch.Tensor, block: int = 64) -> torch.Tensor:
    """e4m3 round trip of a 1-D vector, one power-of-two scale per `block` values (the last block may be short)."""
    out = x.float().clone()
    for start in range(0, out.numel(), block):
        chunk = out[start : start + block]
        s = _pow2_scale(chunk.abs().max().item(), 448.0, 1e-4)
        out[start : start + block] = (chunk / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float() * s
    return out.to(x.dtype)


def _fake_fp4(x: torch.Tensor) -> torch.Tensor:
    """e2m1 round trip, one power-of-two scale per 32 values of a 1-D bf16 vector."""
    vals = x.float().tolist()
    out = []
    for start in range(0, len(vals), 32):
        block = vals[start : start + 32]
        s = _pow2_scale(max(abs(v) for v in block), 6.0, 6 * 2.0**-126)
        out += [_round_fp4(v / s) * s for v in block]
    return torch.tensor(out, dtype=torch.float32).to(x.dtype)


def _walsh_hadamard(x: torch.Tensor) -> torch.Tensor:
    """Butterfly Walsh-Hadamard transform of a 1-D vector, scaled by n^-1/2, fp32 in, input dtype out."""
    v = x.float().clone()
    n = v.numel()
    h = 1
    while h < n:
        for i in range(0, n, 2 * h):
            a, b = v[i : i + h].clone(), v[i + h : i + 2 * h].clone()
            v[i : i + h], v[i + h : i + 2 * h] = a + b, a - b
        h *= 2
    return (v * n**-0.5).to(x.dtype)


class _Rope:
    """Interleaved RoPE on the trailing dims with one frequency set (optionally YaRN-scaled).

    As the official table: fp32 frequencies 1 / theta^(2i/dim), fp32 angles position * frequency, cos/sin
    from `torch.polar`. The table grows in blocks of positions as the decoder advances.
    """

    BLOCK = 1024

    def __init__(self, dim: int, theta: float, yarn: dict | None):
        self.dim = dim
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        if yarn:
            orig, factor = yarn["original_max_position_embeddings"], yarn["factor"]
            lo = math.floor(dim * math.log(orig / (yarn.get("beta_fast", 32) * 2 * math.pi)) / (2 * math.log(theta)))
            hi = math.ceil(dim * math.log(orig / (yarn.get("beta_slow", 1) * 2 * math.pi)) / (2 * math.log(theta)))
            lo, hi = max(lo, 0), min(hi, dim - 1)
            if lo == hi:
                hi += 0.001
            keep = 1 - ((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)
            freqs = freqs / factor * (1 - keep) + freqs * keep
        self.freqs = freqs
        self.cos = self.sin = torch.zeros(0, dim // 2)

    def _row(self, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        while position >= self.cos.shape[0]:
            start = self.cos.shape[0]
            angles = torch.arange(start, start + self.BLOCK)[:, None] * self.freqs[None, :]  # fp32
            cis = torch.polar(torch.ones_like(angles), angles)  # cos and sin as the official table rounds them
            self.cos, self.sin = torch.cat([self.cos, cis.real]), torch.cat([self.sin, cis.imag])
        return self.cos[position], self.sin[position]

    def __call__(self, x: torch.Tensor, position: int, inverse: bool = False) -> torch.Tensor:
        """Rotate the last `dim` entries of the 1-D vector x: pair (2i, 2i+1) by angle position * freq_i."""
        cos, sin = self._row(position)
        if inverse:
            sin = -sin
        out = x.float().clone()
        base = out.numel() - self.dim
        a, b = out[base::2].clone(), out[base + 1 :: 2].clone()
        out[base::2] = a * cos - b * sin
        out[base + 1 :: 2] = a * sin + b * cos
        return out.to(x.dtype)


class _LayerState:
    def __init__(self):
        self.window: list[torch.Tensor] = []  # last `sliding_window` cache entries, oldest first
        self.compressed: list[torch.Tensor] = []
        self.history: list[tuple[torch.Tensor, torch.Tensor]] = []  # (kv, score) per token, main compressor
        self.index_keys: list[torch.Tensor] = []
        self.index_history: list[tuple[torch.Tensor, torch.Tensor]] = []


class ReferenceDecoder:
    """Batch-1 decoder: `step(token_id, position)` -> fp32 logits [vocab]. Positions must come in order."""

    def __init__(self, config, weights: dict):
        self.cfg = config
        self.w = {k: _plain(v) for k, v in weights.items()}
        self.fp8_inputs = {k for k, v in weights.items() if _stores_quantized(v)}
        yarn = config.rope_scaling if config.rope_scaling.get("type", config.rope_scaling.get("rope_type")) == "yarn" else None
        self.rope_window = _Rope(config.qk_rope_head_dim, config.rope_theta, None)
        self.rope_compressed = _Rope(config.qk_rope_head_dim, config.compress_rope_theta, yarn)
        self.state = [_LayerState() for _ in range(config.num_hidden_layers + 1)]  # the last: the MTP layer
        self.next_position = 0

    def _gemm(self, x: torch.Tensor, name: str, expert: int | None = None) -> torch.Tensor:
        """`x @ W.T` for the weight `name`, its input first through FP8 (128-blocks) when the weight is FP8/FP4."""
        if name in self.fp8_inputs:
            x = _fake_fp8(x, 128)
        if expert is None:
            return _lin(x, self.w[name])
        # one expert's matrix-vector product, shaped as the batched expert GEMM (a bf16 GEMM all the same)
        return torch.bmm(self.w[name][expert].to(BF16)[None], x.to(BF16)[None, :, None])[0, :, 0]

    # -- mHC --------------------------------------------------------------------------------------------
    def _mix_logits(self, streams: torch.Tensor, fn: torch.Tensor) -> list[torch.Tensor]:
        """The mixing logits as fp32 scalars: an fp32 GEMM of the flattened streams, times their inverse RMS."""
        flat = streams.float().reshape(1, -1)
        r = torch.rsqrt((flat * flat).mean() + self.cfg.rms_norm_eps)
        return list(torch.nn.functional.linear(flat, fn)[0] * r)

    def _hc_pre(self, streams, prefix):
        cfg, n, eps = self.cfg, self.cfg.hc_mult, self.cfg.hc_eps
        fn, s, b = self.w[f"{prefix}_fn"], self.w[f"{prefix}_scale"], self.w[f"{prefix}_base"]
        m = self._mix_logits(streams, fn)
        pre = [torch.sigmoid(m[j] * s[0] + b[j]) + eps for j in range(n)]
        post = [2 * torch.sigmoid(m[n + j] * s[1] + b[n + j]) for j in range(n)]
        comb = torch.stack(m[2 * n :]).reshape(n, n) * s[2] + b[2 * n :].reshape(n, n)
        comb = torch.softmax(comb, dim=1) + eps  # row j = source stream j
        for it in range(cfg.hc_sinkhorn_iters):
            if it > 0:
                comb = comb / (comb.sum(dim=1, keepdim=True) + eps)
            comb = comb / (comb.sum(dim=0, keepdim=True) + eps)
        x = sum(pre[j] * streams[j].float() for j in range(n))
        return x.to(BF16), post, comb

    def _hc_post(self, y, streams, post, comb):
        n = self.cfg.hc_mult
        out = []
        for k in range(n):
            mixed = sum(comb[j, k] * streams[j].float() for j in range(n))  # streams mixed first, as official
            out.append((post[k] * y.float() + mixed).to(BF16))
        return torch.stack(out)

    # -- compressor -------------------------------------------------------------------------------------
    def _pool(self, history, position, ratio, width):
        """Pool the window ending at `position` from the per-token history (CSA also uses the previous window)."""
        tokens = []  # (kv, score) restricted to the channels that feed this entry
        if ratio == 4:
            for t in range(position - 7, position - 3):
                if t >= 0:
                    kv, sc = history[t]
                    tokens.append((kv[:width], sc[:width]))
            for t in range(position - 3, position + 1):
                kv, sc = history[t]
                tokens.append((kv[width:], sc[width:]))
        else:
            for t in range(position - ratio + 1, position + 1):
                tokens.append(history[t])
        kv = torch.stack([k for k, _ in tokens])  # [tokens, width]
        scores = torch.stack([sc for _, sc in tokens])
        e = torch.exp(scores - scores.max(0).values)  # per channel, a softmax over the window's tokens, fp32
        return (e / e.sum(0) * kv).sum(0)

    def _compress(self, x, position, prefix, ratio, width, history, indexer):
        cfg = self.cfg
        kv = _lin32(x, self.w[f"{prefix}.wkv"])  # the compressor projects in fp32, as the official code
        score = _lin32(x, self.w[f"{prefix}.wgate"]) + self.w[f"{prefix}.ape"][position % ratio]
        history.append((kv, score))
        if (position + 1) % ratio:
            return None
        entry = _rmsnorm(self._pool(history, position, ratio, width).to(BF16), self.w[f"{prefix}.norm.weight"],
                         cfg.rms_norm_eps)
        entry = self.rope_compressed(entry, position + 1 - ratio)
        if indexer:
            return _fake_fp4(_walsh_hadamard(entry))
        nope = width - cfg.qk_rope_head_dim
        return torch.cat([_fake_fp8(entry[:nope]), entry[nope:]])

    # -- attention ----------------------------------------------------------------------------------------
    def _attention(self, x, layer, position):
        cfg, w, st = self.cfg, self.w, self.state[layer]
        p = f"{self._prefix(layer)}.attn"
        ratio = cfg.compress_ratios[layer]
        rope = self.rope_compressed if ratio else self.rope_window
        hd, nope, eps = cfg.head_dim, cfg.head_dim - cfg.qk_rope_head_dim, cfg.rms_norm_eps
        qr = _rmsnorm(self._gemm(x, f"{p}.wq_a"), w[f"{p}.q_norm.weight"], eps)
        q_all = self._gemm(qr, f"{p}.wq_b")
        queries = [rope(_head_norm(q_all[h * hd : (h + 1) * hd], eps), position)
                   for h in range(cfg.num_attention_heads)]
        kv = rope(_rmsnorm(self._gemm(x, f"{p}.wkv"), w[f"{p}.kv_norm.weight"], eps), position)
        kv = torch.cat([_fake_fp8(kv[:nope]), kv[nope:]])
        st.window = (st.window + [kv])[-cfg.sliding_window :]
        # the official kernel's key list: the window oldest first, padded to its size with empty slots, then
        # the compressed entries (CSA: the indexer's picks in top-k order)
        layout = st.window + [None] * (cfg.sliding_window - len(st.window))
        if ratio:
            entry = self._compress(x, position, f"{p}.compressor", ratio, hd, st.history, False)
            if entry is not None:
                st.compressed.append(entry)
        if ratio == 4:
            entry = self._compress(x, position, f"{p}.indexer.compressor", 4, cfg.index_head_dim,
                                   st.index_history, True)
            if entry is not None:
                st.index_keys.append(entry)
            layout += [st.compressed[j] for j in self._index_topk(x, qr, layer, position)]
        elif ratio:
            layout += st.compressed
        o = self._sparse_attention(torch.stack(queries).float(), layout, w[f"{p}.attn_sink"])
        outs = [rope(o[h].to(BF16), position, inverse=True) for h in range(cfg.num_attention_heads)]
        group = cfg.num_attention_heads // cfg.o_groups
        wo_a = w[f"{p}.wo_a"]
        z = []
        for g in range(cfg.o_groups):
            og = torch.cat(outs[g * group : (g + 1) * group])
            z.append(_lin(og, wo_a[g * cfg.o_lora_rank : (g + 1) * cfg.o_lora_rank]))
        return self._gemm(torch.cat(z), f"{p}.wo_b")

    def _sparse_attention(self, queries: torch.Tensor, layout: list, sink: torch.Tensor) -> torch.Tensor:
        """The official sparse-attention kernel: online softmax over the key list in blocks of 64 (empty slots
        add nothing), fp32 scores from one GEMM of all heads, P cast to bf16 against the running max, the
        block's exponentials summed in fp64 and rounded once, the sink in the denominator at the end."""
        hd = self.cfg.head_dim
        present = [k for k in layout if k is not None]
        keys = torch.stack(present).float()
        scores = torch.einsum("bhd,bsd->bhs", queries[None], keys[None])[0] * hd**-0.5
        top = torch.full((queries.shape[0],), float("-inf"))
        denom, acc, first = torch.zeros(queries.shape[0]), torch.zeros(queries.shape), 0
        for start in range(0, len(layout), 64):
            n = sum(k is not None for k in layout[start : start + 64])
            if not n:
                continue  # the kernel rescales by exp(0) = 1 and adds zeros
            block, block_keys = scores[:, first : first + n], keys[first : first + n]
            first += n
            new_top = torch.maximum(top, block.max(-1).values)
            rescale = torch.exp(top - new_top)
            e = torch.exp(block - new_top[:, None])
            denom = denom * rescale + e.double().sum(-1).float()
            pv = torch.einsum("bhs,bsd->bhd", e.to(BF16).float()[None], block_keys[None])[0]
            acc = acc * rescale[:, None] + pv
            top = new_top
        return acc / (denom + torch.exp(sink - top))[:, None]

    def _index_topk(self, x, qr, layer, position):
        cfg, w, st = self.cfg, self.w, self.state[layer]
        p = f"{self._prefix(layer)}.attn.indexer"
        if not st.index_keys:
            return []
        d = cfg.index_head_dim
        q_all = self._gemm(qr, f"{p}.wq_b")
        # bf16 throughout, as the official indexer: head weights, the q.k GEMM, the products and the head sum
        head_w = _lin(x, w[f"{p}.weights_proj"]) * (d**-0.5 * cfg.index_n_heads**-0.5)
        qs = torch.stack([_fake_fp4(_walsh_hadamard(self.rope_compressed(q_all[h * d : (h + 1) * d], position)))
                          for h in range(cfg.index_n_heads)])
        dots = torch.einsum("bhd,bnd->bhn", qs[None], torch.stack(st.index_keys)[None])[0]
        scores = (torch.relu(dots) * head_w[:, None]).sum(0).tolist()
        # CUDA topk (the official code's op): the k-th value by bit order (-0.0 below +0.0), the entries above it
        # and the lowest-index ones equal to it; listed by value (-0.0 == +0.0), those above the k-th first
        radix = [(v, math.copysign(1.0, v)) for v in scores]
        picks = sorted(range(len(scores)), key=lambda j: (-radix[j][0], -radix[j][1]))[: cfg.index_topk]
        kth = radix[picks[-1]]
        return sorted(picks, key=lambda j: (-scores[j], radix[j] == kth, j))

    # -- MoE -----------------------------------------------------------------------------------------------
    def _swiglu(self, x, prefix, expert=None):
        lim = self.cfg.swiglu_limit
        g = self._gemm(x, f"{prefix}.w1", expert).float().clamp(max=lim)
        u = self._gemm(x, f"{prefix}.w3", expert).float().clamp(-lim, lim)
        return g / (1 + torch.exp(-g)) * u

    def _moe(self, x, layer, token_id):
        cfg, w = self.cfg, self.w
        p = f"{self._prefix(layer)}.ffn"
        logits = torch.nn.functional.linear(x.float()[None], w[f"{p}.gate.weight"])[0]  # fp32 gate GEMM
        sigma = [torch.sqrt(torch.nn.functional.softplus(v)) for v in logits]
        if cfg.is_hash_layer(layer):
            chosen = [int(e) for e in w[f"{p}.gate.tid2eid"][token_id].tolist()]
        else:
            biased = [(sg + bias).item() for sg, bias in zip(sigma, w[f"{p}.gate.bias"])]
            chosen = sorted(range(len(sigma)), key=lambda e: -biased[e])[: cfg.num_experts_per_tok]
        total = sum(sigma[e] for e in chosen)
        out = torch.zeros(cfg.hidden_size)
        for e in chosen:
            weight = sigma[e] / total * cfg.routed_scaling_factor
            h = self._swiglu(x, f"{p}.experts", e) * weight
            out = out + self._gemm(h.to(BF16), f"{p}.experts.w2", e).float()
        for _ in range(cfg.n_shared_experts):
            h = self._swiglu(x, f"{p}.shared_experts")
            out = out + self._gemm(h.to(BF16), f"{p}.shared_experts.w2").float()
        return out.to(BF16)

    # -- step ----------------------------------------------------------------------------------------------
    def _prefix(self, layer: int) -> str:
        return "mtp.0" if layer == self.cfg.num_hidden_layers else f"layers.{layer}"

    def _block(self, streams, layer, position, token_id):
        w, eps, p = self.w, self.cfg.rms_norm_eps, self._prefix(layer)
        x, post, comb = self._hc_pre(streams, f"{p}.hc_attn")
        y = self._attention(_rmsnorm(x, w[f"{p}.attn_norm.weight"], eps), layer, position)
        streams = self._hc_post(y, streams, post, comb)
        x, post, comb = self._hc_pre(streams, f"{p}.hc_ffn")
        y = self._moe(_rmsnorm(x, w[f"{p}.ffn_norm.weight"], eps), layer, token_id)
        return self._hc_post(y, streams, post, comb)

    def _logits(self, streams, prefix: str, norm: str):
        """hc_head (sigmoid weights, no Sinkhorn), final norm, fp32 head."""
        cfg, w = self.cfg, self.w
        m = self._mix_logits(streams, w[f"{prefix}hc_head_fn"])
        pre = [torch.sigmoid(m[j] * w[f"{prefix}hc_head_scale"][0] + w[f"{prefix}hc_head_base"][j]) + cfg.hc_eps
               for j in range(cfg.hc_mult)]
        x = sum(pre[j] * streams[j].float() for j in range(cfg.hc_mult)).to(BF16)
        return _rmsnorm(x, w[norm], cfg.rms_norm_eps).float() @ w["head.weight"].T

    @torch.inference_mode()
    def step(self, token_id: int, position: int) -> torch.Tensor:
        if position != self.next_position:
            raise ValueError(f"positions must be consecutive: expected {self.next_position}, got {position}")
        self.next_position += 1
        emb = self.w["embed.weight"][token_id].to(BF16)
        streams = torch.stack([emb] * self.cfg.hc_mult)
        for layer in range(self.cfg.num_hidden_layers):
            streams = self._block(streams, layer, position, token_id)
        self.streams = streams  # the MTP layer's input at this position
        return self._logits(streams, "", "norm.weight")

    @torch.inference_mode()
    def mtp_step(self, next_token: int, position: int) -> torch.Tensor:
        """The MTP layer at `position` (after `step` there): logits of the token after `next_token`.

        Official MTPBlock: enorm(embed(next)) through e_proj, each stream of the main model's final streams
        through hnorm and h_proj, summed in bf16; one decoder block; its own hc_head and norm; the shared head.
        """
        if position != self.next_position - 1:
            raise ValueError(f"mtp_step follows step at the same position ({self.next_position - 1}), got {position}")
        w, eps, n = self.w, self.cfg.rms_norm_eps, self.cfg.num_hidden_layers
        e = self._gemm(_rmsnorm(w["embed.weight"][next_token].to(BF16), w["mtp.0.enorm.weight"], eps), "mtp.0.e_proj")
        streams = torch.stack([e + self._gemm(_rmsnorm(h, w["mtp.0.hnorm.weight"], eps), "mtp.0.h_proj")
                               for h in self.streams])
        streams = self._block(streams, n, position, next_token)
        return self._logits(streams, "mtp.0.", "mtp.0.norm.weight")
