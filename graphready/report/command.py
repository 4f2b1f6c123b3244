"""`graphready report results.json [more.json] --html OUT --markdown OUT [--baseline FILE] [--merged OUT.json]`.

The shards of a `graphready check --shard K/N` run are merged into one document first (see
`graphready.report.shards`); with `--merged` that document is written and decides the exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graphready.errors import EXIT_INTERNAL, UsageError
from graphready.lint.baseline import load_baseline
from graphready.report.html import render_html
from graphready.report import shards
from graphready.report.inputs import load_result
from graphready.report.markdown import render_markdown
from graphready.report.triage import build_triage


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS.json",
                        help="`graphready lint --format json` or `graphready check --format json` output")
    parser.add_argument("--html", type=Path, metavar="OUT", help="write a self-contained HTML report here")
    parser.add_argument("--markdown", type=Path, metavar="OUT",
                        help="write a Markdown report here ('-' for standard output)")
    parser.add_argument("--baseline", type=Path, metavar="FILE",
                        help="a lint baseline file: report what is new and what was fixed since it")
    parser.add_argument("--merged", type=Path, metavar="OUT.json",
                        help="write the merged check document of the shards given here; exit 1 unless every unit "
                             "passed, 3 when one of graphready's own checks failed (GD001)")
    parser.add_argument("--root", type=Path, metavar="DIR",
                        help="read source snippets from here instead of the directory each results file "
                             "records (where it was made); for results made on another machine")


def run(args: argparse.Namespace) -> int:
    if args.root is not None and not args.root.is_dir():
        raise UsageError(f"--root {args.root}: no such directory")
    documents = shards.merge_shards([load_result(path) for path in args.results])
    status = _write_merged(args.merged, documents) if args.merged else 0
    baseline = load_baseline(args.baseline) if args.baseline else None
    triage = build_triage(documents, args.root, baseline=baseline, baseline_path=args.baseline)
    markdown_out = args.markdown if (args.markdown or args.html or args.merged) else Path("-")
    if args.html:
        _write(args.html, render_html(triage))
    if markdown_out:
        _write(markdown_out, render_markdown(triage))
    return status


def _write_merged(path: Path, documents) -> int:
    checks = [doc for doc in documents if doc.tool == "check"]
    if len(checks) != 1:
        raise UsageError(f"--merged needs the check results of exactly one target, got {len(checks)}")
    _write(path, json.dumps(shards.to_json(checks[0]), indent=2) + "\n")
    passed, line = shards.verdict(checks[0])
    print(f"graphready report: {line}", file=sys.stderr)
    if any(f.internal for f in checks[0].findings):  # graphready's own checks failed: exit 3, as `check` did
        return EXIT_INTERNAL
    return 0 if passed else 1


def _write(path: Path, text: str) -> None:
    if str(path) == "-":
        sys.stdout.write(text)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
