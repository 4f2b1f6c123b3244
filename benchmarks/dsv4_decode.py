"""Decode speed of dsv4 on one or N GPUs: eager vs each CUDA-graph mode, and the HBM bandwidth it reaches.

    python benchmarks/dsv4_decode.py --preset pro-4L [--steps 64] [--max-len 1024] [--dense resident|streamed|both]
    python benchmarks/dsv4_decode.py --preset flash --gpus 2 --runs full

Weights are synthetic NVFP4 (experts NVFP4, attention FP8) drawn on the GPUs, placed as `python -m
dsv4.generate --gpus N` places them (layer i on GPU i*N//L). For each run the model is reset, a 3-token
prompt is prefilled, a few warm-up steps are decoded, then `--steps` timed steps. Bandwidth = weight bytes
one step reads (dense weights as stored for the run, the 6 selected experts per layer in NVFP4, the fp32
head) / time per token / peak HBM bandwidth of one device: the GPUs run their layers one after the other,
so one GPU's peak is the bound. Kernels per layer come from one profiled step without graphs.

With full graphs each GPU runs one graph per step; below that row one line per GPU gives its graph replayed
alone, its share of the weight bytes and its own roofline, and its kernels per layer; then the hop: the step's
time less the GPUs' own, per hand-over (residual-stream copy, cross-GPU event wait, launch gaps), next to
the copy alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import dataclass

import torch

from dsv4.config import ConfigError, preset
from dsv4.graphs import MODES, GraphDecoder
from dsv4.memory import memory_needed, shortfalls
from dsv4.model import DSV4Model
from dsv4.placement import load_placed_weights

PEAK_BANDWIDTH = {"H100": 3.35e12, "H200": 4.8e12, "B200": 8.0e12, "A100": 2.0e12}  # bytes/s, SXM parts
PROMPT = (0, 5, 7)
WARMUP = 8
COPIES = ("Memcpy", "Memset")  # profiler events on the GPU that are not kernels
RUNS = {"eager": ("eager", None, False), "nograph": ("graph-ready, no graphs", "full", False)}
RUNS.update({m: (f"{m} graphs", m, True) for m in MODES})


class BenchError(Exception):
    """Bad arguments or a machine that cannot run the benchmark; printed without a traceback (exit 2)."""


@dataclass
class GpuSplit:
    """One GPU's part of a full-graph step: its layers, its graph replayed alone, the weights it reads."""

    device: str
    layers: list[int]
    graph_s: float
    weight_bytes: int
    kernels: int | None


def peak_bandwidth(override_gbps: float | None) -> float:
    if override_gbps:
        return override_gbps * 1e9
    name = torch.cuda.get_device_name(0)
    for key, value in PEAK_BANDWIDTH.items():
        if key in name:
            return value
    raise BenchError(f"unknown peak bandwidth for {name!r}; pass --peak-gbps")


def pick_devices(gpus: int, available: int) -> list[torch.device]:
    if gpus < 1:
        raise BenchError(f"--gpus must be >= 1, got {gpus}")
    if not available:
        raise BenchError("the benchmark needs a CUDA GPU")
    if gpus > available:
        raise BenchError(f"--gpus {gpus} requested but only {available} CUDA GPU(s) visible")
    return [torch.device("cuda", i) for i in range(gpus)]


