"""Read and write sharded DeepSeek-V4 safetensors checkpoints, lazily, one tensor at a time.

``load_checkpoint`` returns a dict keyed by OFFICIAL names whatever the names on disk (official ``layers.{i}.attn.wq_a``,
HF/NVFP4 ``model.layers.{i}.self_attn.q_a_proj``, or HF transformers' with fused experts; see ``dsv4.names``):

* Linear layers: key WITHOUT ``.weight`` -> ``QuantizedWeight`` (``layers.{i}.attn.wq_a``, ``...attn.wkv``,
  ``...attn.compressor.wkv``, ``...attn.indexer.weights_proj``, ``...ffn.shared_experts.w1``; BF16 ones are
  ``BF16Weight``). Routed experts: ONE stacked ``QuantizedWeight`` ``[E, out, in]`` per projection,
  ``layers.{i}.ffn.experts.w1`` / ``w2`` / ``w3``.
* Plain tensors under their full official name: ``embed.weight``, ``head.weight``, ``ffn.gate.weight`` (BF16;
  dequantized if a release stores them quantized), norms (``...attn_norm.weight``, ``...q_norm.weight``),
  ``hc_head_fn``/``_base``/``_scale``, ``layers.{i}.hc_attn_fn``..., ``...compressor.ape``, ``...attn.attn_sink``,
  ``...ffn.gate.bias`` (non-hash layers), ``...ffn.gate.tid2eid`` (hash layers, always int32).

Each linear's format is detected from the tensors present (weight dtype and which of ``.scale``,
``.weight_scale``, ``.weight_scale_2``, ``.input_scale`` exist), so the official FP8+MXFP4 release, the NVIDIA
NVFP4 release and BF16 files all load. Every shape and dtype is checked against the config before the tensor is
read; a problem raises ``CheckpointError`` naming the tensor and its file.

Only shards holding a requested tensor are opened; each tensor is read, moved to ``device`` and dropped from
host memory before the next one. ``layers=`` loads just those decoder layers (and, by default, no globals),
so a model can place layers on different GPUs with one call per device.
"""

from __future__ import annotations

import json
import math
import os
import queue
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from dsv4.config import ConfigError, DSV4Config, load_config
from dsv4.formats import (FP8_BLOCK, MXFP4_BLOCK, NVFP4_BLOCK, BF16Weight, FP8BlockWeight, MXFP4Weight,
                          NVFP4Weight, QuantizedWeight)
from dsv4.fused_experts import (SCALE_SUFFIXES, FusedLayoutError, fp8_scale_rows, fuse_gate_up, fused_parts)
from dsv4.names import (TensorSpec, detect_scheme, disk_name, expert_disk_base, fused_experts_name, global_specs,
                        layer_specs, mtp_specs)

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
DTYPES = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F8_E4M3": torch.float8_e4m3fn,
    "F8_E8M0": torch.float8_e8m0fnu, "U8": torch.uint8, "I8": torch.int8, "I32": torch.int32, "I64": torch.int64,
}
FP8_SCALE_SUFFIXES = (".scale", ".weight_scale_inv", ".weight_scale")
Progress = Callable[[int, int, str], None]


class CheckpointError(RuntimeError):
    """A checkpoint that does not match the config: missing file or tensor, wrong shape or dtype."""


