"""Every kernel one graph-ready dsv4 decode layer launches, in order, with the source line that launches it.

    python benchmarks/dsv4_kernels.py [--preset pro-4L] [--full] [--list] [--json FILE]

Counts one step of `DSV4Model.units()` (the step's position values once per device, embed, then per layer
pre / attention / post, then head): each aten op
that runs a kernel (views, allocations and metadata ops do not) and each Triton launch. Weights are synthetic
NVFP4 for a narrowed copy of the preset (its layer kinds, hash layers, top-k and mHC at small widths that are
multiples of every block size, so each fused path runs) unless `--full` (the preset's widths, on a GPU).
Without a GPU set TRITON_INTERPRET=1: the model runs on the CPU taking its Triton paths
(`dsv4.layers.kernels`), each launch recorded and skipped, so the CUDA branches are the ones counted, except the indexer's top-k,
which off CUDA is torch.topk's algorithm spelled out in torch ops (one `topk` on CUDA). On a GPU the step
also runs under the CUDA profiler and its kernel count is printed next to this one.

A contiguous same-dtype `copy_` is a memcpy node (the profiler in `dsv4_decode.py` leaves those out of
its kernels per layer); it is listed as `memcpy` and counted in the totals.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dsv4.config import ConfigError, preset
from dsv4.layers.kernels import INTERPRET
from dsv4.model import DSV4Model
from dsv4.synth import synthetic_weights

ROOT = Path(__file__).resolve().parents[1]
DSV4_DIR = str(ROOT / "dsv4")
# aten ops that launch nothing: allocations and metadata (views by `OpOverload.is_view` and `_copied`)
NO_KERNEL = {"empty", "empty_strided", "new_empty", "new_empty_strided", "empty_like", "lift_fresh",
             "detach", "alias", "_unsafe_view", "set_", "resize_", "record_stream", "sym_size", "sym_stride",
             "sym_numel", "sym_storage_offset", "is_same_size", "_local_scalar_dense", "is_nonzero"}


@dataclass
class Launch:
    kind: str  # aten | triton | memcpy
    name: str
    where: str  # innermost dsv4 frame, then its nearest caller in another dsv4 file


def narrowed(config):
    """The preset's layer structure at small widths that keep every fused path's shape conditions."""
    return dataclasses.replace(
        config, vocab_size=1024, hidden_size=256, num_attention_heads=16, head_dim=128, qk_rope_head_dim=64,
        q_lora_rank=128, o_groups=2, o_lora_rank=128, n_routed_experts=max(8, config.num_experts_per_tok),
        moe_intermediate_size=256, index_n_heads=4, index_head_dim=128, index_topk=8, max_position_embeddings=8192)


def _where() -> str:
    frames = []
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(DSV4_DIR):
            frames.append((Path(name).relative_to(ROOT).as_posix(), frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    if not frames:
        return "?"
    inner = frames[0]
    outer = next((f for f in frames[1:] if f[0] != inner[0]), None)
    text = f"{inner[0]}:{inner[1]} {inner[2]}"
    return text + (f" <- {outer[0]}:{outer[1]} {outer[2]}" if outer else "")


class Recorder(TorchDispatchMode):
    """Records the kernel-launching aten ops; Triton launches are recorded by `triton_launches`."""

    def __init__(self):
        super().__init__()
        self.launches: list[Launch] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in NO_KERNEL or (func.is_view and not _copied(args[0], out)):
            return out
        kind = "memcpy" if name == "copy_" and _is_memcpy(args[0], args[1]) else "aten"
        self.launches.append(Launch(kind, name, _where()))
        return out


def _copied(source, out) -> bool:
    """A view-capable op (``to``, ``reshape``, ...) that had to copy: its result has storage of its own (inference
    mode dispatches ``x.float()`` as ``aten.to``, a view op, without decomposing it)."""
    return (isinstance(source, torch.Tensor) and isinstance(out, torch.Tensor)
            and out.untyped_storage().data_ptr() != source.untyped_storage().data_ptr())


def _is_memcpy(dst, src) -> bool:
    return (isinstance(src, torch.Tensor) and dst.dtype == src.dtype and dst.is_contiguous()
            and src.is_contiguous() and dst.shape == src.shape)


@contextlib.contextmanager
def triton_launches(recorder: Recorder, run: bool):
    """Record every `kernel[grid](...)` launch into `recorder`; launch it only when `run`. The graph-ready step
    reads no device value on the host, so skipping the kernels (their outputs left unwritten) changes no launch."""
    from triton.runtime import jit

    classes = [jit.JITFunction]
    with contextlib.suppress(ImportError):
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    saved = {cls: cls.__getitem__ for cls in classes}

    def patched(original):
        def getitem(self, grid):
            launch = original(self, grid)

            def record(*args, **kwargs):
                recorder.launches.append(Launch("triton", self.__name__, _where()))
                return launch(*args, **kwargs) if run else None
            return record
        return getitem

    for cls, original in saved.items():
        cls.__getitem__ = patched(original)
    try:
        yield
    finally:
        for cls, original in saved.items():
            cls.__getitem__ = original


def build_model(config, full: bool, max_len: int) -> DSV4Model:
    """The model on the GPU when there is one, else on the CPU (Triton kernels in the interpreter)."""
    if torch.cuda.is_available():
        weights = synthetic_weights(config, "nvfp4", "cuda") if full else \
            {k: v.to("cuda") for k, v in synthetic_weights(config, "nvfp4").items()}
        return DSV4Model(config, weights, ["cuda"], max_len=max_len)
    if full:
        raise SystemExit("error: --full needs a GPU")
    return DSV4Model(config, synthetic_weights(config, "nvfp4"), ["cpu"], max_len=max_len)


def record_step(model: DSV4Model) -> dict[str, list[Launch]]:
    """Unit name -> its launches, for one graph-ready step at position 0 (the model is reset afterwards)."""
    out = {}
    with torch.inference_mode():
        model.load_inputs([3], 0)
        for unit in model.units()[model.devices[0]]:
            recorder = Recorder()
            with triton_launches(recorder, run=model.devices[0].type == "cuda"), recorder:
                unit.run()
            out[unit.name] = recorder.launches
    model.reset()
    return out


def profiled_kernels(model) -> int:
    """CUDA kernels of the same step under the profiler (memcpy and memset left out, as dsv4_decode.py)."""
    from torch.profiler import ProfilerActivity, profile

    model.load_inputs([3], 0)
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        model.step_graphable()
        torch.cuda.synchronize()
    model.reset()
    return sum(1 for e in prof.events()
               if e.device_type.name == "CUDA" and not e.name.startswith(("Memcpy", "Memset")))


def layer_label(config, i: int) -> str:
    return config.layer_kind(i) + ("+hash" if config.is_hash_layer(i) else "")


def summarise(config, units: dict[str, list[Launch]]) -> dict:
    layers = {}
    for i in range(config.num_hidden_layers):
        parts = {p: units[f"layer{i}.{p}"] for p in ("pre", "attention", "post")}
        layers[i] = {"kind": layer_label(config, i), "parts": {p: len(v) for p, v in parts.items()},
                     "total": sum(len(v) for v in parts.values()),
                     "memcpy": sum(1 for v in parts.values() for launch in v if launch.kind == "memcpy"),
                     "triton": sum(1 for v in parts.values() for launch in v if launch.kind == "triton")}
    total = sum(len(v) for v in units.values())
    return {"layers": layers, "positions": len(units["positions"]), "embed": len(units["embed"]),
            "head": len(units["head"]), "total": total,
            "per_layer": sum(v["total"] for v in layers.values()) / max(1, len(layers))}


def print_inventory(config, units: dict[str, list[Launch]], summary: dict, listing: bool) -> None:
    seen = set()
    for i, row in summary["layers"].items():
        if listing and row["kind"] not in seen:
            seen.add(row["kind"])
            print(f"\n## layer {i} ({row['kind']}): {row['total']} launches")
            n = 0
            for part in ("pre", "attention", "post"):
                print(f"-- {part}")
                for launch in units[f"layer{i}.{part}"]:
                    n += 1
                    print(f"{n:4d} {launch.kind:6s} {launch.name:24s} {launch.where}")
    print("\nlayer kind        pre  attn  post  total  (triton, memcpy)")
    for i, row in summary["layers"].items():
        p = row["parts"]
        print(f"{i:5d} {row['kind']:10s} {p['pre']:4d} {p['attention']:5d} {p['post']:5d} {row['total']:6d}  "
              f"({row['triton']}, {row['memcpy']})")
    by_name = Counter(f"{launch.kind}:{launch.name}" for i in summary["layers"]
                      for part in ("pre", "attention", "post") for launch in units[f"layer{i}.{part}"])
    print("\nmost launched: " + ", ".join(f"{k} x{v}" for k, v in by_name.most_common(12)))
    print(f"positions {summary['positions']}, embed {summary['embed']}, head {summary['head']}; "
          f"step {summary['total']} launches, "
          f"{summary['per_layer']:.1f} per layer")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="pro-4L")
    p.add_argument("--full", action="store_true", help="the preset's own widths (needs a GPU)")
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--list", action="store_true", help="print every launch of the first layer of each kind")
    p.add_argument("--json", help="also write the summary to this file")
    args = p.parse_args(argv)
    try:
        config = preset(args.preset)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.full:
        config = narrowed(config)
    try:
        import triton  # noqa: F401  the fused paths exist only with Triton
    except ImportError:
        print("error: Triton is not importable: the count would be of the torch forms", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() and not INTERPRET:
        print("error: without a GPU set TRITON_INTERPRET=1 (Triton's interpreter runs the kernels)", file=sys.stderr)
        return 2
    model = build_model(config, args.full, args.max_len)
    units = record_step(model)
    summary = summarise(config, units)
    print_inventory(config, units, summary, args.list)
    if torch.cuda.is_available():
        summary["profiled"] = profiled_kernels(model)
        print(f"profiler: {summary['profiled']} kernels in the step (memcpy/memset left out)")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
