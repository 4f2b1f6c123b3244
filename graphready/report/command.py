"""`graphready report results.json [more.json] --html OUT --markdown OUT [--baseline FILE]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from graphready.errors import UsageError
from graphready.lint.baseline import load_baseline
from graphready.report.html import render_html
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
    parser.add_argument("--root", type=Path, metavar="DIR",
                        help="read source snippets from here instead of the directory each results file "
                             "records (where it was made); for results made on another machine")


def run(args: argparse.Namespace) -> int:
    if args.root is not None and not args.root.is_dir():
        raise UsageError(f"--root {args.root}: no such directory")
    documents = [load_result(path) for path in args.results]
    baseline = load_baseline(args.baseline) if args.baseline else None
    triage = build_triage(documents, args.root, baseline=baseline, baseline_path=args.baseline)
    markdown_out = args.markdown if (args.markdown or args.html) else Path("-")
    if args.html:
        _write(args.html, render_html(triage))
    if markdown_out:
        _write(markdown_out, render_markdown(triage))
    return 0


def _write(path: Path, text: str) -> None:
    if str(path) == "-":
        sys.stdout.write(text)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
