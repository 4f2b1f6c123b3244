"""Hostile and mistaken inputs to `graphready lint`: each one is a clear message and an exit code,
never a traceback or a hang, and never a silent all-clear.

One table: input -> exit code -> a fragment of what the user reads (stdout or stderr). The
closing note of issue 9 lists the same cases.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from graphready.cli import main
from graphready.lint import engine
from graphready.lint.cache import LintCache

HOT = "import torch\nfrom graphready import hot_path\n\n\n@hot_path\ndef step(a: torch.Tensor, b: int):\n"
DIRTY = HOT + "    return a.item()\n"
CLEAN = HOT + "    return a * 2\n"


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def during_run(monkeypatch, change) -> None:
    """Run `change(path)` on every discovered file after discovery and before reading: the race
    with an editor or a `git checkout`, made deterministic."""
    real = engine.discover

    def discover_then_change(config, paths, split=True):
        found = real(config, paths, split)
        for path in sorted(found.requested):
            change(path)
        return found

    monkeypatch.setattr(engine, "discover", discover_then_change)


def unreadable(root: Path) -> None:
    if os.geteuid() == 0:  # root reads any file whatever its mode: a file whose read fails with EIO
        (root / "locked.py").symlink_to("/proc/self/mem")
    else:
        write(root, "locked.py", "x = 1\n").chmod(0)


def plant_cache(root: Path, entries) -> None:
    """A cache file under the exact name this graphready reads, holding `entries`."""
    cache = LintCache(root, True)
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    cache.path.write_text(json.dumps({"format": "graphready-lint-cache", "stamp": cache.stamp, "entries": entries}))


def none_fallbacks(nested: int, flat: int) -> str:
    """Fallbacks for an optional argument tested `nested` parentheses deep and `flat` times in one `or`,
    in a function every hot caller passes the argument to: both are untaken, so only dirty.py reports."""
    deep = "a is None"
    for _ in range(nested):
        deep = f"(a is None or {deep})"
    wide = " or ".join(["a is None"] * flat)
    return ("import torch\nfrom graphready import hot_path\n\n\ndef helper(x, a=None):\n"
            f"    if {deep}:\n        return x.item()\n    if {wide}:\n        return x.item()\n    return x\n\n\n"
            "@hot_path\ndef step(x: torch.Tensor, m):\n    return helper(x, a=m)\n")


def deep_branch_test(n: int) -> str:
    """A hot call under `if not not ... flag:`, `n` deep: too deep to print, so its chain shows `[if …]`."""
    return ("import torch\nfrom graphready import hot_path\n\n\ndef helper(x):\n    return x.item()\n\n\n"
            f"@hot_path\ndef step(x: torch.Tensor, flag: bool):\n    if {'not ' * n}flag:\n"
            "        return helper(x)\n    return x\n")


def deep_elif(n: int) -> str:
    ladder = "".join(f"    elif b == {i}:\n        x = {i}\n" for i in range(1, n))
    return HOT + "    if b == 0:\n        x = 0\n" + ladder + "    return x + a.item()\n"


# (id, setup(root, monkeypatch) -> extra argv, exit code, fragment of stdout+stderr)
CASES = [
    ("dangling .py symlink", lambda r, m: (r / "gone.py").symlink_to("nowhere.py"),
     1, "gone.py:1:1: GR001 [error] cannot read: dangling symlink to nowhere.py"),
    ("unreadable file", lambda r, m: unreadable(r), 1, "locked.py:1:1: GR001 [error] cannot read: "),
    ("a .py FIFO (must not block)", lambda r, m: os.mkfifo(r / "pipe.py"),
     1, "pipe.py:1:1: GR001 [error] not read: a FIFO, not a source file"),
    ("file name that is not UTF-8", lambda r, m: (r / os.fsdecode(b"caf\xe9.py")).write_text(DIRTY),
     1, "caf\\xe9.py:7:12: GR101"),
    ("file name that is not UTF-8, baselined",
     lambda r, m: [(r / os.fsdecode(b"caf\xe9.py")).write_text(DIRTY), ["--write-baseline", "base.json"]][1],
     0, "recorded 2 findings in base.json"),
    ("file vanishes between discovery and reading",
     lambda r, m: during_run(m, lambda p: p.unlink() if p.name == "dirty.py" else None),
     1, "dirty.py:1:1: GR001 [error] cannot read: the file vanished while linting"),
    ("file changes between discovery and reading",
     lambda r, m: during_run(m, lambda p: p.write_text(CLEAN if p.name == "dirty.py" else DIRTY)),
     1, "clean.py:7:12: GR101"),
    ("2,500 terms of a + a + ... in a hot function",
     lambda r, m: write(r, "deep.py", HOT + "    return " + " + ".join(["a"] * 2500) + " + a.item()\n"),
     1, "deep.py:7:"),
    ("optional-argument fallback 150 parentheses deep and 3,000 tests wide",
     lambda r, m: write(r, "deep.py", none_fallbacks(150, 3000)), 1, "lint: 1 finding (1 error) in 1 file;"),
    ("a hot call under a branch test 2,000 `not`s deep",
     lambda r, m: [write(r, "deep.py", deep_branch_test(2000)), ["--show-chain"]][1], 1, "deep:helper [if …]"),
    ("2,500-branch elif ladder in a hot function", lambda r, m: write(r, "deep.py", deep_elif(2500)),
     1, "deep.py:5007:"),
    ("1,400-call method chain in a hot function",
     lambda r, m: write(r, "deep.py", HOT + "    return a" + ".relu()" * 1400 + ".item()\n"),
     1, "deep.py:7:"),
    ("nesting CPython cannot compile (6,000 terms)",
     lambda r, m: write(r, "deep.py", HOT + "    return " + " + ".join(["a"] * 6000) + "\n"),
     1, "deep.py:1:1: GR001 [error] cannot parse: nested too deeply for Python to compile"),
    ("latin-1 file with a coding declaration",
     lambda r, m: (r / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\n" + DIRTY.replace(
         "return", "name = '\xe9'\n    return").encode("latin-1")), 1, "latin.py:9:12: GR101"),
    ("unknown coding declaration", lambda r, m: write(r, "odd.py", "# -*- coding: klingon -*-\nx = 1\n"),
     1, "odd.py:1:1: GR001 [error] cannot decode: unknown encoding"),
    ("--output is a directory", lambda r, m: ["--output", str(r)], 2, "cannot write the report to"),
    ("--output under a regular file", lambda r, m: ["--output", str(r / "clean.py" / "out.json")],
     2, "clean.py is a file, not a directory"),
    ("--write-baseline is a directory", lambda r, m: ["--write-baseline", str(r)], 2, "it is a directory"),
    ("--baseline is a directory", lambda r, m: ["--baseline", str(r)], 2, "is a directory, not a baseline file"),
    ("--baseline with --write-baseline",
     lambda r, m: ["--baseline", "a.json", "--write-baseline", "b.json"], 2, "cannot be combined"),
    ("baseline of another version",
     lambda r, m: [write(r, "b.json", '{"version": 99, "entries": []}'), ["--baseline", "b.json"]][1],
     2, "has version 99; this graphready reads version 1"),
    ("baseline entry without a fingerprint",
     lambda r, m: [write(r, "b.json", '{"version": 1, "entries": [{"path": "a.py"}]}'), ["--baseline", "b.json"]][1],
     2, "entry 1 needs string 'path', 'rule' and 'fingerprint' fields"),
    ("baseline that is not JSON", lambda r, m: [write(r, "b.json", "{oops"), ["--baseline", "b.json"]][1],
     2, "is not a graphready baseline: not JSON"),
    ("cache file that is not JSON",
     lambda r, m: [write(r, ".graphready_cache/" + LintCache(r, True).path.name, "\x80garbage"), ["--cache"]][1],
     1, "dirty.py:7:12: GR101"),
    ("cache entry of the wrong shape",
     lambda r, m: [plant_cache(r, {"dirty.py": {"digest": 3, "body": '{"index": []}'}, "clean.py": [1]}), ["--cache"]][1],
     1, "dirty.py:7:12: GR101"),
    ("--select with an unknown code", lambda r, m: ["--select", "GR999"],
     2, "--select: unknown rule code or prefix 'GR999'; did you mean GR"),
    ("--ignore with a typo", lambda r, m: ["--ignore", "GR10l"], 2, "'GR10L'; did you mean GR101?"),
    ("select = [typo] in the config", lambda r, m: write(r, "pyproject.toml", '[tool.graphready]\nselect = ["GR1O1"]\n'),
     2, "[tool.graphready] select: unknown rule code or prefix 'GR1O1'; did you mean GR101?"),
    ("ignore = [check code] in the config", lambda r, m: write(r, "pyproject.toml", '[tool.graphready]\nignore = ["GD101"]\n'),
     2, "[tool.graphready] ignore: unknown rule code or prefix 'GD101'; did you mean GR101?"),
    ("severity for a prefix", lambda r, m: write(r, "pyproject.toml", '[tool.graphready]\nseverity = { GR30 = "error" }\n'),
     2, "[tool.graphready] severity: unknown rule code (a full code: no prefixes here) 'GR30'; did you mean GR30"),
    ("per-file-ignores with an unknown code",
     lambda r, m: write(r, "pyproject.toml", '[tool.graphready]\nper-file-ignores = { "x/*" = ["GR7"] }\n'),
     2, "per-file-ignores.'x/*': unknown rule code or prefix 'GR7'"),
    ("hot-paths entry that matches nothing",
     lambda r, m: write(r, "pyproject.toml", '[tool.graphready]\nhot-paths = ["dirty:stpe"]\n'),
     2, "hot-paths entry 'dirty:stpe' matches no function in the 2 modules under"),
    ("no [tool.graphready] and nothing hot",
     lambda r, m: [write(r, "pyproject.toml", "[project]\nname = 'x'\n"), write(r, "dirty.py", "def f(a):\n    return a.item()\n"),
                   write(r, "clean.py", "y = 2\n")],
     0, "no [tool.graphready] table in pyproject.toml"),
    ("no pyproject.toml and nothing hot",
     lambda r, m: [(r / "pyproject.toml").unlink(), write(r, "dirty.py", "x = 1\n"), write(r, "clean.py", "y = 2\n")],
     0, "no findings, but not an all-clear: 2 files read, 0 hot functions."),
    ("empty directory", lambda r, m: [(r / "empty").mkdir(), ["empty"]][1],
     2, "no .py, .cu, .cuh files to lint in empty"),
    ("a path that is not Python", lambda r, m: [write(r, "README.md", "# hi\n"), ["README.md"]][1],
     2, "skipped README.md: not a .py, .cu, .cuh file"),
    ("--config is a directory", lambda r, m: ["--config", str(r)], 2, "is a directory (give its pyproject.toml)"),
    ("pyproject.toml is a FIFO (passed over, as if absent)",
     lambda r, m: [(r / "pyproject.toml").unlink(), os.mkfifo(r / "pyproject.toml")], 1, "dirty.py:7:12: GR101"),
    ("--config is a FIFO", lambda r, m: [os.mkfifo(r / "cfg.toml"), ["--config", str(r / "cfg.toml")]][1],
     2, "cfg.toml is a FIFO, not a file"),
    ("a subdirectory's pyproject.toml is a FIFO (no project of its own)",
     lambda r, m: [(r / "sub").mkdir(), os.mkfifo(r / "sub" / "pyproject.toml"), write(r, "sub/x.py", DIRTY)],
     1, "sub/x.py:7:12: GR101"),
    ("a subdirectory's pyproject.toml is a directory",
     lambda r, m: [(r / "sub" / "pyproject.toml").mkdir(parents=True), write(r, "sub/x.py", DIRTY)],
     1, "sub/x.py:7:12: GR101"),
]


class Hung(Exception):
    pass


def _alarm(signum, frame):
    raise Hung("lint did not finish in 120 s")


@pytest.mark.parametrize(("name", "setup", "exit_code", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_hostile_input(tmp_path, monkeypatch, capsys, name, setup, exit_code, fragment):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "pyproject.toml", "[tool.graphready]\n")
    write(tmp_path, "dirty.py", DIRTY)
    write(tmp_path, "clean.py", CLEAN)
    extra = setup(tmp_path, monkeypatch)
    argv = ["lint", *(extra if isinstance(extra, list) and all(isinstance(a, str) for a in extra) else [])]
    argv = [a for a in argv if a != "--cache"] if "--cache" in argv else argv + ["--no-cache"]
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(120)
    try:
        code = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert fragment in out + err, f"{name}: {fragment!r} not in\n{out}\n{err}"
    assert code == exit_code, f"{name}: exit {code}\n{out}\n{err}"
