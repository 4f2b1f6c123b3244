"""`graphready check TARGET`: capture, replay and compare a target's units on the GPU.

Exit 0 when every unit passes (or none was selected), 1 on findings or a unit that could not be
checked, 2 on usage errors, when no GPU is available, or when the target does not fit the GPUs, 3
when one of graphready's own checks failed on some unit (GD001; every verdict is still reported,
and --verbose prints the tracebacks).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from graphready.errors import EXIT_FINDINGS, EXIT_INTERNAL, UsageError
from graphready.findings import Severity, summarize
from graphready.harness.isolation import UnitInfo, WorkerOptions, list_target
from graphready.harness.keys import key_of, summarize_keys
from graphready.harness.result import PASS, UnitResult
from graphready.harness.target import BUILTIN_TARGETS

FORMATS = ("text", "json", "sarif", "junit")
SHARD = re.compile(r"(\d+)/(\d+)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="pkg.module:factory, path/to/file.py:factory, or a built-in target (dsv4, hf)")
    parser.add_argument("--unit", action="append", default=[], metavar="NAME", help="check only this unit (repeatable)")
    parser.add_argument("--changed-since", metavar="REF",
                        help="check only the units whose code (and what it calls) `git diff REF` touched")
    parser.add_argument("--shard", metavar="K/N", help="check only the K-th of N deterministic slices of the units")
    parser.add_argument("--steps", type=int, default=8, metavar="K", help="eager steps and replays per measurement")
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--output", metavar="FILE", help="write the report here instead of stdout")
    parser.add_argument("--gpus", type=int, default=1, metavar="N",
                        help="GPUs to use: a target placed over several GPUs (dsv4) sees all N in one worker; "
                             "other targets run N workers side by side")
    parser.add_argument("--jobs", type=int, default=1, metavar="J",
                        help="workers at a time per GPU for targets that fit one GPU (timings assume 1)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds per unit before it is killed")
    parser.add_argument("--load-timeout", type=float, default=1800.0, metavar="S",
                        help="seconds a worker may take to build the target before it is killed")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help="seconds for the whole run: then the workers are stopped and the report says which "
                             "units were not checked (exit 1)")
    parser.add_argument(
        "--capture-alloc-limit-mb", type=float, default=512.0, metavar="MB", help="GD402 warns above this capture allocation"
    )
    parser.add_argument("--fail-on", default="warning", help="lowest severity that fails the run (default: warning)")
    parser.add_argument("--cold-capture", action="store_true",
                        help="also capture each unit with no warm-up, in workers of their own, and report the "
                             "first-call work inside the capture (GD203; one more target build per lane)")
    parser.add_argument("--preset", metavar="NAME", help="dsv4 target: tiny (default), flash, pro or pro-<N>L")
    parser.add_argument("--checkpoint", metavar="DIR", help="dsv4 target: load weights from this checkpoint")
    parser.add_argument("--mtp", action="store_true",
                        help="dsv4 target: the speculative model (MTP layer, two rows per step), with the MTP "
                             "layer and the accept/advance step as units")
    parser.add_argument("--model-type", action="append", default=[], metavar="TYPE",
                        help="hf target: a transformers causal-LM model type, with a small random config (repeatable)")
    parser.add_argument("--model", metavar="PATH", help="hf target: a checkpoint directory (save_pretrained)")
    parser.add_argument("--all-architectures", action="store_true",
                        help="hf target: every causal-LM model type of the installed transformers")
    parser.add_argument("--batch-sizes", metavar="B,B", help="hf target: batch sizes, one graph each (default 1,4)")
    parser.add_argument("--compile", action="store_true",
                        help="hf target: also the step under torch.compile(mode=\"reduce-overhead\"), with the "
                             "compiler's skip reasons and graph breaks (GD601, GD602)")
    parser.add_argument("--no-layers", action="store_true",
                        help="hf target: leave out the per-decoder-layer units (one per distinct layer type)")
    parser.add_argument(
        "--lint",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="cross-check findings with `graphready lint` (default: on when libcst is installed)",
    )


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    found = SHARD.fullmatch(text.strip())
    if not found or not 1 <= int(found.group(1)) <= int(found.group(2)):
        raise UsageError(f"--shard must be K/N with 1 <= K <= N, got {text!r}")
    return int(found.group(1)), int(found.group(2))


def shard_units(units: list[UnitInfo], shard: tuple[int, int] | None) -> list[UnitInfo]:
    """The K-th of N slices: every N-th unit from the K-th, in listing order (the same on every machine)."""
    if shard is None:
        return units
    index, count = shard
    return units[index - 1 :: count]


def _validate(args) -> tuple[Severity, str]:
    if args.steps < 1:
        raise UsageError("--steps must be at least 1")
    if args.gpus < 1 or args.jobs < 1:
        raise UsageError("--gpus and --jobs must be at least 1")
    if args.timeout <= 0 or args.load_timeout <= 0 or (args.time_limit is not None and args.time_limit <= 0):
        raise UsageError("--timeout, --load-timeout and --time-limit must be positive")
    parse_shard(args.shard)
    try:
        fail_on = Severity.parse(args.fail_on)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    kwargs: dict[str, str] = {}
    if args.target == "dsv4" or BUILTIN_TARGETS.get("dsv4") == args.target:
        if args.preset and args.checkpoint:
            raise UsageError("give --preset or --checkpoint, not both")
        if args.checkpoint:
            if not Path(args.checkpoint).is_dir():
                raise UsageError(f"--checkpoint {args.checkpoint}: no such directory")
            kwargs["checkpoint"] = str(Path(args.checkpoint).resolve())
        else:
            kwargs["preset"] = args.preset or "tiny"
        if args.mtp:
            kwargs["mtp"] = True
    elif args.preset or args.checkpoint or args.mtp:
        raise UsageError("--preset, --checkpoint and --mtp apply only to the built-in dsv4 target")
    if _is_hf(args.target):
        kwargs.update(_hf_kwargs(args))
    elif args.model_type or args.model or args.all_architectures or args.batch_sizes or args.compile or args.no_layers:
        raise UsageError("--model-type, --model, --all-architectures, --batch-sizes, --compile and --no-layers apply "
                         "only to the built-in hf target")
    return fail_on, json.dumps(kwargs)


def _is_hf(target: str) -> bool:
    return target == "hf" or BUILTIN_TARGETS.get("hf") == target


def _hf_kwargs(args) -> dict:
    """The hf factory's arguments: which architectures (exactly one way of naming them), which batch sizes."""
    if sum(bool(x) for x in (args.model_type, args.model, args.all_architectures)) != 1:
        raise UsageError("hf: give one of --model-type TYPE, --model PATH or --all-architectures")
    kwargs: dict = {}
    if args.model:
        if not Path(args.model).is_dir():
            raise UsageError(f"--model {args.model}: no such directory")
        kwargs["model"] = str(Path(args.model).resolve())
    elif args.model_type:
        kwargs["model_type"] = list(args.model_type)
    else:
        kwargs["all_architectures"] = True
    if args.batch_sizes:
        try:
            kwargs["batch_sizes"] = [int(b) for b in args.batch_sizes.split(",")]
        except ValueError:
            raise UsageError(f"--batch-sizes must be comma-separated integers, got {args.batch_sizes!r}") from None
        if min(kwargs["batch_sizes"]) < 1:
            raise UsageError("--batch-sizes must be positive")
    if args.compile:
        kwargs["compile"] = True
    if args.no_layers:
        kwargs["layers"] = False
    return kwargs


