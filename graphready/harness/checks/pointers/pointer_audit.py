"""GD307 unknown-pointer, the pure part: classify every address a captured graph holds.

A graph replays with the addresses it captured. Each address-sized argument of its nodes is looked
up in the caching allocator's memory: a value outside every segment is not a pointer into torch
memory (a size, a stride, a seed, or memory torch does not manage) and is ignored. The rest is the
graph's own pool, or a block held by a static input, a state tensor, an output or a tensor the
unit reaches, or else: a live block nobody the unit knows holds (`unowned`: a library workspace
when no Python tensor holds it, `unknown` when some other Python object does), or a freed block.
Unknown and freed blocks are the findings: whoever owns them next is overwritten or read by
every replay. No torch import: the tests feed it recorded snapshots.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

POOL, PRIVATE_POOL, LIBRARY, UNOWNED, UNKNOWN, FREED = "graph pool", "other pool", "library", "unowned", "unknown", "freed"
FINDING_KINDS = (UNKNOWN, FREED)
DEFAULT_POOL = (0, 0)


@dataclass(frozen=True)
class Span:
    """A storage someone named: [start, end) and what it is ("input", "state", "output", "attribute")."""

    start: int
    end: int
    kind: str
    label: str


@dataclass(frozen=True)
class Block:
    start: int
    size: int
    state: str  # the allocator's block state: active_allocated, active_pending_free, inactive
    pool: tuple[int, int]
    frames: tuple[dict, ...] = field(default=(), compare=False)  # the allocation's stack, innermost first

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def live(self) -> bool:
        return self.state == "active_allocated"


@dataclass(frozen=True)
class Verdict:
    node: int
    node_name: str
    value: int
    kind: str  # POOL, PRIVATE_POOL, an owner's kind, LIBRARY, UNOWNED, UNKNOWN or FREED
    label: str = ""
    block: Block | None = None  # the block the value fell in (None when it matched a span's end)


@dataclass
class Memory:
    """The allocator's blocks, sorted, with a lookup by address."""

    blocks: list[Block]
    _starts: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.blocks.sort(key=lambda b: b.start)
        self._starts = [b.start for b in self.blocks]

    @classmethod
    def from_segments(cls, segments: list[dict[str, Any]]) -> "Memory":
        blocks = []
        for segment in segments:
            pool = tuple(segment.get("segment_pool_id", DEFAULT_POOL))
            for block in segment.get("blocks", []):
                blocks.append(Block(block["address"], block["size"], block.get("state", ""), pool,
                                    tuple(block.get("frames", ()))))
        return cls(blocks)

    def block_at(self, address: int) -> Block | None:
        index = bisect.bisect_right(self._starts, address) - 1
        if index >= 0 and address < self.blocks[index].end:
            return self.blocks[index]
        return None


class Owners:
    """Named storages, looked up by address; a pointer one past a storage's end still belongs to it."""

    def __init__(self, spans: Iterable[Span]):
        unique: dict[tuple[int, int], Span] = {}
        for span in spans:
            if span.end > span.start:
                unique.setdefault((span.start, span.end), span)  # the first name given wins
        self.spans = sorted(unique.values(), key=lambda s: s.start)
        self._starts = [s.start for s in self.spans]

    def owner(self, address: int) -> Span | None:
        index = bisect.bisect_right(self._starts, address) - 1
        if index >= 0 and address <= self.spans[index].end:
            return self.spans[index]
        return None

    def owns_block(self, block: Block) -> Span | None:
        """A named storage inside the block (the block is rounded up past the storage's bytes)."""
        index = bisect.bisect_left(self._starts, block.start)
        if index < len(self.spans) and self.spans[index].start < block.end:
            return self.spans[index]
        return None


def classify(value: int, memory: Memory, owners: Owners, graph_pool: tuple[int, int]) -> tuple[str, str, Block | None] | None:
    """(kind, label, block) for one candidate address; None when it is not in torch's memory."""
    block = memory.block_at(value)
    span = owners.owner(value)
    if span is not None:
        return span.kind, span.label, block if value < span.end else None
    if block is None:
        return None
    if block.pool == graph_pool:
        return POOL, "", block
    if block.pool != DEFAULT_POOL:
        return PRIVATE_POOL, "", block
    if not block.live:
        return FREED, "", block
    span = owners.owns_block(block)
    if span is not None:
        return span.kind, span.label, block
    return UNOWNED, "", block


def audit(nodes: Iterable[Any], memory: Memory, owners: Owners, graph_pool: tuple[int, int]) -> list[Verdict]:
    """A verdict for every address-sized word of `nodes` (graph_params.NodeWords) that is a pointer."""
    verdicts = []
    for node in nodes:
        for _, value in node.words:
            found = classify(value, memory, owners, graph_pool)
            if found is not None:
                kind, label, block = found
                verdicts.append(Verdict(node.index, node.name, value, kind, label, block))
    return verdicts


