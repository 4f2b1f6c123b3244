"""The `hf` target's per-decoder-layer units: one `<model_type>.layer<i>` per distinct layer type.

A layer type is the layer's class, its entry in the config's `layer_types` (sliding or full attention
share a class in Gemma 3) and the classes of its children (a dense MLP or the experts, linear or full
attention). The factory tells them apart on a meta-device copy of the small model (no weights, no
GPU), so listing builds nothing real. At its first use a layer unit prefills a StaticCache of its own,
runs one decoding step of the whole model with a hook on the layer that records the arguments the
model passed (hidden states, position embeddings, mask, the cache itself), then puts the cache back as
the prefill left it: the unit calls the layer exactly as that step did, with fresh hidden states.
"""

from __future__ import annotations

from typing import Any

LAYER = "layer"


class NotIsolated(Exception):
    """The decoder layers could not be found or their call could not be recorded; the message says why."""


def _stacks(model) -> list:
    """Where to look for the layers: the language model first (a multimodal model's vision tower has as many
    small layers), then the whole model (`get_decoder` of some names the LM head)."""
    try:
        decoder = model.get_decoder()
    except Exception:  # no such accessor, or one the class leaves unimplemented
        decoder = model
    return list(dict.fromkeys((decoder, model)))


def decoder_layers(model, config) -> Any:
    """The decoder's ModuleList of layers: its `layers`, else the first list as long as the text config's layer
    count (LongCat-Flash counts two sublayers per layer)."""
    import torch

    count = getattr(config.get_text_config(decoder=True), "num_hidden_layers", None)
    for stack in _stacks(model):
        layers = getattr(stack, "layers", None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers):
            return layers
        for module in stack.modules():
            if isinstance(module, torch.nn.ModuleList) and len(module) and len(module) == count:
                return module
    raise NotIsolated(f"no list of {count} decoder layers in {type(model).__name__}")


def signature(layer, index: int, config) -> tuple:
    types = getattr(config.get_text_config(decoder=True), "layer_types", None)
    kind = types[index] if isinstance(types, (list, tuple)) and index < len(types) else None
    return (type(layer).__name__, kind, tuple(type(child).__name__ for child in layer.children()))


def distinct_layers(model_class, config) -> list[int]:
    """The index of the first layer of each distinct type, on a meta-device copy of the model."""
    import torch

    with torch.device("meta"):
        model = model_class(config)
    seen: dict[tuple, int] = {}
    for index, layer in enumerate(decoder_layers(model, model.config)):
        seen.setdefault(signature(layer, index, model.config), index)
    return list(seen.values())


def _clone(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value  # the cache, flags: the same objects the model passed


def _snapshot(cache) -> list[dict]:
    import torch

    return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in vars(layer).items()} for layer in cache.layers]


def _put_back(cache, saved: list[dict]) -> None:
    """The cache as the snapshot found it: tensors copied in place (the layer keeps their addresses), numbers reset."""
    import torch

    for layer, fields in zip(cache.layers, saved):
        for name, value in fields.items():
            current = getattr(layer, name, None)
            if isinstance(value, torch.Tensor) and isinstance(current, torch.Tensor) and current.shape == value.shape:
                current.copy_(value)
            else:
                setattr(layer, name, value)


def record_call(model, layer, cache, tokens, positions, takes_positions: bool) -> tuple[tuple, dict]:
    """The (args, kwargs) `layer` got in one decoding step of `model`, cloned; the cache is put back after."""
    import torch

    got: list[tuple[tuple, dict]] = []

    def hook(_module, args, kwargs):
        if not got:
            got.append((_clone(args), {k: _clone(v) for k, v in kwargs.items()}))

    saved = _snapshot(cache)
    handle = layer.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        extra = {"position_ids": positions} if takes_positions else {}
        with torch.no_grad():
            model(tokens, past_key_values=cache, use_cache=True, **extra)
    finally:
        handle.remove()
    _put_back(cache, saved)
    if not got:
        raise NotIsolated(f"{type(layer).__name__} was not called by the decoding step")
    return got[0]


def first_tensor(out):
    """The layer's hidden states: older layers return a tuple whose first item they are."""
    return out[0] if isinstance(out, (tuple, list)) else out


class LayerCall:
    """One decoder layer called as the model calls it, the hidden states being the unit's input."""

    def __init__(self, arch, index: int):
        self.arch = arch
        self.index = index
        self.layer = None
        self.args: tuple = ()
        self.kwargs: dict = {}
        self.scale = 1.0

    def _record(self) -> None:
        from graphready.harness.targets.hf import NotBuilt

        if self.layer is not None:
            return
        arch = self.arch
        arch.build()
        try:
            layer = decoder_layers(arch.model, arch.model.config)[self.index]
            cache = arch.layer_cache(self.index)
            tokens, positions = arch.inputs(0)
            args, kwargs = record_call(arch.model, layer, cache, tokens, positions, arch.takes_positions)
        except NotIsolated as exc:
            raise NotBuilt(f"{arch.model_type}.{LAYER}{self.index} cannot be isolated: {exc}") from None
        hidden = args[0] if args else kwargs.pop("hidden_states", None)
        if hidden is None:
            raise NotBuilt(f"{arch.model_type}.{LAYER}{self.index} cannot be isolated: the layer got no hidden states")
        self.args, self.kwargs = tuple(args[1:]), kwargs
        self.scale = float(hidden.float().std()) or 1.0
        self.shape, self.dtype, self.device = hidden.shape, hidden.dtype, hidden.device
        self.layer = layer

    def inputs(self, seed: int) -> tuple:
        """Hidden states of the recorded shape and spread, different for every seed."""
        import torch

        self._record()
        generator = torch.Generator().manual_seed(seed)
        hidden = torch.randn(self.shape, generator=generator) * self.scale
        return (hidden.to(device=self.device, dtype=self.dtype),)

    def __call__(self, hidden):
        import torch

        with torch.no_grad():
            return first_tensor(self.layer(hidden, *self.args, **self.kwargs))
