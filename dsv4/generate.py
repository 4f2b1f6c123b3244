"""Greedy generation from a checkpoint or synthetic weights, eager or with CUDA graphs, over N GPUs.

    python -m dsv4.generate --synthetic tiny --prompt-ids 0,5,7 --max-new 32 [--graph full] [--gpus 1]
    python -m dsv4.generate --checkpoint DIR --prompt-ids 0,5,7 --max-new 32 --graph split --gpus 2
    python -m dsv4.generate --synthetic pro-4L --mtp --graph full

The prompt is prefilled as successive decode steps. Prints the generated token ids and the decode time per
token (prefill excluded). Without `--graph` the eager step runs (on GPU if there is one, else on CPU).
`--mtp` decodes speculatively with the MTP layer (one draft token per step, verified by the main model in a
two-token step) and also prints the draft acceptance rate; its graph-ready steps run through the graph
decoder, with CUDA graphs when `--graph` is given.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dsv4.checkpoint import CheckpointError
from dsv4.config import ConfigError, DSV4Config, load_config, preset
from dsv4.graphs import MODES, GraphDecoder
from dsv4.memory import memory_needed, shortfalls
from dsv4.model import MAX_COMPRESS_RATIO, DSV4Model
from dsv4.placement import weight_parts
from dsv4.synth import FORMATS, SynthError


CHECK_EVERY = 8  # speculative steps between host checks of the position
SPECULATIVE_SLACK = 2 * CHECK_EVERY + 2  # positions a speculative run may pass its target by (two per step)


class GenerateError(Exception):
    """Bad arguments or an environment that cannot run the request; reported without a traceback."""


def parse_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise GenerateError(f"--prompt-ids must be comma-separated integers, got {text!r}") from None
    if not ids:
        raise GenerateError("--prompt-ids is empty")
    return ids


def pick_devices(gpus: int | None, need_cuda: bool) -> list[torch.device]:
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus is not None and gpus < 1:
        raise GenerateError(f"--gpus must be >= 1, got {gpus}")
    if (need_cuda or gpus) and not available:
        raise GenerateError("no CUDA GPU available (--graph and --gpus need one)")
    if gpus and gpus > available:
        raise GenerateError(f"--gpus {gpus} requested but only {available} CUDA GPU(s) visible")
    if not available:
        return [torch.device("cpu")]
    return [torch.device("cuda", i) for i in range(gpus or 1)]


def load_weights(args, config, devices, progress: Progress) -> dict:
    parts = weight_parts(config, devices, args.checkpoint, args.format, args.seed, mtp=args.mtp)
    task = progress.add_task("loading weights", total=sum(c for c, _ in parts))
    weights: dict = {}
    for _, load in parts:
        weights.update(load(progress=lambda n, total, name: progress.advance(task)))
    progress.update(task, completed=progress.tasks[task].total)
    return weights


def check_memory(args, config, devices) -> None:
    """Refuse, before loading anything, a model (with its MTP layer for --mtp) that the GPUs cannot hold."""
    if devices[0].type != "cuda":
        return
    needs = memory_needed(config, len(devices), args.checkpoint, args.format, mtp=args.mtp)
    short = shortfalls(needs, [torch.cuda.mem_get_info(d)[0] for d in devices])
    if short:
        raise GenerateError("the model does not fit: " + "; ".join(short)
                            + ". Use more GPUs (--gpus N) or a smaller preset.")


def resolve_config(args) -> DSV4Config:
    if args.checkpoint:
        return load_config(args.checkpoint)
    return preset(args.synthetic)


def run_generation(model: DSV4Model, decoder: GraphDecoder | None, prompt: list[int], max_new: int):
    """Prefill the prompt, then generate greedily; returns (new token ids, decode seconds per token)."""
    if decoder is None:
        logits = None
        for pos, token in enumerate(prompt):
            logits = model.step([token], pos)
        out, token = [], int(logits[0].argmax())
        start = time.perf_counter()
        for pos in range(len(prompt), len(prompt) + max_new):
            out.append(token)
            token = int(model.step([token], pos)[0].argmax())
        return out, (time.perf_counter() - start) / max_new
    for pos, token in enumerate(prompt):
        decoder.step([token], pos)
    generated = [model.next_token_buf.clone()]
    decoder.synchronize()
    start = time.perf_counter()
    for pos in range(len(prompt), len(prompt) + max_new - 1):
        decoder.step_greedy(pos)
        generated.append(model.next_token_buf.clone())
    decoder.synchronize()
    elapsed = time.perf_counter() - start
    return [int(t) for t in torch.cat(generated).tolist()], elapsed / max(max_new - 1, 1)


def run_speculative(decoder: GraphDecoder, prompt: list[int], max_new: int):
    """Prefill the prompt two tokens at a time, then decode speculatively until `max_new` tokens are decided.

    Returns (new token ids, decode seconds per token, accepted drafts per step). The host looks at the device
    state every CHECK_EVERY steps only; steps in between chain on the device.
    """
    spec, n = decoder.model.spec, len(prompt)
    for p in range(0, n - 1, 2):
        decoder.step(prompt[p : p + 2], p, overrides=[prompt[p + 1], prompt[p + 2] if p + 2 < n else -1])
    if n % 2:
        decoder.step([prompt[-1], 0], n - 1)  # no draft exists yet: a placeholder the check will most likely reject
    decoder.synchronize()
    start_pos, start_accepted, steps = int(spec.pos), int(spec.accepted), 0
    start = time.perf_counter()
    while int(spec.pos) < n + max_new - 1:
        for _ in range(CHECK_EVERY):
            decoder.step_speculative()
        steps += CHECK_EVERY
        decoder.synchronize()
    elapsed = time.perf_counter() - start
    end_pos = int(spec.pos)
    tokens = spec.emitted[n : end_pos + 1].tolist()[:max_new]
    return tokens, elapsed / (end_pos - start_pos), (int(spec.accepted) - start_accepted) / steps


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dsv4.generate", description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="checkpoint directory (config.json + safetensors shards)")
    src.add_argument("--synthetic", metavar="PRESET", help="random weights for a preset: tiny, pro, flash, pro-<N>L")
    p.add_argument("--format", default="nvfp4", choices=FORMATS, help="synthetic weight format (default nvfp4)")
    p.add_argument("--seed", type=int, default=0, help="synthetic weight seed")
    p.add_argument("--prompt-ids", default="0", help="comma-separated prompt token ids")
    p.add_argument("--max-new", type=int, default=32, help="tokens to generate")
    p.add_argument("--graph", choices=MODES, help="replay CUDA graphs in this mode (default: eager)")
    p.add_argument("--gpus", type=int, help="spread the layers over this many GPUs (default 1)")
    p.add_argument("--max-len", type=int, help="cache length (default: prompt + max-new rounded up to 128)")
    p.add_argument("--mtp", action="store_true", help="speculative decoding with the MTP layer (one draft per step)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    err = Console(stderr=True)
    try:
        prompt = parse_ids(args.prompt_ids)
        if args.max_new < 1:
            raise GenerateError(f"--max-new must be >= 1, got {args.max_new}")
        config = resolve_config(args)
        bad = [t for t in prompt if not 0 <= t < config.vocab_size]
        if bad:
            raise GenerateError(f"prompt id {bad[0]} outside the vocabulary 0..{config.vocab_size - 1}")
        devices = pick_devices(args.gpus, need_cuda=args.graph is not None)
        check_memory(args, config, devices)
        needed = len(prompt) + args.max_new + (SPECULATIVE_SLACK if args.mtp else 0)
        max_len = args.max_len or -(-needed // MAX_COMPRESS_RATIO) * MAX_COMPRESS_RATIO
        if max_len < needed:
            raise GenerateError(f"--max-len {max_len} is shorter than prompt + max-new ({needed}"
                                f"{', with the speculative overshoot' if args.mtp else ''})")
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=True) as progress:
            weights = load_weights(args, config, devices, progress)
            model = DSV4Model(config, weights, devices, max_len=max_len, speculative=args.mtp)
            del weights
            decoder = None
            if args.graph or args.mtp:
                decoder = GraphDecoder(model, args.graph or "full", use_graphs=bool(args.graph))
                task = progress.add_task(f"capturing {args.graph} graphs", total=decoder.capture_count)
                decoder.capture(on_progress=lambda name: progress.advance(task))
        if args.mtp:
            tokens, seconds, acceptance = run_speculative(decoder, prompt, args.max_new)
        else:
            tokens, seconds = run_generation(model, decoder, prompt, args.max_new)
    except (GenerateError, ConfigError, CheckpointError, SynthError, ValueError) as e:
        err.print(f"error: {e}", markup=False, highlight=False)
        return 2
    except torch.cuda.OutOfMemoryError as e:
        err.print(f"error: out of GPU memory ({str(e).splitlines()[0]})", markup=False, highlight=False)
        return 1
    mode = f"{args.graph} graphs" if args.graph else "eager"
    where = f"{len(devices)} GPU(s)" if devices[0].type == "cuda" else "CPU"
    print("tokens:", ",".join(str(t) for t in tokens))
    print(f"ms/token: {seconds * 1e3:.2f} ({mode}, {where}{', speculative' if args.mtp else ''})")
    if args.mtp:
        print(f"acceptance: {acceptance:.1%} of drafts ({1 + acceptance:.2f} tokens per step)")
        plain, speculative = model.weight_bytes_per_token, model.speculative_bytes_per_step
        print(f"weight bytes: {speculative / 1e9:.3g} GB per speculative step at most, {speculative / plain:.2f}x a "
              f"plain step's {plain / 1e9:.3g} GB (the second token's routed experts, the MTP layer, the head again)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
