"""`graphready` command line: one sub-command per module, each with add_arguments() and run()."""

from __future__ import annotations

import argparse
import importlib
import sys

from graphready import __version__
from graphready.errors import EXIT_INTERNAL, EXIT_USAGE, InternalError, UsageError

# sub-command -> module; modules are imported lazily so `lint` never pays for (or imports) torch.
COMMANDS = {
    "lint": ("graphready.lint.command", "statically find CUDA-graph hazards in the hot path"),
    "rules": ("graphready.rules_command", "list the rule catalog or print one rule's doc"),
    "check": ("graphready.harness.command", "capture, replay and compare units on a GPU"),
    "report": ("graphready.report.command", "merge lint/check results into a triage report"),
}

DESCRIPTION = """\
Find what breaks CUDA-graph capture and replay in PyTorch inference code:
`lint` reads the source (no GPU, no torch import), `check` runs units on a GPU,
`report` merges both into a triage report."""

EPILOG = """\
exit codes:
  0  clean: nothing at or above fail-on
  1  findings at or above fail-on (see --fail-on)
  2  usage or configuration error (the message says what to change)
  3  internal error in graphready (one line naming the file or phase; add --verbose for the
     traceback); lint reports one on a single file as a GR002 finding and reports the rest too

examples:
  graphready lint                            lint the project in the current directory
  graphready lint src/model --show-chain     only these paths, with the call chain that makes each finding hot
  graphready lint --format sarif --output graphready.sarif
  graphready rules GR101                     explain one rule
  graphready check mypkg.graph_units:units   capture and replay units on a GPU
  graphready report lint.json check.json --html report.html

Run `graphready COMMAND --help` for a command's options."""


def build_parser(command: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphready", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"graphready {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the traceback of an internal error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if name == command:
            module = importlib.import_module(module_name)
            sub_parser = sub.add_parser(name, help=help_text, description=help_text,
                                        epilog=getattr(module, "EPILOG", None),
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
            sub_parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                                    help="show the traceback of an internal error")
            module.add_arguments(sub_parser)
        else:
            sub_parser = sub.add_parser(name, help=help_text, description=help_text)
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
        return EXIT_USAGE
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return module.run(args)
    except UsageError as exc:
        print(f"graphready {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except InternalError as exc:
        if args.verbose:
            print(exc.details, file=sys.stderr, end="")
        print(f"graphready {args.command}: {exc.one_line()}", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as exc:  # a bug with no file to blame: same exit code, same one line
        error = InternalError.wrap(None, exc)
        if args.verbose:
            print(error.details, file=sys.stderr, end="")
        print(f"graphready {args.command}: {error.one_line()}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
