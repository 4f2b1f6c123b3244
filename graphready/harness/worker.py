"""The worker process: list a target's units, or check one unit and write its report as JSON.

    python -m graphready.harness.worker list TARGET --out FILE [--factory-kwargs JSON]
    python -m graphready.harness.worker run TARGET --unit NAME --gpu K --out FILE [...]

Each unit runs in its own worker because a failed capture poisons the process's CUDA state.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _write_json(path: str, data) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def _list(args) -> int:
    from graphready.harness.frames import relative_path
    from graphready.harness.target import load_units
    from graphready.harness.unit import callable_location

    try:
        units = load_units(args.target, json.loads(args.factory_kwargs))
    except Exception as exc:  # the user's factory: report, never a traceback
        _write_json(args.out, {"error": f"{type(exc).__name__}: {exc}" if not _is_usage(exc) else str(exc)})
        return 0
    rows = []
    for unit in units:
        path, line = callable_location(unit.fn)
        rows.append(
            {"name": unit.name, "device": unit.device_label(), "path": relative_path(path, Path(args.root)), "line": line}
        )
    _write_json(args.out, {"units": rows})
    return 0


def _is_usage(exc: BaseException) -> bool:
    from graphready.errors import UsageError

    return isinstance(exc, UsageError)


def _run(args) -> int:
    import torch

    from graphready.harness.session import CheckOptions, check_unit
    from graphready.harness.target import load_units, select_unit

    def on_phase(phase: str) -> None:
        with open(args.phase_file, "w", encoding="utf-8") as handle:
            handle.write(phase)

    on_phase("load")
    has_gpu = torch.cuda.is_available()
    if has_gpu:
        torch.cuda.set_device(args.gpu)  # so that the factory's "cuda" means the assigned GPU
    try:
        unit = select_unit(load_units(args.target, json.loads(args.factory_kwargs)), args.unit)
    except Exception as exc:  # the user's factory raised, or the unit vanished since listing
        _write_json(args.out, {"fatal": f"cannot load unit {args.unit!r}: {type(exc).__name__}: {exc}"})
        return 0
    if not has_gpu:
        _write_json(args.out, {"fatal": "no CUDA GPU is available"})
        return 0
    device = torch.device(unit.device) if unit.device is not None else torch.device("cuda", args.gpu)
    if device.type != "cuda":
        _write_json(args.out, {"fatal": f"unit {unit.name!r} is on {device}; the harness checks CUDA units"})
        return 0
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.index >= torch.cuda.device_count():
        _write_json(args.out, {"fatal": f"unit {unit.name!r} wants {device} but this machine has {torch.cuda.device_count()} GPU(s)"})
        return 0
    options = CheckOptions(steps=args.steps, capture_alloc_limit=args.capture_alloc_limit, root=Path(args.root))
    result = check_unit(unit, device, options, on_phase)
    _write_json(args.out, {"result": result.to_json()})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="graphready.harness.worker")
    parser.add_argument("action", choices=("list", "run"))
    parser.add_argument("target")
    parser.add_argument("--out", required=True)
    parser.add_argument("--root", default=os.getcwd())
    parser.add_argument("--factory-kwargs", default="{}")
    parser.add_argument("--unit")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--capture-alloc-limit", type=int, default=512 * 2**20)
    parser.add_argument("--phase-file", default=os.devnull)
    args = parser.parse_args(argv)
    return _list(args) if args.action == "list" else _run(args)


if __name__ == "__main__":
    sys.exit(main())
