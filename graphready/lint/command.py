"""`graphready lint [PATHS]`: exit 0 clean, 1 findings at or above fail-on, 2 usage/config error,
3 internal error."""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import sys
from pathlib import Path

from graphready.catalog import check_code
from graphready.config import Config, config_record
from graphready.errors import EXIT_CLEAN, EXIT_FINDINGS, EXIT_INTERNAL, UsageError
from graphready.findings import Finding, Severity, summarize
from graphready.lint.analysis.candidate import INTERNAL_ERROR
from graphready.lint.baseline import write_baseline, write_output
from graphready.lint.engine import Selection
from graphready.lint.files import SOURCE_SUFFIXES, relative
from graphready.lint.progress import Progress
from graphready.lint.projects import Run, lint_projects, shown_path
from graphready.output import FORMATS, render
from graphready.output.summary import counted, summary_text

LINT_FORMATS = tuple(f for f in FORMATS if f != "junit") + ("junit",)
# What a lint run built dies with the process: the interpreter's last collections need not walk it (0.1-0.2 s of the
# wall time of a cold run over 432k lines, spent after the report was written).
atexit.register(gc.freeze)

EPILOG = """\
exit codes:
  0  nothing at or above fail-on (findings below it, or baselined, are still shown)
  1  findings at or above fail-on
  2  usage or configuration error, e.g. an unknown rule code, or a hot-paths or assume-true/false entry
     that matches nothing
  3  internal error in graphready: where it failed on one file or function, that is a GR002 finding
     (the run goes on and reports everything else; one line each on stderr, --verbose adds the
     traceback); a failure over the whole project is one line naming the phase

Each file is linted with the [tool.graphready] table of the nearest pyproject.toml above it.
Paths in every format are relative to the current directory; JSON lines and columns are 1-based.

examples:
  graphready lint                                   the project in the current directory
  graphready lint src/model.py --show-chain         report one file (the whole project is still indexed)
  graphready lint --select GR1,GR2 --ignore GR203   only host syncs and dynamic shapes, minus one rule
  graphready lint --format sarif --output graphready.sarif
  graphready lint --write-baseline graphready-baseline.json   record today's findings; only new ones fail"""


def _codes(values: list[str] | None, option: str) -> list[str]:
    codes = [code.strip().upper() for value in values or [] for code in value.split(",") if code.strip()]
    return [check_code(code, option) for code in codes]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=Path, help="files or directories (default: .)")
    parser.add_argument("--select", action="append", metavar="CODES", help="only these codes or prefixes (GR1,GR301)")
    parser.add_argument("--ignore", action="append", metavar="CODES", help="skip these codes or prefixes")
    parser.add_argument("--format", default="text", choices=LINT_FORMATS)
    parser.add_argument("--output", type=Path, metavar="FILE", help="write the report here instead of stdout")
    parser.add_argument("--baseline", type=Path, metavar="FILE", help="findings recorded here do not fail the run")
    parser.add_argument("--write-baseline", type=Path, metavar="FILE", help="record the current findings and exit 0")
    parser.add_argument("--fail-on", choices=[s.label for s in Severity], help="lowest severity that fails")
    parser.add_argument("--statistics", action="store_true",
                        help="show counts per rule, how many functions were hot and why, and what each assume-true/false"
                             " entry made cold")
    parser.add_argument("--show-chain", action="store_true", help="show the call chain that makes each finding hot")
    parser.add_argument("--list-hot", action="store_true",
                        help="list every hot function and the root that makes it hot, instead of the findings")
    parser.add_argument("-j", "--jobs", type=int, default=0, metavar="N",
                        help="parallel processes (default: one per CPU, up to 8)")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write .graphready_cache")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="pyproject.toml to use for every path instead of the nearest one")


