"""`graphready rules [CODE]`: the catalog as a table, or one rule's full doc."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table

from graphready.catalog import load_catalog
from graphready.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("code", nargs="?", help="a rule code such as GR203")
    parser.add_argument("--markdown", action="store_true", help="print raw Markdown instead of rendering it")


def run(args: argparse.Namespace) -> int:
    catalog = load_catalog()
    console = Console(soft_wrap=args.markdown)
    if args.code:
        doc = catalog.get(args.code.upper())
        if doc is None:
            raise UsageError(f"unknown rule {args.code!r}; `graphready rules` lists them")
        if args.markdown:
            console.print(doc.markdown(), markup=False, highlight=False)
        else:
            console.print(Markdown(doc.markdown()))
        return 0
    table = Table(title="graphready rules")
    for column in ("code", "name", "severity", "tool", "summary"):
        table.add_column(column)
    for doc in catalog.values():
        table.add_row(doc.code, doc.name, doc.severity.label, doc.kind, doc.summary)
    console.print(table)
    return 0