def time_eager(model: DSV4Model, steps: int) -> float:
    model.reset()
    token = PROMPT[0]
    for pos in range(len(PROMPT) + WARMUP + steps):
        if pos == len(PROMPT) + WARMUP:
            torch.cuda.synchronize()
            start = time.perf_counter()
        logits = model.step([token], pos)
        token = PROMPT[pos + 1] if pos + 1 < len(PROMPT) else int(logits[0].argmax())
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def _timed(plan, run, repeats: int) -> float:
    """Seconds per call of `run`, queued `repeats` times back to back on the plan's stream."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(plan.stream):
        start.record(plan.stream)
        for _ in range(repeats):
            run()
        end.record(plan.stream)
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def time_parts(decoder: GraphDecoder, repeats: int) -> tuple[list[float], float]:
    """(each device's full-step graph replayed alone, seconds; the residual-stream copy between two devices alone).
    Run after the timed steps: the replays write the caches at the last position again."""
    model = decoder.model
    decoder.synchronize()
    graphs = [_timed(plan, plan.segments[0].graph.replay, repeats) for plan in decoder.plans]
    copy = 0.0
    if len(decoder.plans) > 1:
        second = decoder.plans[1]
        copy = _timed(second, lambda: model.transfer(second.previous, second.device), repeats)
    return graphs, copy


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """Microseconds covered by at least one of the (start, end) intervals."""
    busy, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return busy


def graph_kernel_lines(decoder: GraphDecoder, rows: int) -> list[str]:
    """Each device's full-step graph replayed once under the profiler: its span, the time some kernel ran (the
    rest is launch gaps and dependency waits), and its kernels by total time."""
    from torch.profiler import ProfilerActivity, profile

    decoder.synchronize()
    lines = []
    for plan in decoder.plans:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            with torch.cuda.stream(plan.stream):
                plan.segments[0].graph.replay()
            plan.stream.synchronize()
        kernels = [e for e in prof.events()
                   if e.device_type.name == "CUDA" and not e.name.startswith(COPIES)]
        if not kernels:
            lines.append(f"  {plan.device}: the profiler recorded no kernel of the graph")
            continue
        intervals = [(e.time_range.start, e.time_range.end) for e in kernels]
        span = max(end for _, end in intervals) - min(start for start, _ in intervals)
        busy = busy_us(intervals)
        layers = max(sum(d == plan.device for d in decoder.model.layer_devices), 1)
        lines.append(f"  {plan.device}: {len(kernels)} kernels, span {span:.0f} us, some kernel running {busy:.0f} us "
                     f"({100 * busy / span:.0f}%); per layer {len(kernels) / layers:.1f} kernels, "
                     f"{span / layers:.1f} us")
        totals: dict[str, list[float]] = {}
        for e in kernels:
            entry = totals.setdefault(e.name, [0, 0.0])
            entry[0] += 1
            entry[1] += e.time_range.end - e.time_range.start
        for name, (count, total) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:rows]:
            lines.append(f"    {total:8.0f} us {100 * total / span:5.1f}%  {count:4d}x {total / count:7.2f} us  "
                         f"{name[:70]}")
    return lines


def time_decoder(model: DSV4Model, mode: str, steps: int, use_graphs: bool,
                 profile_rows: int = 0) -> tuple[float, int, tuple | None]:
    """(seconds per token, graphs captured, `time_parts` for a full-graph run); `profile_rows` > 0 also prints
    the kernels inside each device's graph."""
    decoder = GraphDecoder(model, mode, use_graphs=use_graphs)
    decoder.capture()
    for pos, token in enumerate(PROMPT):
        decoder.step([token], pos)
    for pos in range(len(PROMPT), len(PROMPT) + WARMUP + steps):
        if pos == len(PROMPT) + WARMUP:
            decoder.synchronize()
            start = time.perf_counter()
        decoder.step_greedy(pos)
    decoder.synchronize()
    seconds = (time.perf_counter() - start) / steps
    count = decoder.capture_count
    parts = time_parts(decoder, steps) if use_graphs and mode == "full" else None
    if parts is not None and profile_rows:
        print("\n".join(graph_kernel_lines(decoder, profile_rows)), flush=True)
    del decoder
    gc.collect()
    torch.cuda.empty_cache()
    return seconds, count, parts


