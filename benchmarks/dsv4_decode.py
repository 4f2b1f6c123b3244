"""Decode speed of dsv4 on one GPU: eager vs each CUDA-graph mode, and the HBM bandwidth it reaches.

    python benchmarks/dsv4_decode.py --preset pro-4L [--steps 64] [--max-len 1024] [--dense resident|streamed|both]

Weights are synthetic NVFP4 (experts NVFP4, attention FP8) built on the GPU. For each run the model is
reset, a 3-token prompt is prefilled, a few warm-up steps are decoded, then `--steps` timed steps.
Bandwidth = weight bytes one step reads (dense weights as stored for the run, the 6 selected experts per
layer in NVFP4, the fp32 head) / time per token / peak HBM bandwidth of the device.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import torch

from dsv4.config import preset
from dsv4.graphs import MODES, GraphDecoder
from dsv4.model import DSV4Model
from dsv4.synth import synthetic_weights

PEAK_BANDWIDTH = {"H100": 3.35e12, "H200": 4.8e12, "B200": 8.0e12, "A100": 2.0e12}  # bytes/s, SXM parts
PROMPT = (0, 5, 7)
WARMUP = 8


def peak_bandwidth(override_gbps: float | None) -> float:
    if override_gbps:
        return override_gbps * 1e9
    name = torch.cuda.get_device_name(0)
    for key, value in PEAK_BANDWIDTH.items():
        if key in name:
            return value
    raise SystemExit(f"unknown peak bandwidth for {name!r}; pass --peak-gbps")


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


def time_decoder(model: DSV4Model, mode: str, steps: int, use_graphs: bool) -> tuple[float, int]:
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
    del decoder
    gc.collect()
    torch.cuda.empty_cache()
    return seconds, count


def profile_step(model: DSV4Model, rows: int = 15) -> None:
    """Print the CUDA kernels of one graph-ready step (no graphs) by total time."""
    from torch.profiler import ProfilerActivity, profile

    model.reset()
    model.load_inputs([PROMPT[0]], 0)
    model.step_graphable()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        model.step_graphable()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows), flush=True)
    kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA" and not e.name.startswith("Memcpy")
                  and not e.name.startswith("Memset"))
    layers = model.config.num_hidden_layers
    print(f"kernels per step: {kernels} ({kernels / layers:.0f} per layer over {layers} layers, head included)",
          flush=True)


RUNS = {"eager": ("eager", None, False), "nograph": ("graph-ready, no graphs", "full", False)}
RUNS.update({m: (f"{m} graphs", m, True) for m in MODES})


def bench(model: DSV4Model, label: str, steps: int, peak: float, runs: list[str]) -> list[dict]:
    nbytes = model.weight_bytes_per_token
    rows = []
    for name, mode, graphs in (RUNS[r] for r in runs):
        if mode is None:
            seconds, count = time_eager(model, steps), 0
        else:
            seconds, count = time_decoder(model, mode, steps, graphs)
        rows.append({"dense": label, "run": name, "graphs": count, "ms_per_token": seconds * 1e3,
                     "weight_gb_per_token": nbytes / 1e9, "hbm_fraction": nbytes / seconds / peak})
        print(f"{label:9s} {name:24s} {seconds * 1e3:9.3f} ms/token  {nbytes / seconds / 1e9:8.1f} GB/s  "
              f"{100 * nbytes / seconds / peak:5.1f}% of peak  roofline {nbytes / peak * 1e3:.3f} ms  ({count} graphs)",
              flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="pro-4L")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--dense", choices=("resident", "streamed", "both"), default="resident",
                   help="dense linears as resident bf16 copies, dequantized from FP8 per call, or both")
    p.add_argument("--peak-gbps", type=float, help="peak HBM bandwidth in GB/s (default: from the device name)")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated subset of {','.join(RUNS)}")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--profile", action="store_true", help="print the top CUDA kernels of one step first")
    args = p.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    unknown = [r for r in runs if r not in RUNS]
    if unknown or not runs:
        print(f"error: unknown run(s) {unknown}; choose from {', '.join(RUNS)}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: the benchmark needs a CUDA GPU", file=sys.stderr)
        return 2
    peak = peak_bandwidth(args.peak_gbps)
    config = preset(args.preset)
    start = time.perf_counter()
    weights = synthetic_weights(config, "nvfp4", device="cuda:0", seed=0)
    print(f"{args.preset}: synthetic weights in {time.perf_counter() - start:.1f} s on {torch.cuda.get_device_name(0)}; "
          f"max_len {args.max_len}, {args.steps} timed steps, peak {peak / 1e12:.2f} TB/s", flush=True)
    rows = []
    labels = ["resident", "streamed"] if args.dense == "both" else [args.dense]
    for label in labels:
        model = DSV4Model(config, weights, ["cuda:0"], max_len=args.max_len, resident=label == "resident")
        if args.profile:
            profile_step(model)
        rows += bench(model, label, args.steps, peak, runs)
        del model
        gc.collect()
        torch.cuda.empty_cache()
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