def _select(units: list[UnitInfo], names: list[str]) -> list[UnitInfo]:
    if not names:
        return units
    known = {u.name: u for u in units}
    chosen = {n: [known[n]] if n in known else [u for u in units if key_of(u.name)[0] == n] for n in names}
    missing = [n for n, found in chosen.items() if not found]
    if missing:
        raise UsageError(f"no unit named {', '.join(map(repr, missing))} (available: {', '.join(known)})")
    return [u for found in chosen.values() for u in found]


def _gpu_count() -> int:
    try:
        import torch
    except ImportError:
        raise UsageError("graphready check needs PyTorch (pip install 'graphready[gpu]')") from None
    if not torch.cuda.is_available():
        raise UsageError("no CUDA GPU is available; graphready check runs units on a GPU")
    return torch.cuda.device_count()


def _say(message: str) -> None:
    print(f"graphready check: {message}", file=sys.stderr, flush=True)


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
                 settings: dict | None = None, run: dict | None = None, architectures: list | None = None) -> str:
    """The report in `fmt`; `settings` (what `check` was asked to do) go into the summary as `config`,
    `run` (target, unit selection, workers) into the document's run record, `architectures` (the hf
    target's rows) into the summary and, in text, a table at the end."""
    from graphready.output import render

    findings = [f for r in results for f in r.findings]
    summary = summarize(findings, fail_on)
    if settings is not None:
        summary["config"] = settings
    if architectures:
        summary["architectures"] = [row.to_json() for row in architectures]
    units = [r.unit_row(fail_on) for r in results]
    summarize_keys(units, summary)
    broken = [r.name for r in results if r.internal_errors()]
    if broken:
        summary["internal_errors"] = sum(len(r.internal_errors()) for r in results)
        summary.setdefault("notes", []).append(
            f"graphready's own checks failed on {len(broken)} unit(s) ({', '.join(broken)}; GD001): a bug in "
            f"graphready, not a verdict; the other verdicts stand. The run exits {EXIT_INTERNAL}: please report it "
            "to the graphready maintainers with the output of the same command with --verbose (the tracebacks)")
    report = render(fmt, findings, summary, tool="check", units=units, root=root, color=color, run=run)
    if architectures and fmt == "text":
        from graphready.harness.targets.hf_table import render_text

        report += "\n" + render_text(architectures)
    return report


