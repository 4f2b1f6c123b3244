"""How fast is `graphready lint` next to ruff on a large real code base, and where does the time go?

Two trees from the pinned `sglang` wheel (SGLANG_PIN, downloaded once with `pip download --no-deps` and
cached under ~/.cache/graphready-bench/, shared with the engine benchmarks):

- `sglang`: `sglang/srt/models`, `srt/layers` and `srt/model_executor` (~432k lines) with `profile = "sglang"`,
  the tree a user runs in pre-commit;
- `100k`: the first ~100k lines of `sglang/srt/models` with every `forward` as a root.

Each is timed in fresh processes by the wall clock, in one run: `graphready lint` cold (--no-cache), warm
(nothing changed since the run that filled the cache), one file changed (a comment appended: no index changes),
one function edited (a statement inserted: the file's lines move, its index and the edited function change, the
hot path holds), and `ruff check --select ALL --no-cache` on the same tree; the ratio to ruff is the number to
compare (the machine may be shared). The findings of the cold, warm and one-changed runs must be the same, and
the edited run's the cold run's with the lines below the edit one further down; `--record DIR` writes them,
`--expect DIR` fails when they differ from a recorded run (an optimisation must not change results).

    python benchmarks/lint_speed.py                       # both trees
    python benchmarks/lint_speed.py --trees sglang --profile   # where a cold and a warm run spend their time
    python benchmarks/lint_speed.py --repeat 3              # medians of 3 rounds (a shared machine drifts)
    python benchmarks/lint_speed.py --tree ~/src/vllm     # any tree of .py/.cu files, every forward a root

Targets (issue 30): cold at most 4x ruff (goal 2x), warm under 0.3 s per 100k lines, one file changed under 1 s.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

CACHE_DIR = Path.home() / ".cache" / "graphready-bench"
SGLANG_PIN = "0.5.23"
REPO_ROOT = Path(__file__).resolve().parents[1]  # lint runs from here, so a checkout works uninstalled
SOURCE_SUFFIXES = (".py", ".cu", ".cuh")
COLD_TARGET_X_RUFF = 4.0
WARM_TARGET_S_PER_100K = 0.3
CHANGED_TARGET_S = 1.0
CHANGED_FILE = "sglang/srt/layers/linear.py"  # a layer file most models reach: its change re-analyses hot code


@dataclass(frozen=True)
class TreeSpec:
    name: str
    prefixes: tuple[str, ...]
    settings: str  # the [tool.graphready] body
    max_lines: int = 0  # 0 keeps everything


TREES = {
    "sglang": TreeSpec("sglang", ("sglang/srt/models/", "sglang/srt/layers/", "sglang/srt/model_executor/"),
                       'profile = "sglang"\n'),
    "100k": TreeSpec("100k", ("sglang/srt/models/",), 'hot-paths = ["*:*.forward"]\n', 100_000),
}
# phases of one lint process, timed by wrapping these functions (exclusive of the phases nested in them)
HOT_PATH = "hot path (profile roots, exclusions, walk)"
FINDINGS = "findings (branch tests, suppressions)"
PHASES = [
    ("file discovery + reading", "graphready.lint.engine", "discover"),
    ("file discovery + reading", "graphready.lint.engine", "_read"),
    ("cache load (JSON + decode)", "graphready.lint.cache", "LintCache._load"),
    ("cache load (JSON + decode)", "graphready.lint.cache", "LintCache.get"),
    ("stdlib-ast parse + index", "graphready.lint.engine", "LintRun._index"),
    (HOT_PATH, "graphready.lint.engine", "Project"),
    (HOT_PATH, "graphready.lint.engine", "LintRun._check_roots"),
    (HOT_PATH, "graphready.lint.engine", "LintRun._check_assumptions"),
    (HOT_PATH, "graphready.lint.engine", "find_hot"),
    ("libcst rule visitors", "graphready.lint.engine", "LintRun._analyze"),
    (FINDINGS, "graphready.lint.engine", "LintRun._finding"),
    (FINDINGS, "graphready.lint.engine", "LintRun._suppress"),
    (FINDINGS, "graphready.lint.engine", "assign_fingerprints"),
    ("cache save", "graphready.lint.cache", "LintCache.save"),
]
STARTUP = "startup (imports)"
OTHER = "other (config, pool start-up, output)"


class BenchError(Exception):
    """A setup step failed (download, unpacking, a crashed lint run): message, exit 2."""


@dataclass
class Timing:
    tool: str
    mode: str
    seconds: float  # wall clock: what a user waits
    cpu_seconds: float  # user + system of the process and its workers
    findings: str = ""  # the normalised findings (graphready only), compared between modes
    expected: str = ""  # for the edited run: the cold run's findings, moved as the edit moved their lines


def sglang_wheel(cache_dir: Path) -> Path:
    """The cached sglang wheel of SGLANG_PIN, downloading it the first time."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    pattern = f"sglang-{SGLANG_PIN}-*.whl"
    wheels = sorted(cache_dir.glob(pattern))
    if not wheels:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", f"sglang=={SGLANG_PIN}", "--no-deps", "-d", str(cache_dir)],
            check=False, capture_output=True, text=True,
        )
        wheels = sorted(cache_dir.glob(pattern))
        if proc.returncode != 0 or not wheels:
            raise BenchError(f"could not download the sglang {SGLANG_PIN} wheel:\n{proc.stderr.strip()}")
    return wheels[0]


