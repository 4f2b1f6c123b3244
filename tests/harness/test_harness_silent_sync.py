"""GD102: which non-blocking host/GPU copies block the CPU, decided from the tensors' layout and pinning."""

from __future__ import annotations

import torch

from graphready.harness.checks.syncs.silent_sync import (
    Side,
    SilentCopyWatch,
    contiguous_strides,
    copy_reason,
    silent_sync_message,
    silent_sync_reason,
)

F32 = torch.float32


def side(device: str, shape=(4, 2), strides=None, dtype=F32, pinned=False) -> Side:
    return Side(device, tuple(shape), tuple(strides or contiguous_strides(tuple(shape))), dtype, pinned)


def test_layouts():
    assert side("cpu").contiguous and side("cpu").dense
    transposed = side("cpu", (2, 4), (1, 2))
    assert not transposed.contiguous and transposed.dense
    column = side("cpu", (4,), (2,))
    assert not column.contiguous and not column.dense
    assert side("cpu", (1, 4), (99, 1)).contiguous  # size-1 dims have any stride


def test_host_to_gpu_from_pageable_memory_blocks():
    assert "pageable" in silent_sync_reason(side("cpu"), side("cuda"))
    assert silent_sync_reason(side("cpu", pinned=True), side("cuda")) is None


def test_host_to_gpu_from_a_strided_or_broadcast_pinned_tensor_is_staged_through_pageable_memory():
    column = side("cpu", (4,), (2,), pinned=True)
    assert "not contiguous" in silent_sync_reason(column, side("cuda", (4,)))
    row = side("cpu", (1, 2), pinned=True)
    assert "not contiguous" in silent_sync_reason(row, side("cuda", (4, 2)))


def test_same_layout_and_dtype_copies_directly_and_conversions_keep_the_pinned_source():
    transposed = side("cpu", (2, 4), (1, 2), pinned=True)
    assert silent_sync_reason(transposed, side("cuda", (2, 4), (1, 2))) is None  # one memcpy of the dense block
    assert silent_sync_reason(side("cpu", pinned=True), side("cuda", dtype=torch.bfloat16)) is None


def test_gpu_to_host_into_pageable_or_strided_memory_blocks():
    assert "pageable" in silent_sync_reason(side("cuda"), side("cpu"))
    assert silent_sync_reason(side("cuda"), side("cpu", pinned=True)) is None
    strided_dst = side("cpu", (4,), (2,), pinned=True)
    assert "not contiguous" in silent_sync_reason(side("cuda", (4,)), strided_dst)


def test_copies_that_do_not_cross_the_host_boundary_are_not_its_business():
    assert silent_sync_reason(side("cpu"), side("cpu")) is None
    assert silent_sync_reason(side("cuda"), side("cuda")) is None


def test_dispatched_to_copy_reads_device_and_non_blocking_from_its_arguments():
    host = torch.ones(8)
    assert "pageable" in copy_reason("_to_copy", (host,), {"device": torch.device("cuda"), "non_blocking": True})
    assert copy_reason("_to_copy", (host,), {"device": torch.device("cuda")}) is None  # blocking: GD101's business
    assert copy_reason("_to_copy", (host,), {"dtype": torch.float16, "non_blocking": True}) is None  # no device change
    assert copy_reason("add", (host, host), {}) is None


def test_the_watch_runs_every_op_unchanged_and_ignores_host_only_copies():
    watch = SilentCopyWatch()
    dst = torch.zeros(4)
    out = watch.run(lambda: dst.copy_(torch.arange(4.0), non_blocking=True) * 2)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0] and watch.found == {}


def test_message_counts_per_step_and_says_how_to_fix():
    text = silent_sync_message(["the host tensor is pageable (not pinned)"] * 2)
    assert "2 times per step" in text and "pinned" in text and "set_sync_debug_mode does not report it" in text