class _Shards:
    """Tensor name -> shard file map; a shard is opened the first time one of its tensors is needed.

    Loads read the shards in about the order they were written, so only the few most recently used stay
    open: a closed shard's pages leave this process, and host memory stays bounded however large the model.
    """

    OPEN_SHARDS = 2

    def __init__(self, root: Path):
        self.root = root
        self._handles: OrderedDict[str, object] = OrderedDict()
        index = root / INDEX_FILE
        if index.is_file():
            try:
                self.files = dict(json.loads(index.read_text())["weight_map"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise CheckpointError(f"{index}: not a valid safetensors index ({e})") from None
            self.index = index.name
        elif (root / SINGLE_FILE).is_file():
            self.index = SINGLE_FILE
            self.files = {n: SINGLE_FILE for n in self._open(SINGLE_FILE, "*").keys()}
        else:
            raise CheckpointError(f"{root}: no {INDEX_FILE} (nor a single {SINGLE_FILE})")

    def _open(self, file: str, wanted: str):
        handles = self._handles
        if file in handles:
            handles.move_to_end(file)
        else:
            while len(handles) >= self.OPEN_SHARDS:
                handles.popitem(last=False)
            path = self.root / file
            if not path.is_file():
                raise CheckpointError(f"{path}: shard missing (listed in {self.index} for tensor '{wanted}')")
            try:
                handles[file] = safe_open(str(path), framework="pt")
            except Exception as e:  # safetensors raises its own error types for corrupt headers
                raise CheckpointError(f"{path}: cannot open shard ({e})") from None
        return handles[file]

    def has(self, name: str) -> bool:
        return name in self.files

    def where(self, name: str) -> str:
        return self.files.get(name, self.index)

    def meta(self, name: str) -> tuple[torch.dtype | str, list[int]]:
        if name not in self.files:
            raise CheckpointError(f"tensor '{name}' missing: not listed in {self.root / self.index}")
        file = self.files[name]
        handle = self._open(file, name)
        try:
            sl = handle.get_slice(name)
        except Exception:
            raise CheckpointError(f"tensor '{name}' missing from shard {file} (listed in {self.index})") from None
        dt = sl.get_dtype()
        return DTYPES.get(dt, dt), list(sl.get_shape())

    def read(self, name: str, device, rows: tuple[int, int] | None = None) -> Tensor:
        """The tensor, or only rows [start, stop) of its second dim (a slice read from disk, not the whole)."""
        handle = self._open(self.files[name], name)
        if rows is None:
            return handle.get_tensor(name).to(device)
        return handle.get_slice(name)[:, rows[0] : rows[1]].to(device)


def _fail(shards: _Shards, name: str, what: str) -> CheckpointError:
    return CheckpointError(f"tensor '{name}' in {shards.where(name)}: {what}")


def _expect(shards: _Shards, name: str, shape: list[int], dtypes: tuple, fmt: str = "") -> None:
    dt, got = shards.meta(name)
    label = f" ({fmt})" if fmt else ""
    if dt not in dtypes:
        raise _fail(shards, name, f"dtype {dt} but expected {' or '.join(str(d) for d in dtypes)}{label}")
    if got != list(shape):
        raise _fail(shards, name, f"shape {got} but expected {list(shape)}{label}")


def _detect_format(shards: _Shards, base: str) -> str:
    w = base + ".weight"
    dt, _ = shards.meta(w)
    if dt in (torch.bfloat16,):
        return "bf16"
    if dt == torch.float8_e4m3fn:
        return "fp8"
    if dt in (torch.uint8, torch.int8):
        if shards.has(base + ".weight_scale_2") or (
                shards.has(base + ".weight_scale") and shards.meta(base + ".weight_scale")[0] == torch.float8_e4m3fn):
            return "nvfp4"
        if shards.has(base + ".scale") or shards.has(base + ".weight_scale"):
            return "mxfp4"
        raise _fail(shards, w, "packed FP4 weight without .scale (MXFP4) or .weight_scale (NVFP4) next to it")
    raise _fail(shards, w, f"dtype {dt} is not a supported linear format (BF16, F8_E4M3, packed U8/I8 FP4)")


def _fp8_scale_name(shards: _Shards, base: str) -> str:
    for suffix in FP8_SCALE_SUFFIXES:
        if shards.has(base + suffix):
            return base + suffix
    raise CheckpointError(f"tensor '{base}.scale' missing: FP8 weight '{base}.weight' in {shards.where(base + '.weight')} "
                          f"has no block scale ({', '.join(FP8_SCALE_SUFFIXES)})")


def _read_linear(shards: _Shards, base: str, out: int, inp: int, device) -> tuple[str, dict[str, Tensor]]:
    """Validate then read one linear's components, returned as (format, constructor kwargs)."""
    fmt = _detect_format(shards, base)
    w = base + ".weight"
    if fmt == "bf16":
        _expect(shards, w, [out, inp], (torch.bfloat16,), fmt)
        return fmt, {"weight": shards.read(w, device)}
    if fmt == "fp8":
        _expect(shards, w, [out, inp], (torch.float8_e4m3fn,), fmt)
        sname = _fp8_scale_name(shards, base)
        grid = [-(-out // FP8_BLOCK), -(-inp // FP8_BLOCK)]
        dt, shape = shards.meta(sname)
        if dt == torch.float32 and shape in ([], [1]):  # a per-tensor scale is a uniform block grid
            scale = shards.read(sname, device).reshape(()).expand(grid).contiguous()
        else:
            _expect(shards, sname, grid, (torch.float8_e8m0fnu, torch.uint8, torch.float32), fmt)
            scale = shards.read(sname, device)
        return fmt, {"weight": shards.read(w, device), "scale": scale}
    if inp % 2:
        raise _fail(shards, w, f"packed FP4 needs an even in-features count, config gives {inp}")
    if fmt == "nvfp4":
        _expect(shards, w, [out, inp // 2], (torch.uint8,), fmt)
        _expect(shards, base + ".weight_scale", [out, inp // NVFP4_BLOCK], (torch.float8_e4m3fn,), fmt)
        parts = {"packed": w, "scale": base + ".weight_scale", "global_scale": base + ".weight_scale_2"}
        if shards.has(base + ".input_scale"):
            parts["input_scale"] = base + ".input_scale"
        for key in ("global_scale", "input_scale"):
            if key in parts:
                dt, shape = shards.meta(parts[key])
                if dt != torch.float32 or shape not in ([], [1]):
                    raise _fail(shards, parts[key], f"dtype {dt} shape {shape} but expected a float32 scalar")
        kw = {k: shards.read(n, device) for k, n in parts.items()}
        for key in ("global_scale", "input_scale"):
            if key in kw:
                kw[key] = kw[key].reshape(())
        return fmt, kw
    sname = base + ".scale" if shards.has(base + ".scale") else base + ".weight_scale"
    _expect(shards, w, [out, inp // 2], (torch.int8, torch.uint8), fmt)
    _expect(shards, sname, [out, inp // MXFP4_BLOCK], (torch.float8_e8m0fnu, torch.uint8), fmt)
    return fmt, {"packed": shards.read(w, device), "scale": shards.read(sname, device)}


_CONSTRUCTORS = {"bf16": BF16Weight, "fp8": FP8BlockWeight, "nvfp4": NVFP4Weight, "mxfp4": MXFP4Weight}


def _load_linear(shards: _Shards, base: str, out: int, inp: int, device) -> QuantizedWeight:
    fmt, kw = _read_linear(shards, base, out, inp, device)
    return _CONSTRUCTORS[fmt](**kw)


def _load_experts(shards: _Shards, spec: TensorSpec, scheme: str, layers: int, device) -> QuantizedWeight:
    """Stack E per-expert linears into one [E, out, in] weight, filling a preallocated buffer expert by expert."""
    n, out, inp = spec.shape
    stacked: dict[str, Tensor] = {}
    first_fmt = None
    for e in range(n):
        base = expert_disk_base(spec.name, e, scheme, layers)
        fmt, kw = _read_linear(shards, base, out, inp, device)
        if first_fmt is None:
            first_fmt = fmt
            stacked = {k: torch.empty((n, *t.shape), dtype=t.dtype, device=device) for k, t in kw.items()}
        elif fmt != first_fmt or kw.keys() != stacked.keys():
            raise _fail(shards, base + ".weight", f"expert {e} is {fmt} but expert 0 is {first_fmt}; "
                                                 "experts of one projection must share a format")
        for k, t in kw.items():
            stacked[k][e].copy_(t)
    return _CONSTRUCTORS[first_fmt](**stacked)


def _load_fused_experts(shards: _Shards, spec: TensorSpec, layers: int, device) -> QuantizedWeight:
    """One stacked projection from transformers' fused tensors: w1 / w3 are the two row halves of gate_up_proj."""
    n, out, inp = spec.shape
    name = fused_experts_name(spec.name, layers)
    half = {"w1": 0, "w3": 1}.get(spec.name.rsplit(".", 1)[1])
    total = out if half is None else 2 * out
    rows = (0, out) if half is None else (half * out, (half + 1) * out)
    dt, _ = shards.meta(name)
    if dt == torch.bfloat16:
        _expect(shards, name, [n, total, inp], (torch.bfloat16,), "bf16")
        return BF16Weight(shards.read(name, device, rows))
    scale = next((name + s for s in SCALE_SUFFIXES if shards.has(name + s)), None)
    if scale is None:
        raise _fail(shards, name, f"quantized fused experts without {name}_scale_inv next to them")
    if dt == torch.float8_e4m3fn:
        _expect(shards, name, [n, total, inp], (torch.float8_e4m3fn,), "fp8")
        grid = [n, -(-total // FP8_BLOCK), -(-inp // FP8_BLOCK)]
        _expect(shards, scale, grid, (torch.float8_e8m0fnu, torch.uint8, torch.float32), "fp8")
        try:
            scale_rows = (0, grid[1]) if half is None else fp8_scale_rows(out, half)
        except FusedLayoutError as e:
            raise _fail(shards, name, str(e)) from None
        return FP8BlockWeight(shards.read(name, device, rows), shards.read(scale, device, scale_rows))
    if dt in (torch.int8, torch.uint8):
        if inp % MXFP4_BLOCK:
            raise _fail(shards, name, f"packed FP4 needs in-features divisible by {MXFP4_BLOCK}, config gives {inp}")
        _expect(shards, name, [n, total, inp // 2], (torch.int8, torch.uint8), "mxfp4")
        _expect(shards, scale, [n, total, inp // MXFP4_BLOCK], (torch.float8_e8m0fnu, torch.uint8), "mxfp4")
        return MXFP4Weight(shards.read(name, device, rows), shards.read(scale, device, rows))
    raise _fail(shards, name, f"dtype {dt} is not a fused expert format (BF16, F8_E4M3, packed I8/U8 MXFP4)")


def _load_entry(shards: _Shards, spec: TensorSpec, scheme: str, layers: int, device) -> Tensor | QuantizedWeight:
    """One entry; `layers` (num_hidden_layers) is where HF-style files keep the MTP layer."""
    if spec.kind == "experts":
        if scheme == "transformers":
            return _load_fused_experts(shards, spec, layers, device)
        return _load_experts(shards, spec, scheme, layers, device)
    name = disk_name(spec.name, scheme, layers)
    if spec.kind == "linear":
        return _load_linear(shards, name, *spec.shape, device)
    if spec.kind == "dense":
        base = name.removesuffix(".weight")
        return _load_linear(shards, base, *spec.shape, device).dequantize(torch.bfloat16)
    _expect(shards, name, list(spec.shape), spec.dtypes)
    t = shards.read(name, device)
    return t.to(torch.int32) if spec.init == "tid2eid" else t


def checkpoint_specs(config: DSV4Config, layers: Iterable[int] | None = None,
                     include_globals: bool | None = None, mtp: bool = False) -> list[TensorSpec]:
    """The entries ``load_checkpoint`` returns for these arguments, in load order (the MTP layer last)."""
    if include_globals is None:
        include_globals = layers is None
    idx = range(config.num_hidden_layers) if layers is None else list(layers)
    for i in idx:
        if not isinstance(i, int) or not 0 <= i < config.num_hidden_layers:
            raise CheckpointError(f"layer {i!r} out of range 0..{config.num_hidden_layers - 1}")
    specs = [s for i in idx for s in layer_specs(config, i)]
    if mtp:
        try:
            specs += mtp_specs(config)
        except IndexError as e:
            raise CheckpointError(str(e)) from None
    return (global_specs(config) if include_globals else []) + specs


def load_checkpoint(path, config: DSV4Config | None = None, device="cpu", layers: Iterable[int] | None = None,
                    progress: Progress | None = None, *, include_globals: bool | None = None, mtp: bool = False,
                    ) -> dict[str, Tensor | QuantizedWeight]:
    """Load a checkpoint directory into official names (see the module docstring).

    ``layers``: decoder layers to load (default all). ``include_globals``: also load embed/head/norm/hc_head;
    defaults to True only when ``layers`` is None. ``mtp``: also load the MTP layer (``mtp.0.*``).
    ``progress(done, total, name)`` is called after each entry.
    """
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a checkpoint directory")
    if config is None:
        try:
            config = load_config(root)
        except ConfigError as e:
            raise CheckpointError(str(e)) from None
    specs = checkpoint_specs(config, layers, include_globals, mtp)
    shards = _Shards(root)
    scheme = detect_scheme(shards.files)
    out: dict[str, Tensor | QuantizedWeight] = {}
    for n, spec in enumerate(specs, 1):
        out[spec.name] = _load_entry(shards, spec, scheme, config.num_hidden_layers, device)
        if progress is not None:
            progress(n, len(specs), spec.name)
    return out


def checkpoint_tensor_bytes(path) -> dict[str, int]:
    """Disk name -> bytes of every tensor in a checkpoint, read from the shard headers (no tensor data)."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a checkpoint directory")
    shards = _Shards(root)
    sizes = {}
    for name in shards.files:
        dtype, shape = shards.meta(name)
        if not isinstance(dtype, torch.dtype):
            raise _fail(shards, name, f"unsupported dtype {dtype}")
        sizes[name] = math.prod(shape) * dtype.itemsize
    return sizes


# ---------------------------------------------------------------- writing

_SUFFIXES = {
    "bf16": {"weight": ".weight"},
    "fp8": {"weight": ".weight", "scale": ".scale"},
    "mxfp4": {"packed": ".weight", "scale": ".scale"},
    "nvfp4": {"packed": ".weight", "scale": ".weight_scale", "global_scale": ".weight_scale_2",
              "input_scale": ".input_scale"},
}


def _components(w: QuantizedWeight, scheme: str) -> dict[str, Tensor]:
    """Suffix -> stored tensor of a linear; HF-style files name an FP8 block scale ``.weight_scale_inv``."""
    suffixes = dict(_SUFFIXES[w.format])
    if w.format == "fp8" and scheme != "official":
        suffixes["scale"] = ".weight_scale_inv"
    return {suffixes[k]: t for k, t in w.parts().items()}


def disk_tensors(name: str, value: Tensor | QuantizedWeight, scheme: str,
                 layers: int | None = None) -> Iterator[tuple[str, Tensor]]:
    """The on-disk (name, tensor) pairs of one loaded entry in ``scheme``; stacked experts split per expert.
    ``layers`` (num_hidden_layers) places the MTP layer in HF-style names."""
    if isinstance(value, Tensor):
        yield disk_name(name, scheme, layers), value
        return
    if ".ffn.experts." in name:
        parts = _components(value, scheme)
        for e in range(value.shape[0]):
            base = expert_disk_base(name, e, scheme, layers)
            for suffix, t in parts.items():
                yield base + suffix, t[e]
        return
    base = disk_name(name, scheme, layers)
    for suffix, t in _components(value, scheme).items():
        yield base + suffix, t


class DiskLayout:
    """The on-disk (name, tensor) pairs of loaded entries in one scheme, fed one entry at a time in load order.

    transformers' scheme fuses a layer's w1 and w3 into one gate_up_proj, so w1 is held until its w3 arrives.
    """

    def __init__(self, scheme: str, layers: int):
        self.scheme = scheme
        self.layers = layers  # num_hidden_layers: where HF-style names put the MTP layer
        self._gate: QuantizedWeight | None = None

    def tensors(self, name: str, value: Tensor | QuantizedWeight) -> Iterator[tuple[str, Tensor]]:
        if self.scheme != "transformers" or ".ffn.experts." not in name:
            yield from disk_tensors(name, value, self.scheme, self.layers)
            return
        proj = name.rsplit(".", 1)[1]
        if proj == "w1":
            self._gate = value
            return
        try:
            parts = fuse_gate_up(self._gate, value) if proj == "w3" else fused_parts(value)
        except FusedLayoutError as e:
            raise CheckpointError(f"{name}: {e}") from None
        self._gate = None
        base = fused_experts_name(name, self.layers)
        for suffix, t in parts.items():
            yield base + suffix, t


class ShardWriter:
    """Write tensors into ~``shard_bytes`` safetensors shards plus the index, HF-style file names.

    A full shard goes to a background thread that writes it while the caller produces the next one; the
    hand-over waits while the previous shard is still being written, so host memory holds two shards. Use it
    as a context manager: leaving the block writes the last shard and the index (or, on an error, stops).
    """

    def __init__(self, out_dir: Path, shard_bytes: int):
        self.out, self.limit = Path(out_dir), shard_bytes
        self.pending: dict[str, Tensor] = {}
        self.pending_bytes = 0
        self.shards: list[list[str]] = []
        self.total = 0
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._write_shards, daemon=True)
        self._thread.start()

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.finish()
        else:
            self._stop()

    def add(self, name: str, t: Tensor) -> None:
        size = t.numel() * t.element_size()
        if self.pending and self.pending_bytes + size > self.limit:
            self._flush()
        self.pending[name] = t.detach().contiguous().to("cpu", copy=True)  # its own storage: safetensors needs it
        self.pending_bytes += size
        self.total += size

    def _write_shards(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            tensors, path = job
            if self._error is None:
                try:
                    save_file(tensors, str(path))
                except BaseException as e:  # reported by the producer at its next hand-over
                    self._error = e
            del tensors, job
            self._queue.task_done()

    def _check(self) -> None:
        if self._error is not None:
            raise CheckpointError(f"{self.out}: writing a shard failed: {self._error}") from None

    def _flush(self) -> None:
        self._queue.join()  # the previous shard is on disk: host memory holds this one and the next
        self._check()
        self._queue.put((self.pending, self.out / f".shard-{len(self.shards):05d}.tmp"))
        self.shards.append(list(self.pending))
        self.pending, self.pending_bytes = {}, 0

    def _stop(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def finish(self) -> Path:
        if self.pending or not self.shards:
            self._flush()
        self._stop()
        self._check()
        n, weight_map = len(self.shards), {}
        for k, names in enumerate(self.shards):
            file = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
            os.replace(self.out / f".shard-{k:05d}.tmp", self.out / file)
            weight_map.update({name: file for name in names})
        index = {"metadata": {"total_size": self.total}, "weight_map": weight_map}
        (self.out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
        return self.out