def budgeted(sources: list[tuple[str, bytes]], prefixes: tuple[str, ...], max_lines: int) -> list[tuple[str, bytes]]:
    """Sources under the prefixes, in path order, until max_lines is reached (0 keeps everything)."""
    kept, total = [], 0
    for name, data in sorted(s for s in sources if s[0].startswith(prefixes)):
        if max_lines and total >= max_lines:
            break
        kept.append((name, data))
        total += data.count(b"\n")
    return kept


def wheel_sources(wheel: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(wheel) as archive:
        return [(n, archive.read(n)) for n in archive.namelist() if n.endswith(SOURCE_SUFFIXES)]


def tree_sources(tree: Path) -> list[tuple[str, bytes]]:
    if not tree.is_dir():
        raise BenchError(f"--tree {tree}: not a directory")
    return [
        (p.relative_to(tree).as_posix(), p.read_bytes())
        for p in tree.rglob("*")
        if p.suffix in SOURCE_SUFFIXES and p.is_file() and ".graphready_cache" not in p.parts
    ]


def write_project(root: Path, sources: list[tuple[str, bytes]], settings: str) -> int:
    """Lay the sources out under root with a pyproject.toml; returns the line count."""
    for name, data in sources:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (root / "pyproject.toml").write_text(f"[tool.graphready]\n{settings}", encoding="utf-8")
    return sum(data.count(b"\n") for _, data in sources)


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def installed_env() -> dict[str, str]:
    """The environment of a timed run: bytecode cached as in an installed package (pip compiles it at install), even
    where this shell sets PYTHONDONTWRITEBYTECODE (compiling graphready and libcst from source cost every run
    0.12-0.2 s); the bytecode goes under the benchmark's cache, not into the checkout."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(CACHE_DIR / "pycache")}


def compile_bytecode() -> None:
    """Write the bytecode of everything a lint run imports before the first timed run."""
    imports = "import graphready.cli, graphready.lint.command, graphready.lint.analysis.analyzer"
    subprocess.run([sys.executable, "-c", imports], check=True, cwd=REPO_ROOT, env=installed_env())


def timed(cmd: list[str], ok: tuple[int, ...]) -> tuple[float, float]:
    cpu_start, start = children_cpu_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=REPO_ROOT, env=installed_env())
    seconds, cpu_seconds = time.perf_counter() - start, children_cpu_seconds() - cpu_start
    if proc.returncode not in ok:
        raise BenchError(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stderr.strip()[-2000:]}")
    return seconds, cpu_seconds


def lint_cmd(project: Path, jobs: int, use_cache: bool, report: Path) -> list[str]:
    cmd = [sys.executable, "-m", "graphready.cli", "lint", str(project), "-j", str(jobs),
           "--format", "json", "--output", str(report)]
    return cmd + ([] if use_cache else ["--no-cache"])


def normalised_findings(report: Path, project: Path) -> str:
    """The findings as JSON, sorted, paths relative to the project: what must not change between cold and
    warm runs or after an optimisation."""
    findings = json.loads(report.read_text(encoding="utf-8"))["findings"]
    for finding in findings:
        finding["path"] = finding["path"].removeprefix(f"{project}/")
    return _sorted(findings)


def _sorted(findings: list[dict]) -> str:
    return json.dumps(sorted(findings, key=lambda f: json.dumps(f, sort_keys=True)), indent=1, sort_keys=True)


def moved(findings: str, path: str, line: int) -> str:
    """Normalised findings as inserting one line before `line` of `path` leaves them."""
    found = json.loads(findings)
    for finding in found:
        if finding["path"] == path:
            finding["line"] += finding["line"] >= line
            finding["end_line"] += finding["end_line"] >= line
    return _sorted(found)


def lint_once(project: Path, jobs: int, use_cache: bool, mode: str) -> Timing:
    report = project.parent / f"report-{mode}.json"
    seconds, cpu = timed(lint_cmd(project, jobs, use_cache, report), ok=(0, 1))
    return Timing("graphready", mode, seconds, cpu, normalised_findings(report, project))


def ruff_once(project: Path) -> Timing:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        raise BenchError("ruff is not installed (pip install ruff): the comparison needs it")
    seconds, cpu = timed([ruff, "check", "--select", "ALL", "--no-cache", "--quiet", "--exit-zero", str(project)],
                         ok=(0,))
    return Timing("ruff", "--select ALL", seconds, cpu)


def change_one_file(project: Path) -> None:
    """Append a comment to one file (CHANGED_FILE, or the largest file): its digest changes, its code does not."""
    target = project / CHANGED_FILE
    if not target.is_file():
        target = max(project.rglob("*.py"), key=lambda p: p.stat().st_size)
    with target.open("a", encoding="utf-8") as handle:
        handle.write("# changed by lint_speed.py\n")


def edit_one_function(project: Path) -> tuple[str, int]:
    """Insert a statement at the top of the first function of CHANGED_FILE (or the largest file) that has a body of
    statements: its code changes and every line below it moves, as after most real edits (a comment at the end
    changes neither), so the file is indexed again and what the hot walk read of it is checked. Returns the file
    (relative to the project) and the line the statement now holds."""
    target = project / CHANGED_FILE
    if not target.is_file():
        target = max(project.rglob("*.py"), key=lambda p: p.stat().st_size)
    lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(node.body[0] for node in ast.walk(ast.parse("".join(lines)))
                 if isinstance(node, ast.FunctionDef) and node.body[0].lineno > node.lineno
                 and not lines[node.body[0].lineno - 1][:node.body[0].col_offset].strip())  # on a line of its own
    lines.insert(first.lineno - 1, " " * first.col_offset + "_edited_by_lint_speed = 0\n")
    target.write_text("".join(lines), encoding="utf-8")
    return target.relative_to(project).as_posix(), first.lineno


def run_tree(project: Path, jobs: int) -> list[Timing]:
    timings = [ruff_once(project), lint_once(project, jobs, use_cache=False, mode="cold")]
    shutil.rmtree(project / ".graphready_cache", ignore_errors=True)
    lint_once(project, jobs, use_cache=True, mode="fill")
    timings.append(lint_once(project, jobs, use_cache=True, mode="warm"))
    change_one_file(project)
    timings.append(lint_once(project, jobs, use_cache=True, mode="one changed"))
    path, line = edit_one_function(project)
    edited = lint_once(project, jobs, use_cache=True, mode="one edited")
    timings.append(replace(edited, expected=moved(timings[1].findings, path, line)))
    timings.append(ruff_once(project))
    return timings


def cold_ratio(timings: list[Timing]) -> float:
    """A round's cold run over the faster of its two ruff runs."""
    cold = next(t.seconds for t in timings if t.mode == "cold")
    return cold / min(t.seconds for t in timings if t.tool == "ruff")


def median_round(rounds: list[list[Timing]]) -> list[Timing]:
    """Each run's median time over the rounds (a shared machine's speed drifts by tens of percent within minutes;
    the median of interleaved rounds is the steadier number)."""
    return [replace(first, seconds=statistics.median(r[i].seconds for r in rounds),
                    cpu_seconds=statistics.median(r[i].cpu_seconds for r in rounds))
            for i, first in enumerate(rounds[0])]


def render(label: str, files: int, lines: int, rounds: list[list[Timing]]) -> str:
    """The table of one round, or of the medians of several, whose cold ratio is the median of the rounds'
    ratios (each from its own ruff runs)."""
    timings = median_round(rounds)
    ratio = statistics.median(cold_ratio(r) for r in rounds)
    ruff = min(t.seconds for t in timings if t.tool == "ruff")
    medians = f", medians of {len(rounds)} rounds" if len(rounds) > 1 else ""
    rows = [f"{label}: {files:,} files, {lines:,} lines{medians}", ""]
    header = f"{'tool':<11}{'run':<14}{'seconds':>9}{'cpu s':>8}{'s/100k':>8}{'x ruff':>8}  target"
    rows += [header, "-" * len(header)]
    for t in timings:
        per_100k = t.seconds * 100_000 / max(lines, 1)
        verdict = ""
        if t.mode == "cold":
            verdict = f"{'met' if ratio <= COLD_TARGET_X_RUFF else 'MISSED'} (<= {COLD_TARGET_X_RUFF:g}x ruff)"
        elif t.mode == "warm":
            verdict = f"{'met' if per_100k <= WARM_TARGET_S_PER_100K else 'MISSED'} (<= {WARM_TARGET_S_PER_100K} s/100k)"
        elif t.mode in ("one changed", "one edited"):
            verdict = f"{'met' if t.seconds < CHANGED_TARGET_S else 'MISSED'} (< {CHANGED_TARGET_S:g} s)"
        rows.append(f"{t.tool:<11}{t.mode:<14}{t.seconds:>9.2f}{t.cpu_seconds:>8.2f}{per_100k:>8.2f}"
                    f"{ratio if t.mode == 'cold' else t.seconds / ruff:>8.1f}  {verdict}")
    if len(rounds) > 1:
        rows.append("cold / ruff by round: " + ", ".join(f"{cold_ratio(r):.1f}" for r in rounds))
    return "\n".join(rows)


# -- --profile -------------------------------------------------------------------------------------------
def phase_run(project: str, use_cache: bool, jobs: int, report: str) -> None:
    """In a fresh process: lint once with the PHASES wrapped in wall-clock timers; print the times as JSON.
    A phase's time excludes the phases nested in it (the cache reads inside indexing count as cache load)."""
    started = time.perf_counter()
    sys.path.insert(0, str(REPO_ROOT))
    from graphready import cli  # startup: every import a lint run makes

    imported = time.perf_counter()
    totals: dict[str, float] = {}
    nested: list[float] = []  # per open phase, the time spent in phases inside it

    def wrap(label: str, function):
        def timed_phase(*args, **kwargs):
            nested.append(0.0)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                totals[label] = totals.get(label, 0.0) + spent - nested.pop()
                if nested:
                    nested[-1] += spent
        return timed_phase

    for label, module, path in PHASES:
        owner = importlib.import_module(module)
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        setattr(owner, name, wrap(label, getattr(owner, name)))
    lint_start = time.perf_counter()
    code = cli.main(["lint", project, "-j", str(jobs), "--format", "json", "--output", report]
                    + ([] if use_cache else ["--no-cache"]))
    finished = time.perf_counter()
    totals[OTHER] = finished - lint_start - sum(totals.values())
    totals[STARTUP] = imported - started
    print(json.dumps({"code": code, "phases": totals, "total": finished - started}))


def profile_tree(project: Path, jobs: int) -> str:
    """The phase table of a cold and a warm run, and the imports that cost most (-X importtime)."""
    columns = {}
    report = project.parent / "report-profile.json"
    for mode in ("cold", "warm"):
        if mode == "warm":
            subprocess.run(lint_cmd(project, jobs, True, report), check=False, capture_output=True, cwd=REPO_ROOT,
                           env=installed_env())
        cmd = [sys.executable, "-X", "importtime", str(Path(__file__).resolve()), "--phase-run", str(project),
               mode, str(jobs), str(report)]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=REPO_ROOT, env=installed_env())
        if proc.returncode != 0:
            raise BenchError(f"--profile run exited {proc.returncode}:\n{proc.stderr.strip()[-2000:]}")
        columns[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        if mode == "cold":
            imports = _slowest_imports(proc.stderr)
    labels = [STARTUP, *dict.fromkeys(label for label, _, _ in PHASES), OTHER]
    header = f"{'phase':<44}{'cold s':>8}{'share':>7}{'warm s':>8}{'share':>7}"
    rows = [header, "-" * len(header)]
    for label in labels:
        cells = []
        for mode in ("cold", "warm"):
            value = columns[mode]["phases"].get(label, 0.0)
            cells.append(f"{value:>8.2f}{value / columns[mode]['total']:>7.0%}")
        rows.append(f"{label:<44}{''.join(cells)}")
    rows.append(f"{'total (wall clock)':<44}{columns['cold']['total']:>8.2f}{'':>7}{columns['warm']['total']:>8.2f}")
    rows += ["", "slowest imports (cumulative, -X importtime): " + ", ".join(imports)]
    return "\n".join(rows)


def _slowest_imports(stderr: str, count: int = 6) -> list[str]:
    """Top-level imports (those `graphready.cli` pulls in directly or through its own modules) by cumulative time."""
    found = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (part.strip() for part in line.split("|"))
            if cumulative.isdigit() and not name.startswith(" "):
                found.append((int(cumulative), name))
    found.sort(reverse=True)
    return [f"{name} {micros / 1e6:.2f} s" for micros, name in found[:count]]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", nargs="+", choices=sorted(TREES), default=["sglang", "100k"])
    parser.add_argument("--tree", type=Path, help="benchmark this source tree instead (every forward a root)")
    parser.add_argument("-j", "--jobs", type=int, default=0, help="graphready's -j (default 0: one per CPU)")
    parser.add_argument("--profile", action="store_true", help="also print where a cold and a warm run spend time")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="N rounds per tree, medians reported (default 1)")
    parser.add_argument("--record", type=Path, metavar="DIR", help="write each tree's findings to DIR/<tree>.json")
    parser.add_argument("--expect", type=Path, metavar="DIR", help="fail if findings differ from DIR/<tree>.json")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR, help="where the wheel is kept")
    parser.add_argument("--phase-run", nargs=4, help=argparse.SUPPRESS)  # internal: one timed run for --profile
    args = parser.parse_args(argv)
    if args.jobs < 0:
        parser.error("-j must be >= 0")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    return args


