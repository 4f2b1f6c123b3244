"""benchmarks/dsv4_decode.py on the CPU: its arguments, the GPUs it asks for, each GPU's share of a step."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from dsv4_decode_helpers import one_thread  # noqa: F401

from dsv4.model import DSV4Model
from dsv4.placement import load_placed_weights


@pytest.fixture(scope="module")
def bench():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "dsv4_decode.py"
    spec = importlib.util.spec_from_file_location("dsv4_decode", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_arguments_give_the_runs_and_the_preset(bench):
    args = bench.parse_args(["--preset", "flash", "--gpus", "2", "--runs", "full,eager"])
    assert args.runs == ["full", "eager"] and args.gpus == 2 and args.config.num_hidden_layers == 43
    assert bench.parse_args([]).runs == list(bench.RUNS) and bench.parse_args([]).gpus == 1


@pytest.mark.parametrize("argv, message", [
    (["--runs", "full,fast"], "unknown run(s) ['fast']"),
    (["--runs", ","], "unknown run(s) []"),
    (["--gpus", "0"], "--gpus must be >= 1"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--preset", "pro-99L"], "unknown preset"),
    (["--preset", "tiny", "--gpus", "7"], "exceeds the preset's 6 layers"),
])
def test_bad_arguments_are_refused_with_a_message(bench, argv, message):
    with pytest.raises(bench.BenchError) as info:
        bench.parse_args(argv)
    assert message in str(info.value)


def test_the_gpus_asked_for_must_be_visible(bench):
    assert bench.pick_devices(2, 8) == [torch.device("cuda", 0), torch.device("cuda", 1)]
    with pytest.raises(bench.BenchError, match="only 1 CUDA GPU"):
        bench.pick_devices(2, 1)
    with pytest.raises(bench.BenchError, match="needs a CUDA GPU"):
        bench.pick_devices(1, 0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message for a machine without a GPU")
def test_main_without_a_gpu_exits_2_with_a_message(bench, capsys):
    assert bench.main(["--preset", "tiny", "--runs", "full"]) == 2
    assert "error: the benchmark needs a CUDA GPU" in capsys.readouterr().err


@pytest.fixture(scope="module")
def two_device_tiny(tiny):
    """tiny placed over two devices (two CPU device indices stand for two GPUs)."""
    devices = [torch.device("cpu", 0), torch.device("cpu", 1)]
    return DSV4Model(tiny, load_placed_weights(tiny, devices), devices, max_len=128)


def test_each_gpu_gets_its_layers_and_its_share_of_the_weight_bytes(bench, two_device_tiny):
    model = two_device_tiny
    splits = bench.gpu_splits(model, [2e-3, 3e-3], {0: 30, 1: 36})
    assert [s.layers for s in splits] == [[0, 1, 2], [3, 4, 5]]
    assert sum(s.weight_bytes for s in splits) == model.weight_bytes_per_token
    head = model.head.numel() * model.head.element_size()
    assert splits[1].weight_bytes > head  # the head is read on the last GPU
    layer_bytes = [sum(model.layers[i].bytes_read for i in s.layers) for s in splits]
    assert splits[0].weight_bytes - layer_bytes[0] == model.embed.shape[1] * model.embed.element_size()


def test_split_lines_show_each_gpu_and_the_hop(bench):
    splits = [bench.GpuSplit("cuda:0", list(range(22)), 4e-3, 9_600_000_000, 2200),
              bench.GpuSplit("cuda:1", list(range(22, 43)), 5e-3, 12_000_000_000, None)]
    lines = bench.split_lines(splits, step_s=9.5e-3, copy_s=12e-6, peak=4.8e12)
    assert lines[0].split() == ["cuda:0", "layers", "0-21", "graph", "4.000", "ms", "9.60", "GB/token", "roofline",
                                "2.000", "ms", "(", "50.0%", "of", "peak)", "100", "kernels/layer"]
    assert "roofline 2.500 ms" in lines[1] and "kernels n/a" in lines[1]
    assert lines[2].split()[:8] == ["hop", "step", "-", "GPUs'", "graphs", "=", "0.500", "ms"]
    assert "stream copy alone 12.0 us" in lines[2]
    assert len(bench.split_lines(splits[:1], 4e-3, 0.0, 4.8e12)) == 1  # one GPU: no hop


def test_busy_time_counts_overlapping_kernels_once(bench):
    # PDL lets a kernel start before the previous one ends: the overlap is busy once, the gap not at all
    assert bench.busy_us([(0, 10), (8, 12), (20, 25)]) == 17
    assert bench.busy_us([(5, 6), (0, 10)]) == 10 and bench.busy_us([]) == 0