def run(args: argparse.Namespace) -> int:
    paths = args.paths or [Path(".")]
    if args.jobs < 0:
        raise UsageError("-j/--jobs must be 0 (one per CPU) or more")
    if args.baseline is not None and args.write_baseline is not None:
        raise UsageError("--baseline and --write-baseline cannot be combined: --write-baseline records every"
                         " current finding (replacing the old baseline); --baseline compares with one")
    select, ignore = _codes(args.select, "--select"), _codes(args.ignore, "--ignore")
    projects: list[Config] = []
    selections: list[Selection] = []

    def prepare(config: Config) -> Selection:
        projects.append(config)
        if len(projects) > 1 and (args.baseline or args.write_baseline):
            option = "--baseline" if args.baseline else "--write-baseline"
            raise UsageError(f"{option} holds one project's findings, but these paths span several"
                             f" ({projects[0].root} and {config.root}): lint each project on its own")
        if args.baseline is not None:
            config.baseline = args.baseline
        if args.write_baseline is not None:
            config.baseline = None  # record everything, whatever an old baseline said
        if args.fail_on:
            config.fail_on = Severity.parse(args.fail_on)
        selections.append(Selection(select or config.select, config.ignore + ignore))
        return selections[-1]

    jobs = args.jobs or min(os.cpu_count() or 1, 8)
    progress = Progress() if args.format == "text" and sys.stderr.isatty() else None  # never in machine formats
    try:
        result = lint_projects(paths, args.config, prepare, jobs=jobs, use_cache=not args.no_cache,
                               statistics=args.statistics, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    for path in result.skipped:
        print(f"graphready lint: skipped {path}: not a {', '.join(SOURCE_SUFFIXES)} file", file=sys.stderr)
    if not any(p.result.requested for p in result.projects):
        raise UsageError(f"no {', '.join(SOURCE_SUFFIXES)} files to lint in {', '.join(map(str, paths))}"
                         " (after `exclude` and the default exclusions such as .venv and build)")
    verbose = getattr(args, "verbose", False)
    if args.write_baseline is not None:
        (project,) = result.projects
        root = project.config.root
        recorded = [_at_root(f, root) for f in result.findings if f.rule != INTERNAL_ERROR]
        write_baseline(args.write_baseline, recorded)
        print(f"graphready lint: recorded {counted(len(recorded), 'finding')} in {args.write_baseline}",
              file=sys.stderr)
        return _failed(result, verbose, EXIT_CLEAN)
    if args.list_hot:
        sys.stdout.write(_hot_listing(result))
        return _failed(result, verbose, EXIT_CLEAN)
    summary = _summary(result)
    records = [config_record(p.config, s.select, s.ignore) for p, s in zip(result.projects, selections)]
    for entry, record in zip(summary["projects"], records):
        entry["settings"] = record
    if len(records) == 1:  # one project: its settings, as the report shows them
        summary["config"] = records[0]
    document = render(args.format, result.findings, summary, tool="lint", root=Path.cwd(),
                      show_chain=args.show_chain, statistics=args.statistics,
                      color=args.output is None and sys.stdout.isatty())
    if args.output is not None:
        write_output(args.output, document, "report")
    else:
        sys.stdout.write(document)
    if args.output is not None or args.format != "text":  # what a person reads goes to stderr then
        for note in summary["notes"]:
            print(f"graphready lint: note: {note}", file=sys.stderr)
        line, _ = summary_text(summary, "lint")
        print(line + (f" Report: {args.output}" if args.output else ""), file=sys.stderr)
    return _failed(result, verbose, EXIT_FINDINGS if summary["failing"] else EXIT_CLEAN)


def _failed(result: Run, verbose: bool, exit_code: int) -> int:
    """Exit 3 where graphready failed on a file or function, whatever the findings and fail-on say (CI must
    see a bug in the tool); one line each on stderr, with the traceback first under --verbose."""
    for failure in result.failures:
        if verbose:
            print(failure.details, file=sys.stderr, end="")
        print(f"graphready lint: {failure.one_line()}", file=sys.stderr)
    return EXIT_INTERNAL if result.failures else exit_code


def _hot_listing(result: Run) -> str:
    """One line per hot function: its key, then the root it was reached from and the call count."""
    lines = []
    for project in result.projects:
        for key, chain in sorted(project.result.hot_chains.items()):
            lines.append(key if len(chain) == 1 else f"{key}  <- {chain[0]} ({len(chain) - 1} calls)")
    return "".join(f"{line}\n" for line in lines)


def _at_root(finding: Finding, root: Path) -> Finding:
    """The finding with its path relative to the project root again, as baselines record it."""
    finding.path = relative(Path(finding.path), root)
    return finding


def _summary(result: Run) -> dict:
    """Counts over every project; `failing` uses each project's own fail-on."""
    fail_on = min(p.config.fail_on for p in result.projects)
    summary = summarize(result.findings, fail_on)
    summary["failing"] = sum(summarize(p.result.findings, p.config.fail_on)["failing"] for p in result.projects)
    cwd = Path.cwd().resolve()
    counts = ("hot_functions", "reached_by_calls", "excluded_by_exclude_roots", "roots_of_classes_never_built")
    scope: dict = {"roots": {}, **dict.fromkeys(counts, 0)}
    notes = []
    for project in result.projects:
        part = project.result.scope
        for key in counts:
            scope[key] += part.get(key, 0)
        for why, count in part.get("roots", {}).items():
            scope["roots"][why] = scope["roots"].get(why, 0) + count
        notes += _notes(project.config, project.result.hot_functions, project.result.files, cwd)
    profiles = sorted({p.config.profile for p in result.projects if p.config.profile})
    summary.update(
        files=sum(p.result.files for p in result.projects),
        lines=sum(p.result.lines for p in result.projects),
        hot_functions=scope["hot_functions"],
        scope=scope,
        profile=", ".join(profiles) or None,
        projects=[{"root": shown_path(p.config.root, cwd) if p.config.root != cwd else ".",
                   "config": shown_path(p.config.source, cwd) if p.config.source else None,
                   "files": p.result.files, "hot_functions": p.result.hot_functions} for p in result.projects],
        notes=notes,
    )
    failures = result.failures
    summary["internal_errors"] = len(failures)
    summary["not_analysed"] = {"files": len({f.path for f in failures if f.unchecked and not f.function}),
                               "functions": len({(f.path, f.function) for f in failures if f.unchecked and f.function})}
    assumptions = [record for p in result.projects for record in p.result.assumptions]
    if assumptions:
        summary["assume"] = assumptions
    summary["suppressed"] = [
        {"path": f.path, "line": f.line, "rule": f.rule, "reason": f.suppression_reason or ""} for f in result.suppressed
    ]
    return summary


def _notes(config: Config, hot_functions: int, files: int, cwd: Path) -> list[str]:
    """What a person must know to trust an empty result: where the configuration came from and
    whether anything was hot at all."""
    if hot_functions or not files:
        return []
    where = shown_path(config.root, cwd) if config.root != cwd else "."
    if config.source is None:
        origin = f"no pyproject.toml above {where}"
    elif not config.configured:
        origin = f"no [tool.graphready] table in {shown_path(config.source, cwd)}"
    else:
        origin = f"no hot-paths entry, marker or capture body in {where} matched a function"
    return [f"no function is hot ({origin}), so only capture sites and parse errors were checked;"
            " name roots with hot-paths in [tool.graphready] or mark them with @graphready.hot_path"]