def trees(args: argparse.Namespace) -> list[tuple[str, TreeSpec, list[tuple[str, bytes]]]]:
    if args.tree is not None:
        spec = TreeSpec(args.tree.name, ("",), 'hot-paths = ["*:*.forward"]\n')
        return [(str(args.tree), spec, tree_sources(args.tree))]
    wheel = sglang_wheel(args.cache_dir)
    sources = wheel_sources(wheel)
    chosen = []
    for name in args.trees:
        spec = TREES[name]
        label = f"{spec.name}: {wheel.name} {', '.join(spec.prefixes)}" + (
            f" (first {spec.max_lines:,} lines)" if spec.max_lines else "")
        chosen.append((label, spec, budgeted(sources, spec.prefixes, spec.max_lines)))
    return chosen


def compare(spec: TreeSpec, timings: list[Timing], args: argparse.Namespace) -> list[str]:
    """Problems: findings that differ between this run's modes, or from a recorded run."""
    runs = [t for t in timings if t.tool == "graphready" and t.mode != "one edited"]
    problems = [f"{spec.name}: {t.mode} findings differ from cold" for t in runs[1:] if t.findings != runs[0].findings]
    problems += [f"{spec.name}: one edited findings differ from cold's, moved with the edited lines"
                 for t in timings if t.mode == "one edited" and t.findings != t.expected]
    if args.record is not None:
        args.record.mkdir(parents=True, exist_ok=True)
        (args.record / f"{spec.name}.json").write_text(runs[0].findings, encoding="utf-8")
    if args.expect is not None:
        expected = args.expect / f"{spec.name}.json"
        if not expected.is_file():
            problems.append(f"{spec.name}: no recorded findings at {expected}")
        elif expected.read_text(encoding="utf-8") != runs[0].findings:
            problems.append(f"{spec.name}: findings differ from {expected}")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.phase_run:
        project, mode, jobs, report = args.phase_run
        phase_run(project, mode == "warm", int(jobs), report)
        return 0
    problems = []
    try:
        compile_bytecode()
        for label, spec, sources in trees(args):
            if not sources:
                raise BenchError(f"no {'/'.join(SOURCE_SUFFIXES)} files under {spec.prefixes} in {label}")
            with tempfile.TemporaryDirectory(prefix="graphready-bench-") as tmp:
                project = Path(tmp) / "project"
                lines = write_project(project, sources, spec.settings)
                rounds = [run_tree(project, args.jobs) for _ in range(args.repeat)]
                print(render(label, len(sources), lines, rounds), flush=True)
                for timings in rounds:
                    problems += compare(spec, timings, args)
                if args.profile:
                    print("\n" + profile_tree(project, args.jobs), flush=True)
            print()
    except BenchError as exc:
        print(f"lint_speed: error: {exc}", file=sys.stderr)
        return 2
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average: {load} ({os.cpu_count()} CPUs; ratios to ruff come from the same run)")
    for problem in problems:
        print(f"lint_speed: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
