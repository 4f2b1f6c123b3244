"""Random but well-scaled DeepSeek-V4 weights with the real names, shapes and dtypes.

``synthetic_weights`` builds the dict ``load_checkpoint`` would return, directly on a device and layer by layer
(routed experts are drawn and quantized a few at a time, so a Pro-width layer never exists in BF16);
``write_checkpoint`` writes the same weights as a sharded checkpoint that ``load_checkpoint`` reads back
identically. Weights are N(0, 1/fan_in) so activations stay O(1) through many layers; norms are 1; hc
scales/bases, gate bias, ``ape`` and ``attn_sink`` are small; ``tid2eid`` holds distinct in-range expert ids.
Each tensor draws from its own generator seeded by (seed, name): deterministic per seed and device, whatever
subset of layers is built.

Formats: ``nvfp4`` (NVIDIA release: routed and shared experts NVFP4, attention FP8 with f32 block scales, the rest
BF16; HF names on disk), ``official`` (attention and shared experts FP8 with E8M0 scales, experts MXFP4; official
names), ``bf16`` (everything BF16; HF names).

CLI: ``python -m dsv4.synth --preset flash --format nvfp4 --out DIR [--seed S] [--device cuda]``: draws on the GPU
when there is one and streams shards to disk with bounded host memory (see ``write_checkpoint``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
import zlib
from pathlib import Path
from typing import Iterable, Iterator

import torch
from torch import Tensor

from dsv4.checkpoint import DiskLayout, ShardWriter, checkpoint_specs
from dsv4.config import ConfigError, DSV4Config, preset
from dsv4.formats import (FP4_MAX, FP8_BLOCK, FP8_MAX, MXFP4_BLOCK, NVFP4_BLOCK, QuantizedWeight, as_bf16,
                          quantize_fp8_block, quantize_mxfp4, quantize_nvfp4)
from dsv4.fused_experts import FUSED_FORMATS
from dsv4.names import SCHEMES, TensorSpec

FORMATS = ("nvfp4", "official", "bf16")
# role -> (format, fp8 scale format) per release
ROLE_FORMATS = {
    "nvfp4": {"attn": ("fp8", "f32"), "shared": ("nvfp4", None), "expert": ("nvfp4", None), "plain": ("bf16", None)},
    "official": {"attn": ("fp8", "e8m0"), "shared": ("fp8", "e8m0"), "expert": ("mxfp4", None),
                 "plain": ("bf16", None)},
    "bf16": {r: ("bf16", None) for r in ("attn", "shared", "expert", "plain")},
}
DEFAULT_SCHEME = {"nvfp4": "hf", "official": "official", "bf16": "hf"}
CHUNK_ELEMENTS = 1 << 26  # experts drawn per quantization step: bounds the BF16/f32 working set to ~1 GB


class SynthError(ValueError):
    """Arguments that cannot produce a synthetic checkpoint."""


def _generator(seed: int, name: str, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(zlib.crc32(f"{seed}/{name}".encode()))
    return g


def _quantize(w: Tensor, spec: TensorSpec, fmt: str, g: torch.Generator) -> QuantizedWeight:
    kind, scale_format = ROLE_FORMATS[fmt][spec.role]
    if kind == "fp8":
        return quantize_fp8_block(w, scale_format)
    if kind == "mxfp4":
        return quantize_mxfp4(w)
    if kind == "nvfp4":
        # A calibration-style activation scale amax/(6*448) for activations of magnitude 1..10.
        lead = w.shape[:-2]
        amax = 1 + 9 * torch.rand(lead, generator=g, device=w.device)
        return quantize_nvfp4(w, input_scale=amax / (FP4_MAX * FP8_MAX))
    return as_bf16(w)


def _gaussian(shape, g: torch.Generator, device, std: float) -> Tensor:
    return torch.randn(shape, generator=g, device=device) * std


def _linear(spec: TensorSpec, fmt: str, device, g: torch.Generator) -> QuantizedWeight:
    out, inp = spec.shape
    return _quantize(_gaussian((out, inp), g, device, inp ** -0.5), spec, fmt, g)


def _experts(spec: TensorSpec, fmt: str, device, g: torch.Generator) -> QuantizedWeight:
    """Draw and quantize a few experts at a time into preallocated stacked buffers."""
    n, out, inp = spec.shape
    step = max(1, CHUNK_ELEMENTS // (out * inp))
    stacked: dict[str, Tensor] = {}
    cls = None
    for start in range(0, n, step):
        m = min(step, n - start)
        q = _quantize(_gaussian((m, out, inp), g, device, inp ** -0.5), spec, fmt, g)
        if cls is None:
            cls = type(q)
            stacked = {k: torch.empty((n, *t.shape[1:]), dtype=t.dtype, device=device) for k, t in q.parts().items()}
        for k, t in q.parts().items():
            stacked[k][start:start + m].copy_(t)
        del q
    return cls(**stacked)


def _plain(spec: TensorSpec, device, g: torch.Generator, n_experts: int) -> Tensor:
    shape, dtype = spec.shape, spec.dtypes[0]
    if spec.init == "ones":
        return torch.ones(shape, dtype=dtype, device=device)
    if spec.init == "tid2eid":
        vocab, k = shape
        ids = torch.rand((vocab, n_experts), generator=g, device=device).argsort(dim=-1)[:, :k]
        return ids.to(torch.int32)
    if spec.init == "hc_scale":
        return (0.1 + 0.02 * torch.randn(shape, generator=g, device=device)).to(dtype)
    std = {"embed": 1.0, "small": 0.02, "hc_fn": shape[-1] ** -0.5, "linear": shape[-1] ** -0.5}[spec.init]
    return _gaussian(shape, g, device, std).to(dtype)


def iter_synthetic_weights(config: DSV4Config, fmt: str = "nvfp4", device="cpu", seed: int = 0,
                           layers: Iterable[int] | None = None, include_globals: bool | None = None,
                           mtp: bool = False) -> Iterator[tuple[str, Tensor | QuantizedWeight]]:
    """Yield (official name, value) in load order, building each entry on ``device`` only when asked for it."""
    if fmt not in FORMATS:
        raise SynthError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    device = torch.device(device)
    for spec in checkpoint_specs(config, layers, include_globals, mtp):
        g = _generator(seed, spec.name, device)
        if spec.kind == "experts":
            yield spec.name, _experts(spec, fmt, device, g)
        elif spec.kind == "linear":
            yield spec.name, _linear(spec, fmt, device, g)
        else:
            yield spec.name, _plain(spec, device, g, config.n_routed_experts)


def synthetic_weights(config: DSV4Config, fmt: str = "nvfp4", device="cpu", seed: int = 0,
                      layers: Iterable[int] | None = None, include_globals: bool | None = None,
                      mtp: bool = False) -> dict[str, Tensor | QuantizedWeight]:
    """The dict ``load_checkpoint`` returns (same names, formats, shapes, dtypes), built directly on ``device``."""
    return dict(iter_synthetic_weights(config, fmt, device, seed, layers, include_globals, mtp))


def spec_bytes(spec: TensorSpec, fmt: str) -> int:
    """Bytes one loaded entry takes in ``fmt`` (stored components, without safetensors headers)."""
    if spec.kind in ("tensor", "dense"):
        return math.prod(spec.shape) * spec.dtypes[0].itemsize
    *lead, out, inp = spec.shape
    n, kind = math.prod(lead), ROLE_FORMATS[fmt][spec.role]
    if kind[0] == "fp8":
        grid = -(-out // FP8_BLOCK) * -(-inp // FP8_BLOCK)
        return n * (out * inp + grid * (4 if kind[1] == "f32" else 1))
    if kind[0] == "nvfp4":
        return n * (out * inp // 2 + out * inp // NVFP4_BLOCK + 8)
    if kind[0] == "mxfp4":
        return n * (out * inp // 2 + out * inp // MXFP4_BLOCK)
    return n * out * inp * 2


def estimate_bytes(config: DSV4Config, fmt: str) -> int:
    """Bytes the checkpoint of ``config`` takes on disk in ``fmt`` (without safetensors headers), MTP layer included."""
    return sum(spec_bytes(spec, fmt) for spec in checkpoint_specs(config, mtp=_has_mtp(config)))


def _has_mtp(config: DSV4Config) -> bool:
    return config.num_nextn_predict_layers > 0


def write_checkpoint(config: DSV4Config, out_dir, fmt: str = "nvfp4", seed: int = 0, shard_bytes: int = 2 << 30,
                     scheme: str | None = None, progress=None, device="cpu") -> Path:
    """Write config.json, the safetensors index and shards of ``synthetic_weights(config, fmt, device, seed)``
    plus the MTP layer (``mtp=True``), as the releases ship it.

    Streaming: each entry is drawn on ``device``, copied to host and handed to a background shard writer, so
    host memory holds at most about two shards whatever the model's size; a GPU ``device`` keeps drawing while
    the disk writes. ``scheme`` ("hf", "transformers" or "official") picks the on-disk names; by default HF for
    nvfp4/bf16, official for official. transformers' fused experts hold BF16, FP8 or MXFP4, not NVFP4. ``progress(done, total, name)`` is called after each entry.
    """
    if fmt not in FORMATS:
        raise SynthError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    scheme = scheme or DEFAULT_SCHEME[fmt]
    if scheme not in SCHEMES:
        raise SynthError(f"unknown name scheme {scheme!r}; choose one of: {', '.join(SCHEMES)}")
    if scheme == "transformers" and ROLE_FORMATS[fmt]["expert"][0] not in FUSED_FORMATS:
        raise SynthError(f"transformers names fuse the routed experts, which {fmt} stores as "
                         f"{ROLE_FORMATS[fmt]['expert'][0]}: that has no fused layout; use hf names")
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SynthError(f"{out}: exists and is not an empty directory")
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(device)
    mtp = _has_mtp(config)
    total = len(checkpoint_specs(config, mtp=mtp))
    layout = DiskLayout(scheme, config.num_hidden_layers)
    with ShardWriter(out, shard_bytes) as writer:
        for n, (name, value) in enumerate(iter_synthetic_weights(config, fmt, device, seed, mtp=mtp), 1):
            for disk_name, t in layout.tensors(name, value):
                writer.add(disk_name, t)
            del value
            if progress is not None:
                progress(n, total, name)
    meta = {"model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"], "torch_dtype": "bfloat16",
            "synthetic": {"format": fmt, "seed": seed, "names": scheme, "device": device.type}}
    (out / "config.json").write_text(json.dumps({**meta, **config.to_dict()}, indent=2) + "\n")
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m dsv4.synth",
                     description="Write a random, well-scaled DeepSeek-V4 checkpoint with the real names and formats.")
    parser.add_argument("--preset", required=True, help="tiny, pro, flash or pro-<N>L")
    parser.add_argument("--format", choices=FORMATS, default="nvfp4")
    parser.add_argument("--out", required=True, type=Path, help="output directory (new or empty)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shard-mb", type=int, default=2048, help="approximate shard size in MiB")
    parser.add_argument("--names", choices=SCHEMES, help="on-disk name scheme (default per format)")
    parser.add_argument("--device", default="auto",
                        help="where the weights are drawn: cuda[:K] or cpu (default: cuda when there is a GPU)")
    args = parser.parse_args(argv)
    try:
        config = preset(args.preset)
        if args.shard_mb <= 0:
            raise SynthError("--shard-mb must be positive")
        device = _device(args.device)
        need = estimate_bytes(config, args.format)
        probe = next(p for p in (args.out, *args.out.absolute().parents) if p.exists())
        free = shutil.disk_usage(probe).free
        if need > free:
            raise SynthError(f"preset {args.preset} in {args.format} needs {need / 1e9:.1f} GB but {probe} has "
                             f"{free / 1e9:.1f} GB free; build it in memory with synthetic_weights() instead")
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        started = time.perf_counter()
        with Progress(*columns, transient=True, console=Console(stderr=True)) as bar:
            task = bar.add_task(f"{args.preset} {args.format} on {device}", total=None)
            write_checkpoint(config, args.out, args.format, args.seed, args.shard_mb << 20, args.names,
                             progress=lambda done, total, name: bar.update(task, completed=done, total=total),
                             device=device)
        seconds = time.perf_counter() - started
    except (ConfigError, SynthError, OSError) as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({args.preset}, {args.format}, seed {args.seed}, drawn on {device}, "
          f"{need / 1e6:.1f} MB in {seconds:.1f} s, {need / 1e9 / seconds:.2f} GB/s)")
    return 0


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise SynthError(f"--device {name!r} is not a device (cuda, cuda:K or cpu)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SynthError("--device cuda but no CUDA GPU is available")
    if device.type not in ("cuda", "cpu"):
        raise SynthError(f"--device {name!r}: only cuda and cpu are supported")
    return device


if __name__ == "__main__":
    sys.exit(main())
