"""What a graph-ready step derives from its position alone, computed once per step and device.

Every layer of a step sits at the same position, so the RoPE rows, the ring slots, the window's slot list and
mask, and per compress ratio the compressed-entry counts and masks and the compressor's slot arithmetic are
the same for all layers of a ratio. Computed per layer they were ~30 small kernels each; `StepPositions.refresh`
computes them from the device's `pos` into buffers allocated once and written in place (a captured graph keeps
their addresses, and a layer captured in another graph reads them) that every layer on the device reads.
Integer arithmetic and row copies only: each layer reads the values it computed before, bit for bit.
"""

from __future__ import annotations

import torch

from dsv4.config import LAYER_KINDS


class RatioPositions:
    """The step's values for the layers of compress ratio `ratio` (> 0), row t for the step's token t."""

    def __init__(self, ratio: int, steps: int, window: int, ring: int, max_len: int, batch: int, topk: int, device):
        rows = batch * steps
        self.ratio = ratio
        self.csa = LAYER_KINDS[ratio] == "csa"  # the indexer picks among the entries: else all are keys
        self.entries = max_len // ratio  # compressed entries; indexes `entries + t` are token t's scratch rows
        long = dict(dtype=torch.long, device=device)
        self.comp_slots = torch.arange(self.entries, device=device)
        self.count = torch.zeros(steps, **long)  # compressed entries a token sees: (pos + 1) // ratio
        self.masked = torch.zeros(steps, self.entries, dtype=torch.bool, device=device)  # CSA: slots >= count
        # CSA's key list per token: the window's slots, then the cache slots of the indexer's picks (each CSA layer
        # writes its picks in place, then attends: one buffer serves every CSA layer of the step)
        picks = window + min(topk, self.entries) if self.csa else 0
        self.pick_slots = torch.zeros(steps, batch, picks, **long)
        self.pick_valid = torch.zeros(steps, batch, picks, dtype=torch.bool, device=device)
        # HCA's key list: the window's slots, then every compressed entry's cache slot (constant part)
        self.key_slots = torch.zeros(steps, 1, window + self.entries, **long)
        self.key_slots[:, 0, window:] = self.comp_slots + ring
        self.key_valid = torch.zeros(steps, 1, window + self.entries, dtype=torch.bool, device=device)
        # the compressor: phase in the window, CSA's half and state slot, and the entry it commits
        self.phase = torch.zeros(steps, **long)
        self.half = torch.zeros(steps, **long)
        self.slot = torch.zeros(steps, **long)
        self.target = torch.zeros(steps, **long)  # the entry a closing window commits, else the token's scratch row
        self.scratch = torch.arange(self.entries, self.entries + steps, device=device)
        self.start = torch.zeros(rows, **long)  # per row of the step: its window's first position (its RoPE row)

    def refresh(self, at: torch.Tensor, row_pos: torch.Tensor, window: int, order: torch.Tensor,
                valid_window: torch.Tensor, rope: torch.Tensor, start_rows: torch.Tensor) -> None:
        m = self.ratio
        torch.div(at + 1, m, rounding_mode="floor", out=self.count)
        if self.csa:
            torch.ge(self.comp_slots, self.count.unsqueeze(1), out=self.masked)
            self.pick_slots[:, :, :window] = order.unsqueeze(1)
            self.pick_valid[:, :, :window] = valid_window
        else:
            self.key_slots[:, 0, :window] = order
            self.key_valid[:, 0, :window] = valid_window[:, 0]
            torch.lt(self.comp_slots, self.count.unsqueeze(1), out=self.key_valid[:, 0, window:])
        torch.remainder(at, m, out=self.phase)
        entry = torch.div(at, m, rounding_mode="floor")
        if self.csa:  # read by the torch form of the state write only (the fused one takes the position)
            torch.remainder(entry, 2, out=self.half)
            torch.add(self.phase, self.half * m, out=self.slot)
        torch.where(self.phase == m - 1, entry.clamp(max=self.entries - 1), self.scratch, out=self.target)
        torch.clamp(row_pos + (1 - m), min=0, out=self.start)
        torch.index_select(rope, 0, self.start, out=start_rows)


class StepPositions:
    """The per-step position values of one device's graph-ready layers, from its `pos` ([1] int64)."""

    def __init__(self, ctx, pos: torch.Tensor):
        cfg = ctx.config
        device = ctx.device
        self.pos = pos
        self.steps = ctx.tokens_per_step
        self.window = cfg.sliding_window
        self.ring = self.window + self.steps - 1
        self.max_len = ctx.max_len
        self.batch, self.topk = ctx.batch, cfg.index_topk
        self.row_offsets = ctx.row_offsets
        self.rope = {False: ctx.rope_window, True: ctx.rope_compressed}
        self.rope_rows: dict[bool, torch.Tensor] = {}  # compressed? -> this step's cos/sin rows [rows, rope_dim]
        self.ratios: dict[int, RatioPositions] = {}
        self.start_rows: dict[int, torch.Tensor] = {}  # ratio -> per row, the RoPE row of its window's first position
        long = dict(dtype=torch.long, device=device)
        self.offsets = torch.arange(self.steps, device=device)
        self.window_slots = torch.arange(self.window, device=device)
        self.row_pos = torch.zeros(ctx.rows, **long)
        self.at = torch.zeros(self.steps, **long)  # token t's position: pos + t
        self.kv_slot = torch.zeros(self.steps, **long)  # its ring slot
        self.order = torch.zeros(self.steps, self.window, **long)  # the window's slots, oldest first
        self.valid_window = torch.zeros(self.steps, 1, self.window, dtype=torch.bool, device=device)

    def use(self, ratio: int) -> RatioPositions | None:
        """Register a layer of compress ratio `ratio` (at build time); its ratio's values, None for window layers."""
        rope = self.rope[bool(ratio)]
        self.rope_rows.setdefault(bool(ratio), rope.new_zeros(len(self.row_pos), *rope.shape[1:]))
        if not ratio:
            return None
        if ratio not in self.ratios:
            self.ratios[ratio] = RatioPositions(ratio, self.steps, self.window, self.ring, self.max_len, self.batch,
                                                 self.topk, rope.device)
            self.start_rows[ratio] = rope.new_zeros(len(self.row_pos), *rope.shape[1:])
        return self.ratios[ratio]

    def refresh(self) -> None:  # graphready: hot
        """Compute this step's values from `pos` (inside the captured step, before the device's first layer)."""
        torch.add(self.pos, self.row_offsets, out=self.row_pos)
        for compressed, rows in self.rope_rows.items():
            torch.index_select(self.rope[compressed], 0, self.row_pos, out=rows)
        torch.add(self.pos, self.offsets, out=self.at)
        torch.remainder(self.at, self.ring, out=self.kv_slot)
        # before the window fills slot i holds position i; after, the oldest entry (at - W + 1) leads
        start = torch.where(self.at >= self.window - 1, self.at - (self.window - 1), 0)
        torch.remainder(self.window_slots + start.unsqueeze(1), self.ring, out=self.order)
        torch.le(self.window_slots, self.at.unsqueeze(1), out=self.valid_window.view(self.steps, self.window))
        for ratio, values in self.ratios.items():
            values.refresh(self.at, self.row_pos, self.window, self.order, self.valid_window, self.rope[True],
                           self.start_rows[ratio])