def _choose(args, listed: list[UnitInfo], root: Path) -> tuple[list[UnitInfo], dict]:
    """--unit, then --changed-since, then --shard; returns the units and how they were chosen (for the JSON)."""
    units = _select(listed, args.unit)
    chosen: dict = {"listed": [u.name for u in listed]}
    if args.changed_since:
        from graphready.harness.changes import select_changed

        selection = select_changed(units, args.changed_since, root)
        chosen["changed_since"] = {"ref": args.changed_since, "why": selection.why, "untraced": selection.untraced}
        _say(f"changed since {args.changed_since}: {len(selection.units)} of {len(units)} unit(s)"
             + (f" ({', '.join(u.name for u in selection.units)})" if selection.units else ""))
        units = selection.units
    shard = parse_shard(args.shard)
    if shard is not None:
        chosen["shard"] = {"index": shard[0], "count": shard[1]}
        units = shard_units(units, shard)
        _say(f"shard {shard[0]}/{shard[1]}: {len(units)} unit(s)")
    return units, chosen


def check_settings(args: argparse.Namespace, fail_on: Severity, factory_kwargs: str) -> dict:
    """What this run was asked to do, under the option names, for the JSON summary and the report."""
    settings = {"target": args.target, "fail-on": fail_on.label, "steps": args.steps, "gpus": args.gpus,
                "jobs": args.jobs, "timeout": args.timeout, "capture-alloc-limit-mb": args.capture_alloc_limit_mb}
    if args.cold_capture:
        settings["cold-capture"] = True
    if args.time_limit is not None:
        settings["time-limit"] = args.time_limit
    if args.unit:
        settings["unit"] = list(args.unit)
    settings.update(json.loads(factory_kwargs))  # dsv4: preset, checkpoint, mtp; hf: model_type, model, ...
    return settings


def run(args: argparse.Namespace) -> int:
    fail_on, factory_kwargs = _validate(args)
    root = Path.cwd()
    started = time.monotonic()
    options = WorkerOptions(
        steps=args.steps,
        capture_alloc_limit=int(args.capture_alloc_limit_mb * 2**20),
        timeout_s=args.timeout,
        factory_kwargs=factory_kwargs,
        root=str(root),
        load_timeout_s=args.load_timeout,
        cold_capture=args.cold_capture,
        time_limit_s=args.time_limit,
        run_deadline=None if args.time_limit is None else started + args.time_limit,
    )
    listing = list_target(args.target, options, args.gpus)
    units, chosen = _choose(args, listing.units, root)
    run_info = {"target": args.target, "factory_kwargs": json.loads(factory_kwargs), "gpus": args.gpus, **chosen}
    if units:
        available = _gpu_count()
        if args.gpus > available:
            raise UsageError(f"--gpus {args.gpus} but this machine has {available} GPU(s)")
        from graphready.harness.progress import run_with_progress

        outcome = run_with_progress(args.target, units, options, args.gpus, args.jobs, listing.spans_gpus)
        results = outcome.results
        run_info["workers"] = [w.to_json() for w in outcome.workers]
    else:
        results = []
        run_info["workers"] = []
    run_info["wall_s"] = round(time.monotonic() - started, 3)
    # hf findings sit in transformers' own files: linting them indexes the whole library (minutes), so opt-in
    lint = args.lint if args.lint is not None or not _is_hf(args.target) else False
    cross_check_with_lint([f for r in results for f in r.findings], root, lint)
    architectures = None
    if _is_hf(args.target):
        from graphready.harness.targets.hf_table import architecture_rows

        architectures = architecture_rows(results, fail_on)
    report = build_report(results, fail_on, args.format, root, color=not args.output and sys.stdout.isatty(),
                          settings=check_settings(args, fail_on, factory_kwargs), run=run_info,
                          architectures=architectures)
    if args.output:
        Path(args.output).write_text(report, encoding="utf-8")
    else:
        sys.stdout.write(report)
    if getattr(args, "verbose", False):
        print_tracebacks(results)
    return exit_code(results, fail_on)


def exit_code(results: list[UnitResult], fail_on: Severity) -> int:
    """3 when one of graphready's own checks failed on any unit, else 1 unless every unit passed."""
    if any(r.internal_errors() for r in results):
        return EXIT_INTERNAL
    return 0 if all(r.status(fail_on) == PASS for r in results) else EXIT_FINDINGS


def print_tracebacks(results: list[UnitResult]) -> None:
    """--verbose: the traceback of every check of graphready's own that failed, on stderr."""
    for result in results:
        for failure in result.internal_failures:
            print(f"graphready check: unit {result.name!r}, {', '.join(failure.checks)} check failed:\n"
                  f"{failure.traceback}", file=sys.stderr, end="" if failure.traceback.endswith("\n") else "\n")
