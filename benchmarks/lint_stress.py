"""Does `graphready lint` get through real trees without failing itself, with every function hot?

Lints, with `hot-paths = ["*:*"]` (every function a root, so every rule sees every function of the
tree): the pinned SGLang and vLLM wheels that engine_lint.py downloads, HF transformers' models (its
wheel, pinned, downloaded into the same cache) and torch's own installed source (the torch package
of the Python running this). Prints per tree: files, lines, hot functions, findings, internal errors
(GR002 findings, or a failure that ended the whole run) and seconds, then every internal error; exits
1 on any. Run it before closing any change to a rule or the scope.

    python benchmarks/lint_stress.py -j 2                   # every tree (torch alone is ~2M lines)
    python benchmarks/lint_stress.py --tree sglang --tree transformers
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_lint import LATEST, BenchError, Engine, unpack  # noqa: E402

EVERY_FUNCTION_HOT = '[tool.graphready]\nhot-paths = ["*:*"]\n'
TRANSFORMERS = Engine("transformers", "5.17.0", ("transformers/models/",))  # what the GPU machine has
WHEELS = [e for e in LATEST if e.name in ("sglang", "vllm")] + [TRANSFORMERS]
TREES = [e.name for e in WHEELS] + ["torch"]


@dataclass
class Outcome:
    tree: str
    files: int = 0
    lines: int = 0
    hot_functions: int = 0
    findings: int = 0
    seconds: float = 0.0
    internal_errors: list[str] = field(default_factory=list)  # one line each: where, and the exception


def from_wheel(engine: Engine, root: Path) -> Path:
    """The wheel's code (engine_lint's download and unpack) with every function hot."""
    tree, _, _ = unpack(engine, "forward", root / engine.requirement)
    (tree / "pyproject.toml").write_text(EVERY_FUNCTION_HOT, encoding="utf-8")
    return tree


def installed_torch(root: Path) -> Path:
    """A copy of the installed torch package's Python source (found without importing torch)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise BenchError(f"no torch installed for {sys.executable}")
    package = Path(list(spec.submodule_search_locations)[0])
    tree = root / "torch"
    for source in package.rglob("*.py"):
        target = tree / "torch" / source.relative_to(package)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    (tree / "pyproject.toml").write_text(EVERY_FUNCTION_HOT, encoding="utf-8")
    return tree


def stress(name: str, tree: Path, report: Path, jobs: int) -> Outcome:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "graphready.cli", "lint", "--no-cache", "-j", str(jobs),
                           "--format", "json", "--output", str(report)], capture_output=True, text=True, cwd=tree)
    outcome = Outcome(name, seconds=time.perf_counter() - start)
    if proc.returncode == 3 and not report.is_file():  # a failure over the whole project: no report
        outcome.internal_errors.append(proc.stderr.strip().splitlines()[-1])
        return outcome
    if proc.returncode not in (0, 1, 3) or not report.is_file():
        raise BenchError(f"lint failed on {tree} (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    doc = json.loads(report.read_text(encoding="utf-8"))
    summary = doc["summary"]
    outcome.files, outcome.lines, outcome.hot_functions = summary["files"], summary["lines"], summary["hot_functions"]
    outcome.findings = len(doc["findings"])
    outcome.internal_errors = [f"{f['path']}:{f['line']}: {f['message']}"
                               for f in doc["findings"] if f["rule"] == "GR002"]
    if proc.returncode == 3 and not outcome.internal_errors:
        raise BenchError(f"lint exited 3 on {tree} with no GR002 finding:\n{proc.stderr.strip()[-2000:]}")
    return outcome


def print_table(outcomes: list[Outcome]) -> None:
    print(f"{'tree':<22}{'files':>8}{'lines':>12}{'hot functions':>15}{'findings':>10}{'internal errors':>17}"
          f"{'seconds':>9}")
    for o in outcomes:
        print(f"{o.tree:<22}{o.files:>8}{o.lines:>12,}{o.hot_functions:>15,}{o.findings:>10,}"
              f"{len(o.internal_errors):>17}{o.seconds:>9.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", choices=TREES, help="default: all")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="lint processes per tree (default 2)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="unpack and write reports here (kept)")
    args = parser.parse_args(argv)
    outcomes = []
    try:
        with tempfile.TemporaryDirectory() as scratch:
            root = args.keep or Path(scratch)
            for name in args.tree or TREES:
                engine = next((e for e in WHEELS if e.name == name), None)
                tree = from_wheel(engine, root) if engine else installed_torch(root)
                label = engine.requirement if engine else "torch (installed)"
                outcomes.append(stress(label, tree, root / f"{label.split()[0]}.json", args.jobs))
                print(f"lint_stress: {label}: {outcomes[-1].seconds:.0f} s, {len(outcomes[-1].internal_errors)}"
                      " internal errors", file=sys.stderr, flush=True)
    except BenchError as exc:
        print(f"lint_stress: {exc}", file=sys.stderr)
        return 2
    print()
    print_table(outcomes)
    failures = [f"{o.tree}: {line}" for o in outcomes for line in o.internal_errors]
    for line in failures:
        print(line)
    print(f"\n{len(failures)} internal error{'s' * (len(failures) != 1)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
