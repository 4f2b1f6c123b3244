"""`graphready lint [PATHS]`: exit 0 clean, 1 findings at or above fail-on, 2 usage/config error."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from graphready.config import config_record, load_config
from graphready.errors import UsageError
from graphready.findings import Severity, summarize
from graphready.lint.baseline import write_baseline
from graphready.lint.engine import Selection, lint
from graphready.output import FORMATS, render

LINT_FORMATS = tuple(f for f in FORMATS if f != "junit") + ("junit",)


def _codes(values: list[str] | None) -> list[str]:
    return [code.strip().upper() for value in values or [] for code in value.split(",") if code.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=Path, help="files or directories (default: .)")
    parser.add_argument("--select", action="append", metavar="CODES", help="only these codes or prefixes (GR1,GR301)")
    parser.add_argument("--ignore", action="append", metavar="CODES", help="skip these codes or prefixes")
    parser.add_argument("--format", default="text", choices=LINT_FORMATS)
    parser.add_argument("--output", type=Path, metavar="FILE", help="write the report here instead of stdout")
    parser.add_argument("--baseline", type=Path, metavar="FILE", help="findings recorded here do not fail the run")
    parser.add_argument("--write-baseline", type=Path, metavar="FILE", help="record the current findings and exit 0")
    parser.add_argument("--fail-on", choices=[s.label for s in Severity], help="lowest severity that fails")
    parser.add_argument("--statistics", action="store_true", help="show counts per rule and how many functions were hot, and why")
    parser.add_argument("--show-chain", action="store_true", help="show the call chain that makes each finding hot")
    parser.add_argument("-j", "--jobs", type=int, default=0, metavar="N",
                        help="parallel processes (default: one per CPU, up to 8)")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write .graphready_cache")
    parser.add_argument("--config", type=Path, metavar="FILE", help="pyproject.toml to read instead of searching")


def run(args: argparse.Namespace) -> int:
    paths = args.paths or [Path(".")]
    if args.jobs < 0:
        raise UsageError("-j/--jobs must be 0 (one per CPU) or more")
    jobs = args.jobs or min(os.cpu_count() or 1, 8)
    config = load_config(paths[0], args.config)
    if args.baseline is not None:
        config.baseline = args.baseline
    if args.write_baseline is not None:
        config.baseline = None  # record everything, whatever an old baseline said
    if args.fail_on:
        config.fail_on = Severity.parse(args.fail_on)
    selection = Selection(_codes(args.select) or config.select, config.ignore + _codes(args.ignore))
    result = lint(config, paths, selection, jobs=jobs, use_cache=not args.no_cache)
    if args.write_baseline is not None:
        write_baseline(args.write_baseline, result.findings)
        print(f"graphready: recorded {len(result.findings)} findings in {args.write_baseline}", file=sys.stderr)
        return 0
    summary = summarize(result.findings, config.fail_on)
    summary.update(files=result.files, lines=result.lines, hot_functions=result.hot_functions,
                   scope=result.scope, profile=config.profile,
                   config=config_record(config, selection.select, selection.ignore))
    summary["suppressed"] = [
        {"path": f.path, "line": f.line, "rule": f.rule, "reason": f.suppression_reason or ""} for f in result.suppressed
    ]
    document = render(args.format, result.findings, summary, tool="lint", root=config.root,
                      show_chain=args.show_chain, statistics=args.statistics,
                      color=args.output is None and sys.stdout.isatty())
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(document, encoding="utf-8")
    else:
        sys.stdout.write(document)
    return 1 if summary["failing"] else 0
