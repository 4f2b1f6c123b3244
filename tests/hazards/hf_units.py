"""A real client of state discovery: HF transformers' Llama decoding one token with `StaticCache`.

StaticCache's layers keep, next to the keys and values a user would declare as state, a position
counter (`cumulative_length`) that every decode step advances in place. A unit declaring only the
keys and values is not reproducible even in eager mode; `check` must say so (GD306, naming the
counter) instead of blaming the replay. With the state left out (discovered) or complete, the
step passes. Random weights, 2 layers, hidden size 256; needs `transformers` (tests skip without).

The Llama and Mistral decoders with 1024-wide vocabularies and MLPs are the idiom the pointer
audit once misread: a closure over `model` and `cache`, whose 1 MiB weights it must find through
the closure (no GD307). Mistral's sliding-window cache layer also counts positions in a Python
int that sizes the attention mask, which a captured graph freezes: a true GD301.
"""

from __future__ import annotations

import torch

from graphready.harness import Unit

VOCAB = 512
PROMPT = 4  # tokens prefilled at build time, so the cache's lazy allocation happens outside the checks
MAX_LEN = 64


def _architecture(name: str):
    import transformers

    prefix = {"llama": "Llama", "mistral": "Mistral"}[name]
    return getattr(transformers, f"{prefix}Config"), getattr(transformers, f"{prefix}ForCausalLM")


class TinyDecoder:
    """A random-weight decoder (Llama or Mistral), a prefilled StaticCache and a `decode(token, position)` step."""

    def __init__(self, device: str = "cuda", architecture: str = "llama", vocab: int = VOCAB, mlp: int = 512) -> None:
        from transformers import StaticCache

        config_class, model_class = _architecture(architecture)
        torch.manual_seed(0)
        config = config_class(
            vocab_size=vocab, hidden_size=256, intermediate_size=mlp, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=MAX_LEN,
        )  # fmt: skip
        self.device = torch.device(device)
        self.architecture = architecture
        self.vocab = vocab
        model = model_class(config).to(self.device).eval()
        cache = StaticCache(config=config, max_cache_len=MAX_LEN)
        with torch.no_grad():
            prompt = torch.arange(1, PROMPT + 1, device=self.device)[None]
            model(prompt, past_key_values=cache, cache_position=torch.arange(PROMPT, device=self.device), use_cache=True)
        self.cache = cache

        def decode(token, position):
            with torch.no_grad():
                out = model(token, past_key_values=cache, cache_position=position, position_ids=position[None], use_cache=True)
            return out.logits

        self.decode = decode

    def inputs(self, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        token = torch.randint(0, self.vocab, (1, 1), generator=generator)
        return token.to(self.device), torch.tensor([PROMPT], device=self.device)

    def keys_and_values(self) -> list[torch.Tensor]:
        return [t for layer in self.cache.layers for t in (layer.keys, layer.values)]

    def complete_state(self) -> list[torch.Tensor]:
        return self.keys_and_values() + [layer.cumulative_length for layer in self.cache.layers]


def hf_units() -> list[Unit]:
    declared, discovered, complete = TinyDecoder(), TinyDecoder(), TinyDecoder()
    llama, mistral = (TinyDecoder(architecture=name, vocab=1024, mlp=1024) for name in ("llama", "mistral"))
    tolerance = {"atol": 1e-4, "rtol": 1e-4}
    return [
        Unit("hf_static_cache_declared_kv", declared.decode, declared.inputs, state=declared.keys_and_values, **tolerance),
        Unit("hf_static_cache_discovered", discovered.decode, discovered.inputs, **tolerance),
        Unit("hf_static_cache_complete", complete.decode, complete.inputs, state=complete.complete_state, **tolerance),
        Unit("hf_llama_closure", llama.decode, llama.inputs, **tolerance),
        Unit("hf_mistral_closure", mistral.decode, mistral.inputs, **tolerance),
    ]
