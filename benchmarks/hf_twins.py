"""An independent hand check of `graphready check hf`: twin models, one eager, one replaying a captured graph.

For each architecture, two models are built the same way (the hf target's small config, seed 0, so
the same weights) with a StaticCache each, prefilled with the same prompt (and the same stale values
past it); both run one warm-up step eagerly. Twin B then captures one decode step on static input buffers; twin A does not. Then STEPS
steps: A decodes eagerly, B copies the same inputs (A's greedy tokens, the next position) into its
buffers and replays. Restoring tensors is not what happens here: B's Python-level counters stay as
the capture left them, as in any program that replays a graph, while A's advance. Verdicts:
`capture fails` (the capture raised), `device error` (a replay or a sync raised), `wrong from step
K` (logits differ by more than the hf target's tolerance), `ready` (every step within it), or
`not built` (the target's own reason). Twin A's warm-up step runs under the CUDA runtime trace
(torch.profiler): the runtime calls in it that block the CPU until the GPU drains (a stream or device
synchronize, a synchronous cudaMemcpy) are listed, whatever the capture then says. `--dtype bfloat16`
builds both twins in bf16 (with the hf target's low-precision tolerance): the MoE experts' grouped_mm
takes another path there than in float32. Each architecture runs in a process of its own, since a
failed capture poisons the CUDA context. `--compile` makes twin B the step under
torch.compile(mode="reduce-overhead"), fed the same inputs as twin A every step: the independent check of the
`compiled` units. Needs a GPU and transformers.

    python benchmarks/hf_twins.py --all-architectures --jobs 8 --json twins.json
    python benchmarks/hf_twins.py --model-type llama --model-type mistral
    python benchmarks/hf_twins.py --model-type mixtral --dtype bfloat16 --json twins-bf16.json
    python benchmarks/hf_twins.py --compile --model-type bamba --model-type llama --json twins-compiled.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS = 32
# Runtime calls that return only once the GPU has drained (their _v2 / _ptds variants too).
BLOCKING = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
            "cuCtxSynchronize", "cuStreamSynchronize", "cuMemcpyDtoH")


def _where(exc: BaseException) -> str:
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if "/transformers/" in frame.filename:
            return f"transformers/{frame.filename.rsplit('/transformers/', 1)[1]}:{frame.lineno}"
    return ""


def _said(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:160]}" if lines else type(exc).__name__


def _traced_counts(run) -> dict[str, int]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
    counts: dict[str, int] = {}
    for event in prof.events():
        base = event.name.split("_v2")[0].split("_pt")[0]
        if base in BLOCKING:
            counts[base] = counts.get(base, 0) + 1
    return counts


def blocking_calls(run) -> list[str]:
    """The blocking CUDA runtime calls `run()` makes, with their counts (`cudaStreamSynchronize x2`), less
    those the profiler makes around nothing at all (its own cudaDeviceSynchronize when it stops)."""
    own = _traced_counts(lambda: None)
    counts = {name: n - own.get(name, 0) for name, n in _traced_counts(run).items()}
    return [f"{name} x{n}" for name, n in sorted(counts.items()) if n > 0]


def twins(model_type: str, steps: int = STEPS, dtype: str = "float32", compiled: bool = False) -> dict:
    """The twins' verdict for one architecture (run in a fresh process); `compiled`: twin B is the step under
    torch.compile(mode="reduce-overhead"), called with the same inputs as twin A every step instead of a graph
    captured by hand (the compiler records and replays its own graphs)."""
    import torch

    from graphready.harness.targets.hf import (FLOAT32_TOLERANCE, LOW_PRECISION_TOLERANCE, PROMPT, Architecture,
                                               NotBuilt)
    from graphready.harness.targets.hf_configs import causal_lm_types

    torch.set_default_dtype(getattr(torch, dtype))  # the weights and the caches the twins build
    tolerance = FLOAT32_TOLERANCE if dtype == "float32" else LOW_PRECISION_TOLERANCE
    row = {"architecture": model_type, "dtype": dtype}
    started = time.perf_counter()
    class_name = causal_lm_types()[model_type]
    eager, graphed = (Architecture(model_type, class_name, (1,)) for _ in range(2))
    try:
        eager.build()
        graphed.build()
    except NotBuilt as exc:
        return {**row, "verdict": "not built", "cause": str(exc)}
    device = next(eager.model.parameters()).device
    token = torch.full((eager.rows, 1), 7, device=device)  # one row per codebook where the model decodes several
    position = torch.full((eager.rows, 1), PROMPT, device=device)
    static_token, static_position = token.clone(), position.clone()
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            row["blocking"] = blocking_calls(lambda: eager.step(token, position))
            graphed.step(static_token, static_position)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
    except Exception as exc:
        return {**row, "verdict": "eager fails", "cause": _said(exc), "where": _where(exc)}
    if compiled:
        return {**row, **_compiled_steps(eager, graphed, token, PROMPT + 1, steps, tolerance), "compiled": True,
                "seconds": round(time.perf_counter() - started, 2)}
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            static_logits = graphed.step(static_token, static_position)
    except Exception as exc:
        return {**row, "verdict": "capture fails", "cause": _said(exc), "where": _where(exc)}

    def replay(token_now, position_now):
        static_token.copy_(token_now)
        static_position.copy_(position_now)
        graph.replay()
        return static_logits

    said = _follow_eager(eager, replay, token, PROMPT + 1, steps, tolerance, lambda index: "device error")
    return {**row, **said, "seconds": round(time.perf_counter() - started, 2)}


def _compiled_steps(eager, graphed, token, first_position: int, steps: int, tolerance: float) -> dict:
    """Twin A eager, twin B's step compiled with mode="reduce-overhead", both fed the same token and position
    every step (B's first calls compile and record; later ones replay): verdict and cause."""
    import torch

    step = torch.compile(graphed.step, mode="reduce-overhead")  # compiling, recording or replaying may raise
    return _follow_eager(eager, step, token, first_position, steps, tolerance,
                         lambda index: f"raises at step {index + 1}")


def _follow_eager(eager, twin_step, token, first_position: int, steps: int, tolerance: float, failed) -> dict:
    """Twin A decodes greedily; `twin_step(token, position)` gives twin B's logits for the same inputs every
    step: `wrong from step K` once they leave the tolerance, else `ready`; a step that raises is `failed(index)`
    (the twin's own word for it) with the exception and the transformers line."""
    import torch

    worst = 0.0
    for index in range(steps):
        position = torch.full((eager.rows, 1), first_position + index, device=token.device)
        try:
            expected = eager.step(token.clone(), position.clone())
            got = twin_step(token.clone(), position.clone())
            difference = (got.float() - expected.float()).abs().max().item()
        except Exception as exc:
            return {"verdict": failed(index), "cause": _said(exc), "where": _where(exc)}
        worst = max(worst, difference)
        if difference > tolerance * (1 + expected.abs().max().item()):
            return {"verdict": f"wrong from step {index + 1}", "cause": f"max |diff| {difference:.3g}"}
        token = expected[:, -1].argmax(-1, keepdim=True)
    return {"verdict": "ready", "cause": f"max |diff| {worst:.3g} over {steps} steps"}


def _one(model_type: str, steps: int, dtype: str, compiled: bool = False) -> dict:
    try:
        return twins(model_type, steps, dtype, compiled)
    except Exception as exc:  # anything else the twins raise is this architecture's row, not the run's end
        return {"architecture": model_type, "verdict": "error", "cause": _said(exc), "where": _where(exc)}


def _write(path: Path, rows: list[dict]) -> None:
    """Whole or not at all: a run stopped mid-write leaves the previous rows readable."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    partial.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-type", action="append", default=[])
    parser.add_argument("--all-architectures", action="store_true")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    parser.add_argument("--compile", action="store_true",
                        help="twin B is the step under torch.compile(mode='reduce-overhead'), not a hand capture")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    from graphready.harness.targets.hf_configs import causal_lm_types

    types = list(causal_lm_types()) if args.all_architectures else args.model_type
    context = multiprocessing.get_context("spawn")
    rows = []
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context, max_tasks_per_child=1) as pool:
        futures = {pool.submit(_one, t, args.steps, args.dtype, args.compile): t for t in types}
        for future in concurrent.futures.as_completed(futures):
            try:
                row = future.result()
            except Exception as exc:  # the process died (a crash in a kernel, say)
                row = {"architecture": futures[future], "verdict": "process died", "cause": _said(exc)}
            rows.append(row)
            if args.json:  # after every row: a run cut short keeps what it found
                _write(Path(args.json), rows)
            print(f"{row['architecture']:28} {row['verdict']:18} {row.get('cause', '')} {row.get('where', '')} "
                  f"{' '.join(row.get('blocking', []))}", flush=True)
    rows.sort(key=lambda r: types.index(r["architecture"]))
    if args.json:
        _write(Path(args.json), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