def count_kernels(model: DSV4Model, table_rows: int = 0) -> dict[int, int]:
    """CUDA kernels of one graph-ready step without graphs, per GPU index; `table_rows` > 0 also prints the
    top kernels by total time."""
    from torch.profiler import ProfilerActivity, profile

    decoder = GraphDecoder(model, "full", use_graphs=False)
    decoder.capture()  # warm-up steps, then a reset
    decoder.step([PROMPT[0]], 0)
    decoder.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        decoder.step([PROMPT[0]], 0)
        decoder.synchronize()
    model.reset()
    if table_rows:
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=table_rows), flush=True)
    counts: dict[int, int] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA" and not e.name.startswith(COPIES):
            counts[e.device_index] = counts.get(e.device_index, 0) + 1
    return counts


def gpu_splits(model: DSV4Model, graphs: list[float], kernels: dict[int, int]) -> list[GpuSplit]:
    by_device = model.weight_bytes_by_device
    return [GpuSplit(str(d), [i for i, ld in enumerate(model.layer_devices) if ld == d], seconds, by_device[d],
                     kernels.get(d.index)) for d, seconds in zip(model.devices, graphs)]


def per_layer(kernels: int | None, layers: int) -> str:
    return f"{kernels / layers:.0f} kernels/layer" if kernels is not None and layers else "kernels n/a"


def split_lines(splits: list[GpuSplit], step_s: float, copy_s: float, peak: float) -> list[str]:
    """One line per GPU (graph alone, weights, roofline, kernels per layer), then the hop per hand-over."""
    lines = []
    for s in splits:
        span = f"layers {s.layers[0]}-{s.layers[-1]}" if s.layers else "no layers"
        roofline = s.weight_bytes / peak
        lines.append(f"  {s.device:8s} {span:14s} graph {s.graph_s * 1e3:8.3f} ms  {s.weight_bytes / 1e9:6.2f} GB/token  "
                     f"roofline {roofline * 1e3:.3f} ms ({100 * roofline / s.graph_s:5.1f}% of peak)  "
                     f"{per_layer(s.kernels, len(s.layers))}")
    hops = len(splits) - 1
    if hops:
        hop = (step_s - sum(s.graph_s for s in splits)) / hops
        lines.append(f"  hop      step - GPUs' graphs = {hop * 1e3:.3f} ms per hand-over ({hops}); "
                     f"stream copy alone {copy_s * 1e6:.1f} us")
    return lines


