"""How fast is `graphready lint` on a large real code base?

By default the tree is the model code of the pinned `sglang` wheel (`sglang/srt/models/` of
SGLANG_PIN, downloaded once with `pip download --no-deps` and cached under ~/.cache/graphready-bench/,
which the engine benchmarks share: a pin keeps the numbers comparable whatever else is cached), cut to the
first --max-lines lines in path order and linted with every `forward` method as a hot root. Each run is
a fresh `python -m graphready.cli lint` process timed by the wall clock: cold (--no-cache) and warm
(after a run that fills the cache), with each -j value.

    python benchmarks/lint_speed.py                    # sglang, 100k lines, -j 1 and -j 2
    python benchmarks/lint_speed.py --max-lines 0 --prefix ""   # the whole wheel
    python benchmarks/lint_speed.py --tree ~/src/vllm  # any tree of .py/.cu files

Target on a 2-core machine: 100,000 lines in under 10 s cold and under 1 s warm.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

CACHE_DIR = Path.home() / ".cache" / "graphready-bench"
SGLANG_PIN = "0.5.23"
SGLANG_PREFIX = "sglang/srt/models/"  # model code: the kind of tree graphready is for
REPO_ROOT = Path(__file__).resolve().parents[1]  # lint runs from here, so a checkout works uninstalled
SOURCE_SUFFIXES = (".py", ".cu", ".cuh")
COLD_TARGET_S_PER_100K = 10.0
WARM_TARGET_S_PER_100K = 1.0
MIN_LINES_FOR_TARGET = 50_000


class BenchError(Exception):
    """A setup step failed (download, unpacking, a crashed lint run): message, exit 2."""


@dataclass
class Timing:
    mode: str
    jobs: int
    seconds: float  # wall clock: what a user waits
    cpu_seconds: float  # user + system of the lint process and its workers: robust on a busy machine
    findings: int


def sglang_wheel(cache_dir: Path) -> Path:
    """The cached sglang wheel of SGLANG_PIN, downloading it the first time."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    pattern = f"sglang-{SGLANG_PIN}-*.whl"
    wheels = sorted(cache_dir.glob(pattern))
    if not wheels:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", f"sglang=={SGLANG_PIN}", "--no-deps", "-d", str(cache_dir)],
            capture_output=True,
            text=True,
        )
        wheels = sorted(cache_dir.glob(pattern))
        if proc.returncode != 0 or not wheels:
            raise BenchError(f"could not download the sglang {SGLANG_PIN} wheel:\n{proc.stderr.strip()}")
    return wheels[0]


def budgeted(sources: list[tuple[str, bytes]], prefix: str, max_lines: int) -> list[tuple[str, bytes]]:
    """Sources under prefix, in path order, until max_lines is reached (0 keeps everything)."""
    kept, total = [], 0
    for name, data in sorted(s for s in sources if s[0].startswith(prefix)):
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


def write_project(root: Path, sources: list[tuple[str, bytes]], hot_paths: list[str]) -> int:
    """Lay the sources out under root with a pyproject.toml; returns the line count."""
    for name, data in sources:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    patterns = ", ".join(json.dumps(p) for p in hot_paths)
    (root / "pyproject.toml").write_text(f"[tool.graphready]\nhot-paths = [{patterns}]\n", encoding="utf-8")
    return sum(data.count(b"\n") for _, data in sources)


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def lint_once(project: Path, jobs: int, use_cache: bool, report: Path) -> tuple[float, float, int]:
    """Wall-clock and CPU seconds of one lint process, and the number of findings it reported."""
    cmd = [sys.executable, "-m", "graphready.cli", "lint", str(project), "-j", str(jobs)]
    cmd += ["--format", "json", "--output", str(report)]
    if not use_cache:
        cmd.append("--no-cache")
    cpu_start, start = children_cpu_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
    seconds, cpu_seconds = time.perf_counter() - start, children_cpu_seconds() - cpu_start
    if proc.returncode not in (0, 1):
        raise BenchError(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stderr.strip()}")
    return seconds, cpu_seconds, len(json.loads(report.read_text(encoding="utf-8"))["findings"])


