"""`graphready check TARGET`: capture, replay and compare a target's units on the GPU.

Exit 0 when every unit passes, 1 on findings or a unit that could not be checked, 2 on usage
errors or when no GPU is available.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graphready.errors import UsageError
from graphready.findings import Severity, summarize
from graphready.harness.isolation import UnitInfo, WorkerOptions, list_units
from graphready.harness.result import PASS, UnitResult
from graphready.harness.target import BUILTIN_TARGETS

FORMATS = ("text", "json", "sarif", "junit")
DSV4_PRESETS = ("tiny", "pro-4L")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="pkg.module:factory, path/to/file.py:factory, or a built-in target (dsv4)")
    parser.add_argument("--unit", action="append", default=[], metavar="NAME", help="check only this unit (repeatable)")
    parser.add_argument("--steps", type=int, default=8, metavar="K", help="eager steps and replays per measurement")
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--output", metavar="FILE", help="write the report here instead of stdout")
    parser.add_argument("--gpus", type=int, default=1, metavar="N", help="run units in parallel over N GPUs")
    parser.add_argument("--jobs", type=int, default=1, metavar="J", help="units at a time per GPU (timings assume 1)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds per unit before it is killed")
    parser.add_argument(
        "--capture-alloc-limit-mb", type=float, default=512.0, metavar="MB", help="GD402 warns above this capture allocation"
    )
    parser.add_argument("--fail-on", default="warning", help="lowest severity that fails the run (default: warning)")
    parser.add_argument("--preset", choices=DSV4_PRESETS, help="dsv4 target: model preset (default tiny)")
    parser.add_argument("--checkpoint", metavar="DIR", help="dsv4 target: load weights from this checkpoint")
    parser.add_argument(
        "--lint",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="cross-check findings with `graphready lint` (default: on when libcst is installed)",
    )


def _validate(args) -> tuple[Severity, str]:
    if args.steps < 1:
        raise UsageError("--steps must be at least 1")
    if args.gpus < 1 or args.jobs < 1:
        raise UsageError("--gpus and --jobs must be at least 1")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    try:
        fail_on = Severity.parse(args.fail_on)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    kwargs: dict[str, str] = {}
    if args.target == "dsv4" or BUILTIN_TARGETS.get("dsv4") == args.target:
        kwargs["preset"] = args.preset or "tiny"
        if args.checkpoint:
            if not Path(args.checkpoint).is_dir():
                raise UsageError(f"--checkpoint {args.checkpoint}: no such directory")
            kwargs["checkpoint"] = str(Path(args.checkpoint).resolve())
    elif args.preset or args.checkpoint:
        raise UsageError("--preset and --checkpoint apply only to the built-in dsv4 target")
    return fail_on, json.dumps(kwargs)


def _select(units: list[UnitInfo], names: list[str]) -> list[UnitInfo]:
    if not names:
        return units
    known = {u.name: u for u in units}
    missing = [n for n in names if n not in known]
    if missing:
        raise UsageError(f"no unit named {', '.join(map(repr, missing))} (available: {', '.join(known)})")
    return [known[n] for n in names]


def _gpu_count() -> int:
    try:
        import torch
    except ImportError:
        raise UsageError("graphready check needs PyTorch (pip install 'graphready[gpu]')") from None
    if not torch.cuda.is_available():
        raise UsageError("no CUDA GPU is available; graphready check runs units on a GPU")
    return torch.cuda.device_count()


def _run_with_progress(target: str, units: list[UnitInfo], options: WorkerOptions, gpus: int, jobs: int):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from graphready.harness.scheduler import run_units

    console = Console(stderr=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        overall = progress.add_task(f"checking {target}", total=len(units))

        def on_start(unit: UnitInfo, gpu: int) -> None:
            progress.update(overall, description=f"checking {unit.name} on cuda:{gpu}")

        def on_done(result: UnitResult) -> None:
            progress.advance(overall)
            if not console.is_terminal:
                return
            mark = {"pass": "[green]pass[/]", "fail": "[red]fail[/]"}.get(result.status(), "[yellow]error[/]")
            progress.console.print(f"{mark} {result.name}")

        return run_units(target, units, options, gpus=gpus, jobs=jobs, on_start=on_start, on_done=on_done)


def cross_check_with_lint(findings: list, root: Path, enabled: bool | None) -> None:
    """Mark each GD finding confirmed (a GR twin at its line) or a static blind spot, in place."""
    if enabled is False or not findings:
        return
    try:
        import libcst  # noqa: F401  (lint needs it; without it there is nothing to cross-check)

        from graphready.lint.api import lint_paths
    except ImportError:
        if enabled:
            raise UsageError("--lint needs libcst and graphready.lint") from None
        return
    from graphready.merge import mark_evidence

    paths = sorted({f.path for f in findings if (root / f.path).is_file() and f.path.endswith(".py")})
    lint_findings = lint_paths([root / p for p in paths]) if paths else []
    mark_evidence(findings, lint_findings)


def build_report(results: list[UnitResult], fail_on: Severity, fmt: str, root: Path, color: bool = False,
                 settings: dict | None = None) -> str:
    """The report in `fmt`; `settings` (what `check` was asked to do) go into the summary as `config`."""
    from graphready.output import render

    findings = [f for r in results for f in r.findings]
    summary = summarize(findings, fail_on)
    if settings is not None:
        summary["config"] = settings
    units = [r.unit_row(fail_on) for r in results]
    return render(fmt, findings, summary, tool="check", units=units, root=root, color=color)


def check_settings(args: argparse.Namespace, fail_on: Severity, factory_kwargs: str) -> dict:
    """What this run was asked to do, under the option names, for the JSON summary and the report."""
    settings = {"target": args.target, "fail-on": fail_on.label, "steps": args.steps, "gpus": args.gpus,
                "jobs": args.jobs, "timeout": args.timeout, "capture-alloc-limit-mb": args.capture_alloc_limit_mb}
    if args.unit:
        settings["unit"] = list(args.unit)
    settings.update(json.loads(factory_kwargs))  # dsv4: preset, checkpoint
    return settings


def run(args: argparse.Namespace) -> int:
    fail_on, factory_kwargs = _validate(args)
    root = Path.cwd()
    options = WorkerOptions(
        steps=args.steps,
        capture_alloc_limit=int(args.capture_alloc_limit_mb * 2**20),
        timeout_s=args.timeout,
        factory_kwargs=factory_kwargs,
        root=str(root),
    )
    units = _select(list_units(args.target, options), args.unit)
    available = _gpu_count()
    if args.gpus > available:
        raise UsageError(f"--gpus {args.gpus} but this machine has {available} GPU(s)")
    results = _run_with_progress(args.target, units, options, args.gpus, args.jobs)
    cross_check_with_lint([f for r in results for f in r.findings], root, args.lint)
    report = build_report(results, fail_on, args.format, root, color=not args.output and sys.stdout.isatty(),
                          settings=check_settings(args, fail_on, factory_kwargs))
    if args.output:
        Path(args.output).write_text(report, encoding="utf-8")
    else:
        sys.stdout.write(report)
    return 0 if all(r.status(fail_on) == PASS for r in results) else 1
