"""Whether a file drives several GPUs from one process (the device rules read it; plain text, no libcst)."""

from __future__ import annotations

import re

# Each pattern with the words one of its matches must hold: a file without them is not searched (substring tests
# are far cheaper than the search: 0.83 -> 0.15 s over SGLang's 432k lines, the same answers).
MULTI_DEVICE = [
    (("torch.cuda.device(",), re.compile(r"torch\.cuda\.device\(")),
    (("device_count()",), re.compile(r"(?:range\(|%\s*)(?:torch\.cuda\.)?device_count\(\)")),
    (("devices", "devs", "gpus", "device_ids"),
     re.compile(r"for (?:\w+,\s*)?\w+ in (?:enumerate\()?[\w.]*(?:devices|devs|gpus|device_ids)\b")),
    (("torch.device(",), re.compile(r"torch\.device\([\"']cuda[\"'],\s*(\w+)\)\s+for\s+\1\s+in\b")),
    # `f"cuda:{i}"` computes a device; `{torch.cuda.current_device()}` and `{rank}` / `{self.local_rank}` name the
    # one device of this process
    (("cuda:{",), re.compile(r"f[\"']cuda:\{(?!(?:torch\.cuda\.)?current_device\(\)\}|[\w.]*rank\})")),
]
DEVICE_LITERAL = re.compile(r"[\"']cuda:(\d+)")


def handles_several_devices(source: str) -> bool:
    """The file drives more than one GPU in a process: `torch.cuda.device(...)`, a range over or a modulo by
    the device count, a device loop (`for i, dev in enumerate(devs)`, `[torch.device("cuda", i) for i in ...]`),
    a computed `f"cuda:{i}"`, two different `cuda:N` literals, or
    `set_device` called in two places. One `set_device(rank)` at a worker's start, one `"cuda:0"` or
    `f"cuda:{rank}"` is the process's one GPU, and `if device_count() < 2: skip` counts nothing."""
    if any(any(word in source for word in words) and pattern.search(source) for words, pattern in MULTI_DEVICE):
        return True
    return ("cuda:" in source and len(set(DEVICE_LITERAL.findall(source))) > 1) or source.count("set_device(") > 1