def resolve_unowned(verdicts: list[Verdict], held_by_python: set[int]) -> list[Verdict]:
    """Unowned blocks become UNKNOWN when a Python tensor holds them (start in `held_by_python`),
    LIBRARY otherwise: memory only C++ holds is a library's workspace (cuBLAS, RNG state)."""
    out = []
    for verdict in verdicts:
        if verdict.kind == UNOWNED:
            kind = UNKNOWN if verdict.block.start in held_by_python else LIBRARY
            verdict = Verdict(verdict.node, verdict.node_name, verdict.value, kind, verdict.label, verdict.block)
        out.append(verdict)
    return out


ATEN_KERNEL_PREFIX = "_ZN2at"  # torch's own kernels (at::native::...): their argument is a functor struct


def is_aten_kernel(node_name: str) -> bool:
    return node_name.startswith(ATEN_KERNEL_PREFIX) or "at::native::" in node_name


def drop_stale_bytes(verdicts: list[Verdict], traced_reads: set[int]) -> tuple[list[Verdict], int]:
    """Drop the UNKNOWN and FREED words of torch's own kernels that point into a block no captured op
    was given (`traced_reads`: storage addresses of the tensors from outside the step that the op tracer
    saw). Such a kernel takes its tensors as one functor struct copied from the host stack, padding and
    unused slots included: a word there can hold an old host value that looks like a pointer (seen on an
    H200: another model's weight in an elementwise kernel's argument, in one run of two). A tensor such a
    kernel really reads reached it through an op the tracer saw. Other kernels (Triton, CuTe DSL, custom
    extensions) are launched outside the dispatcher and keep every word. Returns the verdicts kept and how
    many were dropped."""
    kept, dropped = [], 0
    for verdict in verdicts:
        stale = (
            verdict.kind in FINDING_KINDS and verdict.block is not None and is_aten_kernel(verdict.node_name)
            and not any(verdict.block.start <= address < verdict.block.end for address in traced_reads)
        )
        if stale:
            dropped += 1
        else:
            kept.append(verdict)
    return kept, dropped


def findings_by_block(verdicts: list[Verdict]) -> dict[Block, list[Verdict]]:
    """The UNKNOWN and FREED verdicts grouped by block: one finding per buffer, however many nodes use it."""
    grouped: dict[Block, list[Verdict]] = {}
    for verdict in verdicts:
        if verdict.kind in FINDING_KINDS:
            grouped.setdefault(verdict.block, []).append(verdict)
    return grouped


def summary_note(verdicts: list[Verdict], nodes: int, unreadable: int, stale: int = 0) -> str:
    """One line for the unit's notes: how many pointers of which kind the graph holds."""
    counts = Counter(v.kind for v in verdicts)
    kinds = ", ".join(f"{n} {kind}" for kind, n in counts.most_common())
    text = f"pointer audit: {len(verdicts)} device pointers in {nodes} nodes" + (f" ({kinds})" if kinds else "")
    if unreadable:
        text += f"; {unreadable} kernel nodes' arguments unreadable"
    if stale:
        text += f"; {stale} stale words in torch kernels' argument structs ignored (no captured op was given them)"
    return text


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def finding_message(size: int, verdicts: list[Verdict], where: str | None, holder: str | None = None) -> str:
    """The GD307 text for one buffer of `size` bytes: which nodes use it, what it is, where it came
    from (`where`: the user's line, and the library line inside it), who holds it, the fix."""
    nodes = sorted({(v.node, v.node_name) for v in verdicts})
    used = f"node {nodes[0][0]} ({_short(nodes[0][1])})" + (f" and {len(nodes) - 1} more" if len(nodes) > 1 else "")
    made = f" allocated at {where}" if where else ""
    if verdicts[0].kind == FREED:
        return (
            f"the captured graph holds a pointer into a freed {size}-byte buffer{made}, used by {used}: "
            "every replay reads or writes memory the allocator has handed back, and corrupts whatever is "
            "allocated there next; keep that tensor alive (store it on self) for the graph's lifetime"
        )
    held = f" and held by `{holder}`" if holder else ""
    return (
        f"the captured graph reads a {size}-byte buffer{made}{held} that no input, state or object the unit "
        f"reaches holds, used by {used}: whatever holds it (a cache, a global, a caller's variable) can free "
        "it, and the replay then uses reused memory; store it on the module (self.x) that runs the step"
    )


def freed_later_message(size: int, verdicts: list[Verdict], where: str | None) -> str:
    """The GD307 text for a buffer that was live at capture and was freed by a later step."""
    owner = verdicts[0].label or verdicts[0].kind
    made = f" allocated at {where}" if where else ""
    return (
        f"a {size}-byte buffer{made} ({owner}) that the captured graph uses was freed after capture: "
        "from then on every replay uses memory the allocator hands to someone else; keep that tensor alive "
        "and update it in place instead of replacing it"
    )
