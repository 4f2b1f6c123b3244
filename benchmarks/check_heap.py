"""Does one tiny unit's check slow down with everything else the process holds?

    python benchmarks/check_heap.py [--models 1,4,16,31] [--profile FILE]

An engine's process holds far more than the step under check. This builds small random-weight HF
causal LMs of different architectures (transformers' own configs, shrunk) in this process, a few
more before each row, and after each batch checks the same two tiny units: 2-layer decoders taking
one token per step with `StaticCache`, each a closure over its model and cache, state left out
(discovered). The Llama's step is reproducible from its tensors; the Mistral's is not (its
sliding-window cache counts positions in a Python int, which the replay check reports as GD301),
so state discovery also searches every live tensor of the process for what else changed, the
search that once named every tensor it looked at and took 93-99 s with 31 models around.
It prints, per row and unit, the models built, the objects the garbage collector tracks, the
check's seconds by phase group and its slowest phases, and its findings. `--profile FILE` writes
cProfile stats of the last row's checks and prints their top entries. Needs a CUDA GPU and
`transformers`.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "hazards"))

# Decoder-only architectures tried in this order; those this transformers cannot build are skipped.
ARCHITECTURES = (
    "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gpt2", "gpt_neox", "opt", "olmo", "olmo2", "stablelm",
    "starcoder2", "granite", "helium", "cohere", "bloom", "biogpt", "phi", "persimmon", "xglm", "mixtral",
    "gemma3_text", "arcee", "apertus", "bitnet", "cwm", "diffllama", "doge", "ernie4_5", "exaone4", "cohere2", "ctrl",
    "falcon_mamba", "nemotron", "ministral",
)
SMALL = dict(
    vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=128, n_embd=64, n_layer=2, n_head=4, d_model=64,
    num_layers=2, ffn_dim=128, word_embed_proj_dim=64,
)  # fmt: skip
MAX_PARAMETERS = 5_000_000  # a config that ignores the small sizes is skipped, not built at full size
GROUPS = ("eager_check_s", "capture_s", "replay_check_s")


def build_models(kinds, device):
    """Build one small model per architecture in `kinds` (one forward each); skip the ones that fail."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    built, skipped = [], []
    for kind in kinds:
        try:
            config = AutoConfig.for_model(kind, **SMALL)
            with torch.device("meta"):
                size = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
            if size > MAX_PARAMETERS:
                raise ValueError(f"{size} parameters")
            model = AutoModelForCausalLM.from_config(config).to(device).eval()
            with torch.no_grad():
                model(torch.arange(1, 5, device=device)[None])
            built.append(model)
        except Exception as exc:  # an architecture this transformers version builds differently
            skipped.append(f"{kind} ({type(exc).__name__})")
    return built, skipped


def check_once(unit, device, profile: cProfile.Profile | None):
    from graphready.harness.session import CheckOptions, check_unit

    options = CheckOptions(steps=4, root=REPO)
    started = time.perf_counter()
    if profile is not None:
        profile.enable()
    result = check_unit(unit, device, options)
    if profile is not None:
        profile.disable()
    return result, time.perf_counter() - started


def row(models: int, name: str, result, seconds: float) -> str:
    from graphready.harness.result import PHASE_GROUPS

    phases = result.phase_seconds
    grouped = " | ".join(f"{sum(phases.get(p, 0.0) for p in PHASE_GROUPS[g]):.2f}" for g in GROUPS)
    slowest = ", ".join(f"{p} {s:.2f}" for p, s in sorted(phases.items(), key=lambda x: -x[1])[:4])
    findings = ",".join(f.rule for f in result.findings) or "-"
    return f"| {models} | {len(gc.get_objects())} | {name} | {seconds:.2f} | {grouped} | {slowest} | {findings} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="1,4,16,31", help="rows: how many other models the process holds")
    parser.add_argument("--profile", metavar="FILE", help="write cProfile stats of the last row's checks here")
    args = parser.parse_args()
    counts = sorted({int(n) for n in args.models.split(",")})
    warnings.simplefilter("ignore")
    import torch
    import transformers

    from graphready.harness import Unit
    from graphready.harness.checks.pointers.alloc_history import start_recording
    from hf_units import TinyDecoder

    transformers.logging.set_verbosity_error()
    if not torch.cuda.is_available():
        raise SystemExit("check_heap needs a CUDA GPU")
    device = torch.device("cuda", 0)
    start_recording()  # as the worker does before it builds a target

    def tiny_units():  # fresh per row: the Mistral cache's Python counter advances with every step
        decoders = [TinyDecoder(architecture=architecture) for architecture in ("llama", "mistral")]
        return [Unit(f"tiny_{d.architecture}_decode", d.decode, d.inputs, atol=1e-4, rtol=1e-4) for d in decoders]

    for unit in tiny_units():
        check_once(unit, device, None)  # first checks: load and compile what every later one reuses
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(device)}")
    print("| models | gc objects | unit | check s | " + " | ".join(GROUPS) + " | slowest phases | findings |")
    print("|---|---|---|---|---|---|---|---|---|")
    models, skipped, pool, details = [], [], list(ARCHITECTURES), []
    for count in counts:
        while len(models) < count and pool:
            take, pool = pool[: count - len(models)], pool[count - len(models):]
            built, failed = build_models(take, "cuda")
            models += built
            skipped += failed
        profile = cProfile.Profile() if args.profile and count == counts[-1] else None
        for unit in tiny_units():
            result, seconds = check_once(unit, device, profile)
            print(row(len(models), unit.name, result, seconds), flush=True)
            details += [f"- {len(models)} models, {unit.name}: {f.rule} {f.path}:{f.line} {f.message}" for f in result.findings]
        if profile is not None:
            profile.dump_stats(args.profile)
            pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
    print("\n".join(["", "findings:", *details]) if details else "")
    if skipped:
        print("skipped: " + ", ".join(skipped))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
