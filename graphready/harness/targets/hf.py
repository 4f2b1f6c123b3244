"""Built-in target `hf`: the decode step of HF transformers causal LMs on a StaticCache.

    graphready check hf --model-type llama [--model-type mixtral ...] [--batch-sizes 1,4]
    graphready check hf --all-architectures
    graphready check hf --model PATH        (a checkpoint directory written by save_pretrained)
    graphready check hf --model-type llama --compile   (also the step under torch.compile reduce-overhead)

Per architecture, the unit `<model_type>.step`, checked once per batch size (capture keys `b1`, `b4`:
one graph per batch size, as HF decodes, never replayed padded): one decoding step, `model(input_ids,
position_ids=..., past_key_values=cache, use_cache=True).logits`. transformers 5 keeps the cache
position in the StaticCache itself (a counter every step advances in place, and a Python int in
sliding-window layers), so the inputs are the new tokens and their positions, and the state is left to
discovery. The model (a small config from `hf_configs` with random weights drawn on the GPU, or the
checkpoint's own) and one StaticCache per batch size, prefilled with PROMPT tokens (the slots past them
hold stale values, as in a cache reused across requests), are built at the unit's first `make_inputs`,
not in a setup: an architecture that cannot be built, keeps no state in the StaticCache, or breaks the
CUDA context while building costs its own unit (GD201 with the reason, and a fresh worker), never the
other architectures of its lane. Besides the step: `<model_type>.layer<i>`, one per distinct decoder
layer type, called with the arguments the model gave it (hf_layers), and with `--compile`
`<model_type>.compiled`, the step under `torch.compile(mode="reduce-overhead")` (its skip reasons and
graph breaks are GD601/GD602, checks/compiled.py), whose restores also put back the cache layers'
Python counters (`Unit.host_state`).
"""

from __future__ import annotations

import difflib
import inspect
import json
import traceback
from pathlib import Path
from typing import Any

from graphready.errors import UsageError
from graphready.harness.unit import Unit

MAX_LEN = 64
PROMPT = 4  # tokens prefilled at build time, so the cache's lazy allocation happens outside the checks
BATCH_SIZES = (1, 4)
STEP = "step"
COMPILED = "compiled"  # the step under torch.compile(mode="reduce-overhead"), with --compile
KEY_PREFIX = "b"  # capture keys `b1`, `b4`: one graph per batch size, never replayed padded (as HF decodes)
# float32 (random weights): replay and eager run the same kernels; a bf16/fp16 checkpoint gets more room.
FLOAT32_TOLERANCE = 1e-4
LOW_PRECISION_TOLERANCE = 1e-2


class NotBuilt(Exception):
    """The architecture could not be built and prefilled with a StaticCache; the message says why."""


def _library_line(exc: BaseException) -> str:
    """Where in transformers (or torch) `exc` was raised, as `transformers/...py:line`."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if "/transformers/" in frame.filename:
            return f"transformers/{frame.filename.rsplit('/transformers/', 1)[1]}:{frame.lineno}"
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"


def model_config(model_class, config):
    """The config the causal-LM class takes: a composite config's text part when the class wants that."""
    wanted = getattr(model_class, "config_class", None)
    if wanted is None or isinstance(config, wanted):
        return config
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if isinstance(sub, wanted):
            return sub
    return config


def _checkpoint_config(path: str) -> dict:
    config_file = Path(path) / "config.json"
    try:
        data = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"hf --model {path}: cannot read {config_file} ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"hf --model {path}: {config_file} is not a JSON object")
    return data


def checkpoint_dtype(path: str) -> str | None:
    """The weights' dtype a checkpoint's config.json records (`dtype`, or the older `torch_dtype`)."""
    data = _checkpoint_config(path)
    return data.get("dtype") or data.get("torch_dtype")


def checkpoint_model_type(path: str) -> str:
    """The `model_type` in a checkpoint directory's config.json (a usage error when there is none)."""
    config_file = Path(path) / "config.json"
    model_type = _checkpoint_config(path).get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise UsageError(f"hf --model {path}: {config_file} names no model_type")
    return model_type


