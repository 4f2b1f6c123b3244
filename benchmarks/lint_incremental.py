"""Does a lint run that reuses the cache report what a run without it reports, edit after edit?

Each round copies a project, lints it once to fill the cache, then makes random edits (a seeded generator), and
after each one compares a cached run with a `--no-cache` run: the findings with their chains, the suppressed
ones and the scope. An edit is one of: lines moved (a statement inserted above others), a statement put under a
debug guard, a call of a module function or a method on `self` swapped for another on the same line, a hazard
removed (`.item()` -> `.clone()`), a statement replaced by `pass`, a statement doubled. A difference is a cache
that answers for code it was not made from: the hot path kept after a call changed within its line was one
(tests/lint/test_incremental_runs.py runs two rounds of this on the engine fixture in the default suite).

    python benchmarks/lint_incremental.py                     # the three engine fixtures, seeds 1-15
    python benchmarks/lint_incremental.py --seeds 16-45 --steps 10
    python benchmarks/lint_incremental.py --tree /tmp/sglang-tree --seeds 1-2 --steps 8   # a real tree (slower)
    python benchmarks/lint_incremental.py --versions /tmp/sglang-0.5.22 /tmp/sglang-0.5.23 --steps 4

`--versions OLD NEW` makes the edits real ones: starting from a copy of OLD, the files that differ between the two
trees (changed, added, removed) are brought to NEW in `--steps` batches of a seeded random order, then back to
OLD the same way, comparing after each batch (two releases of an engine: renames, moved code, new files).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = {"dsv4_like": "engine", "sglang_like": ".", "vllm_like": "."}  # fixture -> the path linted in it


def statements(tree: ast.Module) -> list[ast.stmt]:
    """Statements on lines of their own inside functions, defs and classes left out (a decorator sits above)."""
    functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return [stmt for function in functions for stmt in ast.walk(function)
            if isinstance(stmt, ast.stmt) and stmt is not function and stmt.end_lineno == stmt.lineno
            and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def move_lines(rng: random.Random, lines: list[str], tree: ast.Module) -> None:
    stmt = rng.choice(statements(tree))
    lines.insert(stmt.lineno - 1, " " * stmt.col_offset + "_edited = 0  # moves every line below\n")


def guard(rng: random.Random, lines: list[str], tree: ast.Module) -> None:
    found = [s for s in statements(tree) if not isinstance(s, (ast.Return, ast.Raise, ast.Global))]
    if not found:
        return move_lines(rng, lines, tree)
    stmt = rng.choice(found)
    lines[stmt.lineno - 1] = f"{' ' * stmt.col_offset}if VERBOSE:\n    {lines[stmt.lineno - 1]}"
    return None


def other_callee(rng: random.Random, lines: list[str], tree: ast.Module) -> None:
    """A call of one of the module's functions, or of a method of its own class on `self`, now calls another of
    them on the same line (the file's lines and its index as first made stay as they were)."""
    choices: list[tuple[ast.expr, list[str]]] = []
    functions = sorted({node.name for node in tree.body if isinstance(node, ast.FunctionDef)})
    classes = [(cls, sorted({n.name for n in cls.body if isinstance(n, ast.FunctionDef)}))
               for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)]
    for scope, names in [(tree, functions), *classes]:
        for node in ast.walk(scope):
            if not isinstance(node, ast.Call) or len(names) < 2:
                continue
            if scope is tree and isinstance(node.func, ast.Name) and node.func.id in names:
                choices.append((node.func, [n for n in names if n != node.func.id]))
            elif (scope is not tree and isinstance(node.func, ast.Attribute) and node.func.attr in names
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
                choices.append((node.func, [n for n in names if n != node.func.attr and not n.startswith("__")]))
    choices = [(func, others) for func, others in choices if others]
    if not choices:
        return move_lines(rng, lines, tree)
    func, others = rng.choice(choices)
    line = lines[func.lineno - 1]
    start = func.col_offset if isinstance(func, ast.Name) else func.end_col_offset - len(func.attr)
    lines[func.lineno - 1] = line[:start] + rng.choice(others) + line[func.end_col_offset:]
    return None


def no_item(rng: random.Random, lines: list[str], tree: ast.Module) -> None:
    found = [n for n, line in enumerate(lines) if ".item()" in line]
    if not found:
        return move_lines(rng, lines, tree)
    n = rng.choice(found)
    lines[n] = lines[n].replace(".item()", ".clone()", 1)
    return None


def to_pass(rng: random.Random, lines: list[str], tree: ast.Module) -> None:
    """A statement replaced by `pass` (what it called, or the hazard it held, is gone)."""
    found = [s for s in statements(tree) if not isinstance(s, (ast.Return, ast.Global, ast.Nonlocal))]
    if not found:
        return move_lines(rng, lines, tree)
    stmt = rng.choice(found)
    lines[stmt.lineno - 1] = " " * stmt.col_offset + "pass\n"
    return None


def doubled(rng: random.Random, lines: list[str], tree: ast.Module) -> None:
    """A statement written twice (a second call, a second hazard on the next line)."""
    found = [s for s in statements(tree) if not isinstance(s, (ast.Return, ast.Raise))]
    if not found:
        return move_lines(rng, lines, tree)
    stmt = rng.choice(found)
    lines.insert(stmt.lineno - 1, lines[stmt.lineno - 1])
    return None


EDITS = [move_lines, guard, other_callee, no_item, to_pass, doubled]


def parses(path: Path) -> ast.Module | None:
    """The file's tree; None for the fixture's file of broken Python (GR001)."""
    try:
        return ast.parse(path.read_text())
    except SyntaxError:
        return None


def report(target: str, *args: str) -> dict:
    """What a run reports that a cache must not change, run in this process."""
    from graphready.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["lint", target, "--format", "json", "-j", "1", *args])
    found = json.loads(out.getvalue())
    return {"findings": found["findings"], "suppressed": found["summary"]["suppressed"],
            "scope": found["summary"]["scope"]}