def bench(model: DSV4Model, label: str, steps: int, peak: float, runs: list[str], kernels: dict[int, int],
          profile_rows: int = 0) -> list[dict]:
    nbytes = model.weight_bytes_per_token
    total_kernels = sum(kernels.values()) if kernels else None
    layers = model.config.num_hidden_layers
    rows = []
    for name, mode, graphs in (RUNS[r] for r in runs):
        parts = None
        if mode is None:
            seconds, count = time_eager(model, steps), 0
        else:
            seconds, count, parts = time_decoder(model, mode, steps, graphs, profile_rows)
        row = {"dense": label, "run": name, "graphs": count, "ms_per_token": seconds * 1e3,
               "weight_gb_per_token": nbytes / 1e9, "hbm_fraction": nbytes / seconds / peak,
               "kernels_per_layer": None if total_kernels is None else total_kernels / layers}
        print(f"{label:9s} {name:24s} {seconds * 1e3:9.3f} ms/token  {nbytes / seconds / 1e9:8.1f} GB/s  "
              f"{100 * nbytes / seconds / peak:5.1f}% of peak  roofline {nbytes / peak * 1e3:.3f} ms  ({count} graphs, "
              f"{per_layer(total_kernels, layers)})", flush=True)
        if parts is not None and len(model.devices) > 1:
            splits = gpu_splits(model, parts[0], kernels)
            for line in split_lines(splits, seconds, parts[1], peak):
                print(line, flush=True)
            row["gpus"] = [{"device": s.device, "layers": len(s.layers), "graph_ms": s.graph_s * 1e3,
                            "weight_gb": s.weight_bytes / 1e9, "roofline_ms": s.weight_bytes / peak * 1e3,
                            "kernels": s.kernels} for s in splits]
            row["hop_ms"] = (seconds - sum(parts[0])) / (len(splits) - 1) * 1e3
            row["copy_us"] = parts[1] * 1e6
        rows.append(row)
    return rows


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="pro-4L")
    p.add_argument("--gpus", type=int, default=1, help="spread the layers over this many GPUs (default 1)")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--dense", choices=("resident", "streamed", "both"), default="resident",
                   help="dense linears as resident bf16 copies, dequantized from FP8 per call, or both")
    p.add_argument("--peak-gbps", type=float, help="peak HBM bandwidth in GB/s (default: from the device name)")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated subset of {','.join(RUNS)}")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--profile", action="store_true", help="print the top CUDA kernels of one step first, and of each GPU's full graph")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    """The arguments with `runs` as a list and `config` as the preset's; BenchError for what argparse lets by."""
    args = build_parser().parse_args(argv)
    args.runs = [r for r in args.runs.split(",") if r]
    unknown = [r for r in args.runs if r not in RUNS]
    if unknown or not args.runs:
        raise BenchError(f"unknown run(s) {unknown}; choose from {', '.join(RUNS)}")
    if args.steps < 1:
        raise BenchError(f"--steps must be >= 1, got {args.steps}")
    if args.gpus < 1:
        raise BenchError(f"--gpus must be >= 1, got {args.gpus}")
    try:
        args.config = preset(args.preset)
    except ConfigError as e:
        raise BenchError(str(e)) from None
    if args.gpus > args.config.num_hidden_layers:
        raise BenchError(f"--gpus {args.gpus} exceeds the preset's {args.config.num_hidden_layers} layers")
    return args


def check_memory(config, devices: list[torch.device]) -> None:
    """Refuse, before drawing any weight, a preset the GPUs cannot hold."""
    short = shortfalls(memory_needed(config, len(devices)), [torch.cuda.mem_get_info(d)[0] for d in devices])
    if short:
        raise BenchError("the model does not fit: " + "; ".join(short) + ". Use more GPUs (--gpus N) or a smaller preset.")


def run(args) -> list[dict]:
    devices = pick_devices(args.gpus, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    peak = peak_bandwidth(args.peak_gbps)
    check_memory(args.config, devices)
    start = time.perf_counter()
    weights = load_placed_weights(args.config, devices)
    print(f"{args.preset}: synthetic weights in {time.perf_counter() - start:.1f} s on {len(devices)}x "
          f"{torch.cuda.get_device_name(0)}; max_len {args.max_len}, {args.steps} timed steps, "
          f"peak {peak / 1e12:.2f} TB/s per GPU", flush=True)
    rows = []
    labels = ["resident", "streamed"] if args.dense == "both" else [args.dense]
    for label in labels:
        model = DSV4Model(args.config, weights, devices, max_len=args.max_len, resident=label == "resident")
        kernels = count_kernels(model, table_rows=15 if args.profile else 0)
        rows += bench(model, label, args.steps, peak, args.runs, kernels, 25 if args.profile else 0)
        del model
        gc.collect()
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
        rows = run(args)
    except (BenchError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    eager = {r["dense"]: r["ms_per_token"] for r in rows if r["run"] == "eager"}
    for r in rows:
        if r["dense"] in eager:
            r["speedup_vs_eager"] = eager[r["dense"]] / r["ms_per_token"]
    best = min(rows, key=lambda r: r["ms_per_token"])
    speedup = f"{best['speedup_vs_eager']:.2f}x eager, " if "speedup_vs_eager" in best else ""
    print(f"best: {best['dense']} {best['run']}: {best['ms_per_token']:.3f} ms/token, {speedup}"
          f"{100 * best['hbm_fraction']:.1f}% of peak HBM bandwidth")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
