"""Whether a file drives several GPUs from one process (the device rules read it; plain text, no libcst)."""

from __future__ import annotations

import re

MULTI_DEVICE = re.compile(r"torch\.cuda\.device\(|(?:range\(|%\s*)(?:torch\.cuda\.)?device_count\(\)"
                          r"|for (?:\w+,\s*)?\w+ in (?:enumerate\()?[\w.]*(?:devices|devs|gpus|device_ids)\b"
                          r"|torch\.device\([\"']cuda[\"'],\s*(\w+)\)\s+for\s+\1\s+in\b")
SET_DEVICE = re.compile(r"set_device\(")
DEVICE_LITERAL = re.compile(r"[\"']cuda:(\d+)")
# `f"cuda:{i}"` computes a device; `{torch.cuda.current_device()}` and `{rank}` / `{self.local_rank}` name the
# one device of this process
DEVICE_FSTRING = re.compile(r"f[\"']cuda:\{(?!(?:torch\.cuda\.)?current_device\(\)\}|[\w.]*rank\})")


def handles_several_devices(source: str) -> bool:
    """The file drives more than one GPU in a process: `torch.cuda.device(...)`, a range over or a modulo by
    the device count, a device loop (`for i, dev in enumerate(devs)`, `[torch.device("cuda", i) for i in ...]`),
    a computed `f"cuda:{i}"`, two different `cuda:N` literals, or
    `set_device` called in two places. One `set_device(rank)` at a worker's start, one `"cuda:0"` or
    `f"cuda:{rank}"` is the process's one GPU, and `if device_count() < 2: skip` counts nothing."""
    return bool(MULTI_DEVICE.search(source) or DEVICE_FSTRING.search(source)
                or len(set(DEVICE_LITERAL.findall(source))) > 1 or len(SET_DEVICE.findall(source)) > 1)