def edit_once(rng: random.Random, files: list[Path], kind=None) -> str | None:
    """One random edit of one of `files` (`kind`, or a random one of EDITS) that keeps it Python: what was done."""
    path = rng.choice(files)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    edit = kind or rng.choice(EDITS)
    edit(rng, lines, ast.parse("".join(lines)))
    try:
        ast.parse("".join(lines))
    except SyntaxError:
        return None
    path.write_text("".join(lines), encoding="utf-8")
    return f"{edit.__name__} in {path.name}"


@contextlib.contextmanager
def working_copy(source: Path, name: str, *skipped: str) -> Iterator[Path]:
    """A throwaway copy of `source` (no cache, nor the `skipped` names), the current directory while in use."""
    work = Path(tempfile.mkdtemp(prefix="graphready-incremental-")) / name
    shutil.copytree(source, work, ignore=shutil.ignore_patterns(".graphready_cache", *skipped))
    here = Path.cwd()
    os.chdir(work)
    try:
        yield work
    finally:
        os.chdir(here)
        shutil.rmtree(work.parent, ignore_errors=True)


def round_of(source: Path, target: str, seed: int, steps: int) -> list[str]:
    """One seeded round on a copy of `source`: the edits after which the cached run differed."""
    with working_copy(source, source.name, "engine_fixed") as work:
        rng = random.Random(seed)
        base = work / target
        files = sorted(p for p in base.rglob("*.py") if (tree := parses(p)) is not None and statements(tree))
        report(target)
        problems = []
        for _ in range(steps):
            done = edit_once(rng, files)
            if done is not None and report(target) != report(target, "--no-cache"):
                problems.append(f"seed {seed}: after {done}")
                break  # later edits would compare against a cache already wrong
        return problems


def differing(old: Path, new: Path) -> list[str]:
    """The .py files (relative paths) that one tree has and the other lacks, or that differ between them."""
    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*.py")
                if ".graphready_cache" not in p.parts}
    a, b = files(old), files(new)
    return sorted(rel for rel in a.keys() | b.keys() if a.get(rel) != b.get(rel))


def versions_round(old: Path, new: Path, changes: list[str], seed: int, steps: int) -> list[str]:
    """OLD brought to NEW and back in `steps` batches each way (`changes`: the files that differ): the batches after
    which the cached run differed."""
    with working_copy(old, "tree") as work:
        rng = random.Random(seed)
        report(".")
        for toward in (new, old):
            order = list(changes)
            rng.shuffle(order)
            for step in range(steps):
                for rel in order[step::steps]:
                    target = work / rel
                    if (toward / rel).is_file():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(toward / rel, target)
                    else:
                        target.unlink(missing_ok=True)
                if report(".") != report(".", "--no-cache"):
                    return [f"seed {seed}: batch {step + 1} of {steps} toward {toward.name}"]
        return []


def seed_range(text: str) -> range:
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seed_range, default=seed_range("1-15"), help="e.g. 1-15")
    parser.add_argument("--steps", type=int, default=10, help="edits per round")
    parser.add_argument("--tree", type=Path, help="a project of your own instead of the fixtures (linted as '.')")
    parser.add_argument("--versions", type=Path, nargs=2, metavar=("OLD", "NEW"),
                        help="two releases of one project: real edits, in batches (see above)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO_ROOT))
    if args.versions:
        old, new = (p.resolve() for p in args.versions)
        changes = differing(old, new)
        found = [p for seed in args.seeds for p in versions_round(old, new, changes, seed, args.steps)]
        print(f"{old.name} <-> {new.name}: {len(changes)} files differ, {len(args.seeds)} rounds x 2 x {args.steps} batches, "
              f"{len(found)} differing", flush=True)
        for problem in found:
            print(f"DIFFERS {problem}")
        return 1 if found else 0
    projects = ({args.tree.resolve(): "."} if args.tree else
                {REPO_ROOT / "tests" / "fixtures" / name: target for name, target in FIXTURES.items()})
    problems = []
    for source, target in projects.items():
        found = [p for seed in args.seeds for p in round_of(source, target, seed, args.steps)]
        print(f"{source.name}: {len(args.seeds)} rounds x {args.steps} edits, {len(found)} differing", flush=True)
        problems += [f"{source.name}: {p}" for p in found]
    for problem in problems:
        print(f"DIFFERS {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
