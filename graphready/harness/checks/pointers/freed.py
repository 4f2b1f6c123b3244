"""GD304 freed-input: the graph reads memory that nobody owns any more.

After capture the harness holds only the graph (and its pool), the static inputs, the state and
the outputs. It fills every free block of the regular caching-allocator pool with 0xFF (NaN for
floats) and replays again: a replay that changes read memory that was freed after capture.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from graphready.harness.frames import Location
from graphready.harness.tracer import OpRecord

_DEFAULT_POOL = (0, 0)
SMALL_REQUEST_LIMIT = 1 << 20  # the caching allocator serves requests up to 1 MiB from its small pool


def free_blocks(device: torch.device) -> list[tuple[int, int, int, bool]]:
    """(address, size, stream, in a small-pool segment) of each free block in the regular pool of `device`."""
    blocks = []
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device") != device.index:
            continue
        if tuple(segment.get("segment_pool_id", _DEFAULT_POOL)) != _DEFAULT_POOL:
            continue  # a graph's private pool: owned by the graph
        for block in segment.get("blocks", []):
            if block.get("state") == "inactive":
                small = segment.get("segment_type") == "small"
                blocks.append((block["address"], block["size"], segment.get("stream", 0), small))
    return blocks


def overwrite_free_blocks(device: torch.device) -> int:
    """Fill every free regular-pool block with 0xFF bytes, then free them again. Returns bytes written.

    The caching allocator reuses a free block only for the stream it was freed on, so each block
    is claimed from its own stream; small-pool blocks are claimed in requests the small pool serves.
    """
    by_stream: dict[int, list[int]] = defaultdict(list)
    for _, size, stream, small in free_blocks(device):
        while small and size > SMALL_REQUEST_LIMIT:
            by_stream[stream].append(SMALL_REQUEST_LIMIT)
            size -= SMALL_REQUEST_LIMIT
        by_stream[stream].append(size)
    fills: list[torch.Tensor] = []
    written = 0
    for stream_handle, sizes in by_stream.items():
        stream = (
            torch.cuda.ExternalStream(stream_handle, device=device)
            if stream_handle
            else torch.cuda.default_stream(device)
        )
        with torch.cuda.stream(stream):
            for size in sorted(sizes, reverse=True):
                fill = torch.empty(size, dtype=torch.uint8, device=device)
                fill.fill_(0xFF)
                fills.append(fill)
                written += size
        stream.synchronize()
    del fills
    return written


def freed_reads(records: list[OpRecord], blocks: list[tuple[int, int, int, bool]]) -> OpRecord | None:
    """The first captured op that read from a block that is free now."""
    for record in records:
        for address, nbytes in record.reads:
            for start, size, _, _ in blocks:
                if address < start + size and start < address + max(nbytes, 1):
                    return record
    return None


def freed_message(location: Location | None, difference: str) -> str:
    text = (
        "replay changes after the harness overwrites freed memory: the graph reads a buffer that was "
        f"freed after capture ({difference})"
    )
    if location is None:
        return text + "; keep every tensor the graph reads alive (store it on self) for the graph's lifetime"
    return text + "; the tensor this line reads must stay alive (store it on self) for the graph's lifetime"
