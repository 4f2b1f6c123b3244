"""Placing the model over N devices: which layers go where, what each device needs before loading."""

from __future__ import annotations

import torch

from dsv4.config import preset
from dsv4.memory import RESERVE_BYTES, memory_needed, shortfalls
from dsv4.placement import layer_placement, load_placed_weights
from dsv4.synth import estimate_bytes, synthetic_weights


def test_layers_split_in_order_like_the_model_places_them(tiny):
    devices = [torch.device("cuda", i) for i in range(4)]
    placement = layer_placement(tiny, devices)
    assert [placement[d] for d in devices] == [[0, 1], [2], [3, 4], [5]]
    assert layer_placement(preset("pro"), [torch.device("cuda", i) for i in range(8)])[devices[0]] == list(range(8))


def test_placed_weights_are_the_synthetic_weights(tiny, assert_same_weights):
    assert_same_weights(load_placed_weights(tiny, [torch.device("cpu")], seed=4), synthetic_weights(tiny, seed=4))


def test_placed_checkpoint_weights_are_the_checkpoint(nvfp4_ckpt, tiny, assert_same_weights):
    placed = load_placed_weights(tiny, [torch.device("cpu")], checkpoint=str(nvfp4_ckpt))
    assert_same_weights(placed, synthetic_weights(tiny, "nvfp4", seed=1))


def test_memory_need_adds_up_to_the_checkpoint_size_plus_copies(tiny):
    needs = memory_needed(tiny, 2)
    with_mtp = memory_needed(tiny, 2, mtp=True)
    assert sum(n.weights for n in with_mtp) == estimate_bytes(tiny, "nvfp4")  # the checkpoint holds the MTP layer
    assert with_mtp[0] == needs[0] and with_mtp[1].weights > needs[1].weights  # which sits on the last device
    assert with_mtp[1].copies > needs[1].copies
    assert [n.layers for n in needs] == [(0, 1, 2), (3, 4, 5)]
    assert needs[1].copies > 2 * tiny.vocab_size * tiny.hidden_size  # the bf16 head lives on the last device
    assert all(n.total == n.weights + n.copies + RESERVE_BYTES for n in needs)


def test_a_checkpoint_is_measured_from_its_shard_headers(nvfp4_ckpt, tiny):
    for mtp in (False, True):
        from_headers = memory_needed(tiny, 2, checkpoint=str(nvfp4_ckpt), mtp=mtp)
        assert [n.weights for n in from_headers] == [n.weights for n in memory_needed(tiny, 2, fmt="nvfp4", mtp=mtp)]


def test_flash_fits_two_h200s_but_not_one_h100():
    flash = preset("flash")
    h200, h100 = 141 * 10**9, 80 * 10**9
    assert shortfalls(memory_needed(flash, 2), [h200, h200]) == []
    [line] = shortfalls(memory_needed(flash, 1), [h100])
    assert line.startswith("cuda:0 needs 181.") and "but has 80.0 GB free" in line  # incl. the bf16 copies