def run_benchmark(project: Path, jobs_list: list[int]) -> list[Timing]:
    timings = []
    report = project.parent / "report.json"
    for jobs in jobs_list:
        timings.append(Timing("cold", jobs, *lint_once(project, jobs, use_cache=False, report=report)))
        shutil.rmtree(project / ".graphready_cache", ignore_errors=True)
        lint_once(project, jobs, use_cache=True, report=report)  # fills the cache
        timings.append(Timing("warm", jobs, *lint_once(project, jobs, use_cache=True, report=report)))
    return timings


def render(label: str, files: int, lines: int, timings: list[Timing]) -> str:
    rows = [f"graphready lint on {label}: {files:,} files, {lines:,} lines", ""]
    header = f"{'run':<6}{'-j':>4}{'files':>9}{'lines':>11}{'seconds':>10}{'cpu s':>9}{'lines/s':>11}{'findings':>10}  target"
    rows += [header, "-" * len(header)]
    for t in timings:
        per_100k = t.seconds * 100_000 / max(lines, 1)
        limit = COLD_TARGET_S_PER_100K if t.mode == "cold" else WARM_TARGET_S_PER_100K
        verdict = f"{'met' if per_100k < limit else 'MISSED'} ({per_100k:.2f} s per 100k lines, < {limit:g})"
        if lines < MIN_LINES_FOR_TARGET:
            verdict = f"n/a (start-up dominates below {MIN_LINES_FOR_TARGET:,} lines)"
        rows.append(
            f"{t.mode:<6}{t.jobs:>4}{files:>9,}{lines:>11,}{t.seconds:>10.2f}{t.cpu_seconds:>9.2f}"
            f"{lines / t.seconds:>11,.0f}{t.findings:>10,}  {verdict}"
        )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    rows += ["", f"load average during the run: {load} (wall-clock times assume an otherwise idle machine)"]
    return "\n".join(rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="benchmark this source tree instead of the sglang wheel")
    parser.add_argument(
        "--max-lines", type=int, default=100_000, help="cut the tree to about this many lines (0: all)"
    )
    parser.add_argument(
        "--prefix", help=f"only files under this path in the tree (default: {SGLANG_PREFIX!r} for sglang, '' for --tree)"
    )
    parser.add_argument("-j", "--jobs", type=int, nargs="+", default=[1, 2], help="worker counts to time")
    parser.add_argument("--hot-paths", nargs="+", default=["*:*.forward"], help="hot-path patterns")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR, help="where the wheel is kept")
    args = parser.parse_args(argv)
    if args.max_lines < 0 or any(j < 1 for j in args.jobs):
        parser.error("--max-lines must be >= 0 and every -j value >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.tree is not None:
            label, sources = str(args.tree), tree_sources(args.tree)
            prefix = args.prefix or ""
        else:
            wheel = sglang_wheel(args.cache_dir)
            label, sources = wheel.name, wheel_sources(wheel)
            prefix = SGLANG_PREFIX if args.prefix is None else args.prefix
        sources = budgeted(sources, prefix, args.max_lines)
        if not sources:
            raise BenchError(f"no {'/'.join(SOURCE_SUFFIXES)} files under {prefix!r} in {label}")
        label = f"{label}:{prefix}" if prefix else label
        with tempfile.TemporaryDirectory(prefix="graphready-bench-") as tmp:
            project = Path(tmp) / "project"
            lines = write_project(project, sources, args.hot_paths)
            timings = run_benchmark(project, args.jobs)
    except BenchError as exc:
        print(f"lint_speed: error: {exc}", file=sys.stderr)
        return 2
    print(render(label, len(sources), lines, timings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