class Architecture:
    """One model type's model and StaticCaches (one per batch size), built on first use in the worker."""

    def __init__(self, model_type: str, class_name: str, batch_sizes: tuple[int, ...], checkpoint: str | None = None):
        self.model_type = model_type
        self.class_name = class_name
        self.batch_sizes = batch_sizes
        self.checkpoint = checkpoint
        self.model = None
        self.caches: dict[int, Any] = {}
        self.vocab = 0
        self.rows = 1  # input rows per sequence: one per codebook for a model that decodes several (Musicgen)
        self.takes_positions = False
        self.failure: str | None = None
        self._layer_caches: dict[int, Any] = {}

    # -- building ----------------------------------------------------------------------------------
    def _stage(self, what: str, build):
        """`build()`, or NotBuilt naming the stage, the exception and the transformers line that raised it."""
        try:
            return build()
        except Exception as exc:
            lines = str(exc).strip().splitlines()
            detail = f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
            raise NotBuilt(f"{what} raised {detail} ({_library_line(exc)})") from None

    def _model(self, device):
        import torch
        import transformers

        model_class = getattr(transformers, self.class_name, None)
        if model_class is None:
            raise NotBuilt(f"transformers has no class {self.class_name}")
        if self.checkpoint is not None:
            return self._stage("from_pretrained", lambda: model_class.from_pretrained(
                self.checkpoint, dtype="auto").to(device))
        from graphready.harness.targets.hf_configs import ShrinkError, small_config

        try:
            config = model_config(model_class, small_config(self.model_type))
        except ShrinkError as exc:
            raise NotBuilt(f"no small config: {exc}") from None
        torch.manual_seed(0)

        def draw():
            with torch.device(device):
                return model_class(config)

        return self._stage("building the model", draw)

    def _prefill(self, model, batch: int, device):
        import torch
        from transformers import StaticCache

        cache = self._stage("StaticCache(config)", lambda: StaticCache(config=model.config, max_cache_len=MAX_LEN))
        prompt = torch.arange(1, PROMPT + 1, device=device).repeat(batch * self.rows, 1)

        def run():
            with torch.no_grad():
                model(prompt, past_key_values=cache, use_cache=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # an asynchronous failure of the prefill is the build's

        self._stage("the prefill with a StaticCache", run)
        if not any(getattr(layer, "is_initialized", False) for layer in cache.layers):
            raise NotBuilt("the prefill kept nothing in the StaticCache: the model keeps no state in it (its own "
                           "cache class, or none), so a StaticCache decode step does not apply")
        self._stage("filling the unused cache slots", lambda: stale_slots(cache, device))
        return cache

    def build(self, device=None) -> None:
        """Build once; a failure is remembered and raised again (as NotBuilt) on every later use."""
        import torch

        if self.model is not None:
            return
        if self.failure is not None:
            raise NotBuilt(self.failure)
        device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        try:
            model = self._model(device)
            model.eval()
            if not type(model)._supports_default_dynamic_cache():
                raise NotBuilt(f"{type(model).__name__} keeps its own cache and takes no Cache object: "
                               "a StaticCache decode step does not apply")
            self.rows = int(getattr(model.config.get_text_config(decoder=True), "num_codebooks", 1) or 1)
            caches = {batch: self._prefill(model, batch, device) for batch in self.batch_sizes}
        except NotBuilt as exc:
            self.failure = f"{self.model_type}: {exc}"
            raise NotBuilt(self.failure) from None
        config = model.config.get_text_config(decoder=True)
        self.vocab = int(getattr(config, "vocab_size", 0) or getattr(model.config, "vocab_size", 0))
        self.takes_positions = "position_ids" in inspect.signature(model.forward).parameters
        self.model, self.caches = model, caches

    def layer_cache(self, index: int):
        """A batch-1 StaticCache, prefilled, of layer unit `index`'s own: its calls move neither the steps'
        caches nor the masks recorded for the other layer units."""
        if index not in self._layer_caches:
            self.build()
            device = next(self.model.parameters()).device
            try:
                self._layer_caches[index] = self._prefill(self.model, 1, device)
            except NotBuilt as exc:
                raise NotBuilt(f"{self.model_type}: {exc}") from None
        return self._layer_caches[index]

    def config(self):
        """The config the model will be built with (small, or the checkpoint's), without building it."""
        import transformers

        model_class = getattr(transformers, self.class_name)
        if self.checkpoint is not None:
            return model_config(model_class, transformers.AutoConfig.from_pretrained(self.checkpoint))
        from graphready.harness.targets.hf_configs import small_config

        return model_config(model_class, small_config(self.model_type))

    def cache_layers(self) -> list:
        """The layers of the steps' StaticCaches, whose Python counters the compiled unit's restores put back.

        The compiler guards a sliding-window layer's Python offset, so a compiled step is right as the
        counter advances; two of its calls compared "from the same state" must start from the same count.
        The captured step leaves them to advance: the offset its graph froze is what GD301 reports."""
        return [layer for cache in self.caches.values() for layer in cache.layers]

    # -- the unit ----------------------------------------------------------------------------------
    def inputs(self, seed: int, key: str = f"{KEY_PREFIX}1") -> tuple:
        """New tokens (never the special ids a small config moved to the vocabulary's top) at position PROMPT,
        one row per sequence of the key's batch size (per codebook, for a model that decodes several)."""
        import torch

        from graphready.harness.targets.hf_configs import SPECIAL_IDS

        self.build()
        batch = batch_size(key) * self.rows
        device = next(self.model.parameters()).device
        generator = torch.Generator().manual_seed(seed)
        high = self.vocab if self.checkpoint is not None else self.vocab - SPECIAL_IDS
        tokens = torch.randint(0, max(high, 1), (batch, 1), generator=generator)
        return tokens.to(device), torch.full((batch, 1), PROMPT, device=device)

    def step(self, input_ids, position_ids):
        """One decoding step on the StaticCache of this batch size: the next token's logits."""
        import torch

        cache = self.caches[input_ids.shape[0] // self.rows]
        extra = {"position_ids": position_ids} if self.takes_positions else {}
        with torch.no_grad():
            out = self.model(input_ids, past_key_values=cache, use_cache=True, **extra)
        return out.logits


def stale_slots(cache, device) -> None:
    """Random values in the key/value slots past what the prefill wrote, the same for every build.

    A StaticCache reused across requests holds old tokens there. Zeros would hide a mask that reads one
    slot too far: a sliding-window layer's Python offset frozen by the graph shows one more or one fewer
    slot, which with zeros moves the logits of a model like ModernBERT-decoder by less than 1e-4 and
    with stale values by 1e-3, as eager decoding past the capture does."""
    import torch
    from transformers.cache_utils import StaticLayer

    generator = torch.Generator(device=device).manual_seed(0)
    for layer in cache.layers:
        if isinstance(layer, StaticLayer) and getattr(layer, "is_initialized", False):
            written = int(layer.cumulative_length)
            for slots in (layer.keys[:, :, written:], layer.values[:, :, written:]):
                slots.normal_(generator=generator)


def batch_size(key: str) -> int:
    return int(str(key).removeprefix(KEY_PREFIX))


def _known_types() -> dict[str, str]:
    from graphready.harness.targets.hf_configs import causal_lm_types

    try:
        return causal_lm_types()
    except ImportError as exc:
        raise UsageError(f"the hf target needs transformers ({exc})") from None


def architectures(model_type: list[str] | str | None = None, model: str | None = None,
                  all_architectures: bool = False) -> list[tuple[str, str]]:
    """(model_type, causal-LM class name) of each architecture asked for, in order."""
    if sum(bool(x) for x in (model_type, model, all_architectures)) != 1:
        raise UsageError("hf: give one of --model-type TYPE, --model PATH or --all-architectures")
    known = _known_types()
    if all_architectures:
        return list(known.items())
    wanted = [checkpoint_model_type(model)] if model else ([model_type] if isinstance(model_type, str) else model_type)
    unknown = [t for t in wanted if t not in known]
    if unknown:
        hints = {t: difflib.get_close_matches(t, list(known), n=3) for t in unknown}
        said = "; ".join(f"{t!r}" + (f" (did you mean {', '.join(h)}?)" if h else "") for t, h in hints.items())
        raise UsageError(f"hf: transformers has no causal LM for model type {said}")
    return [(t, known[t]) for t in dict.fromkeys(wanted)]


def _layer_units(arch: Architecture, tolerance: float) -> list[Unit]:
    """`<type>.layer<i>`, one per distinct decoder layer type; `layer0` alone when the types cannot be told
    apart without building (the unit then says why at its first use)."""
    import transformers

    from graphready.harness.targets.hf_layers import LAYER, LayerCall, distinct_layers

    try:
        indices = distinct_layers(getattr(transformers, arch.class_name), arch.config())
    except Exception:  # no small config, a class that cannot be built on the meta device: the build says why
        indices = [0]
    calls = [LayerCall(arch, index) for index in indices]
    return [Unit(f"{arch.model_type}.{LAYER}{call.index}", call, call.inputs, atol=tolerance, rtol=tolerance)
            for call in calls]


def factory(model_type: list[str] | str | None = None, model: str | None = None, all_architectures: bool = False,
            batch_sizes: list[int] | tuple[int, ...] = BATCH_SIZES, layers: bool = True,
            compile: bool = False, only: list[str] | None = None) -> list[Unit]:
    """Per architecture: `<type>.step` keyed by batch size, `<type>.layer<i>` per distinct decoder layer
    (`layers`), and `<type>.compiled`, the step under torch.compile(mode="reduce-overhead") (`compile`);
    nothing is built here. `only` (a worker's unit names) keeps just their architectures: listing the layer
    units of all ~180 types takes seconds, which every replacement worker would pay again."""
    batch_sizes = tuple(dict.fromkeys(int(b) for b in batch_sizes))
    if not batch_sizes or min(batch_sizes) < 1:
        raise UsageError("hf: --batch-sizes must be positive integers")
    units = []
    needed = None if only is None else {unit_name.split(".", 1)[0] for unit_name in only}
    for name, class_name in architectures(model_type, model, all_architectures):
        if needed is not None and name not in needed:
            continue
        arch = Architecture(name, class_name, batch_sizes, checkpoint=str(Path(model).resolve()) if model else None)
        tolerance = FLOAT32_TOLERANCE if model is None or checkpoint_dtype(model) == "float32" else LOW_PRECISION_TOLERANCE
        keys = tuple(f"{KEY_PREFIX}{batch}" for batch in batch_sizes)
        units.append(Unit(f"{name}.{STEP}", arch.step, arch.inputs, keys=keys, atol=tolerance, rtol=tolerance))
        if layers:
            units += _layer_units(arch, tolerance)
        if compile:
            import torch

            compiled = torch.compile(arch.step, mode="reduce-overhead")
            units.append(Unit(f"{name}.{COMPILED}", compiled, arch.inputs, keys=keys, atol=tolerance, rtol=tolerance,
                              host_state=arch.cache_layers))
    return units
