"""`graphready` command line: one sub-command per module, each with add_arguments() and run()."""

from __future__ import annotations

import argparse
import importlib
import sys

from graphready import __version__
from graphready.errors import UsageError

# sub-command -> module; modules are imported lazily so `lint` never pays for (or imports) torch.
COMMANDS = {
    "lint": ("graphready.lint.command", "statically find CUDA-graph hazards in the hot path"),
    "rules": ("graphready.rules_command", "list the rule catalog or print one rule's doc"),
    "check": ("graphready.harness.command", "capture, replay and compare units on a GPU"),
    "report": ("graphready.report.command", "merge lint/check results into a triage report"),
}


def build_parser(command: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphready", description=__doc__)
    parser.add_argument("--version", action="version", version=f"graphready {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module_name).add_arguments(sub_parser)
        else:
            sub_parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        command = None
    parser = build_parser(command)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage error (or --help)
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return module.run(args)
    except UsageError as exc:
        print(f"graphready {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
