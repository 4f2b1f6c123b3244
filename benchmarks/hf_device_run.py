"""The device run that regenerates docs/hf.md: the check alone first, then the twins, then the page.

On one GPU, within --total seconds (default 540, under the device's 10-minute limit per command):

1. `hf_readiness.py environment` -> OUT/env.json;
2. `graphready check hf --all-architectures` (layers on, --jobs workers) with its own `--time-limit`, so that
   it writes OUT/check.json even when the time runs out (units it did not reach say "not checked");
3. the float32 twins of every architecture (`hf_twins.py`, a row written as it finishes) in what time
   remains, less --render-seconds;
4. the page rendered from whatever JSON is there into OUT/hf.md (docs/hf.md's hand-written text kept).

`--stages` runs some of them (one device command each when together they would not fit in ten minutes;
`hf_readiness.py render` then joins the JSON of both). Every step is time-boxed; what it wrote stays.
OUT/run.json says what each step did. The device command:

    python benchmarks/hf_device_run.py --out "$OUT"
    python benchmarks/hf_device_run.py --out "$OUT" --stages env,check --check-seconds 500

`--dry-run` prints the commands with their time boxes and runs nothing (no torch needed).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRACE_S = 10  # between SIGTERM and SIGKILL of a step's process group


@dataclass
class Step:
    name: str
    argv: list[str]
    log: str  # stdout and stderr, or stderr alone where `stdout` is given
    stdout: str | None = None
    seconds: float = 0.0  # its time box, set when the step starts
    rc: int | None = None
    timed_out: bool = False
    wall_s: float = 0.0


def check_step(out: Path, jobs: int, unit_timeout: float, seconds: float) -> Step:
    """The check, stopping itself GRACE_S * 3 before its time box so that it still writes its report."""
    limit = max(seconds - 3 * GRACE_S, 1.0)
    return Step("check", [sys.executable, "-m", "graphready", "check", "hf", "--all-architectures",
                          "--batch-sizes", "1", "--steps", "4", "--jobs", str(jobs), "--timeout", f"{unit_timeout:g}",
                          "--time-limit", f"{limit:g}", "--no-lint", "--format", "json",
                          "--output", str(out / "check.json")], str(out / "check.log"))


def twins_step(out: Path, jobs: int) -> Step:
    return Step("twins", [sys.executable, str(ROOT / "benchmarks" / "hf_twins.py"), "--all-architectures",
                          "--jobs", str(jobs), "--json", str(out / "twins.json")], str(out / "twins.log"))


def render_argv(out: Path) -> list[str] | None:
    """The render command over the JSON found in `out`, or None when no check wrote any."""
    checks = sorted(str(p) for p in out.glob("check*.json") if _readable(p))
    if not checks:
        return None
    argv = [sys.executable, str(ROOT / "benchmarks" / "hf_readiness.py"), "render", *checks]
    for flag, name in (("--env", "env.json"), ("--twins", "twins.json")):
        if _readable(out / name):
            argv += [flag, str(out / name)]
    return argv + ["--output", str(out / "hf.md")]


def _readable(path: Path) -> bool:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def _start(step: Step, seconds: float) -> subprocess.Popen:
    step.seconds = round(max(seconds, 1.0), 1)
    log = open(step.log, "w", encoding="utf-8")  # noqa: SIM115 (closed by _finish)
    stdout = open(step.stdout, "w", encoding="utf-8") if step.stdout else log  # noqa: SIM115
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(step.argv, stdout=stdout, stderr=log, cwd=ROOT, env=env, start_new_session=True)
    process.files, process.started = {log, stdout}, time.monotonic()  # type: ignore[attr-defined]
    return process


def _stop(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _finish(step: Step, process: subprocess.Popen, deadline: float) -> None:
    try:
        process.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        step.timed_out = True
        _stop(process)
    step.rc = process.returncode
    step.wall_s = round(time.monotonic() - process.started, 1)  # type: ignore[attr-defined]
    for file in process.files:  # type: ignore[attr-defined]
        file.close()


def run_step(step: Step, seconds: float) -> None:
    """Run the step for at most `seconds`; stop it if it is still running then."""
    _finish(step, _start(step, seconds), time.monotonic() + seconds)


def _record(out: Path, steps: list[Step]) -> None:
    """OUT/run.json: each step's time box, exit status, whether it was stopped, and the files there now."""
    data = {"steps": [{k: getattr(s, k) for k in ("name", "seconds", "rc", "timed_out", "wall_s")}
                      | {"argv": shlex.join(s.argv)} for s in steps],
            "files": sorted(p.name for p in out.iterdir() if p.name != "run.json")}
    (out / "run.json").write_text(json.dumps(data, indent=1), encoding="utf-8")


STAGES = ("env", "check", "twins", "render")


def render_reserve(args) -> float:
    """The seconds kept back for the render at the end (none when it is not a chosen stage)."""
    return args.render_seconds if "render" in args.stages else 0.0


def plan(args) -> list[tuple[Step, float]]:
    """The chosen steps before the render, each with its time box, in order."""
    out = Path(args.out)
    chosen = []
    if "env" in args.stages:
        chosen.append((Step("environment", [sys.executable, str(ROOT / "benchmarks" / "hf_readiness.py"),
                                            "environment"], str(out / "env.log"), stdout=str(out / "env.json")),
                       args.env_seconds))
    if "check" in args.stages:
        chosen.append((check_step(out, args.jobs, args.unit_timeout, args.check_seconds), args.check_seconds))
    if "twins" in args.stages:
        used = sum(seconds for _, seconds in chosen) + render_reserve(args)
        chosen.append((twins_step(out, args.twins_jobs), args.total - used))
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, metavar="DIR", help="where every JSON, log and the page go")
    parser.add_argument("--stages", default=",".join(STAGES), type=lambda text: text.split(","),
                        help=f"which of {','.join(STAGES)} to run (default: all)")
    parser.add_argument("--total", type=float, default=540.0, help="seconds for the whole run")
    parser.add_argument("--env-seconds", type=float, default=30.0)
    parser.add_argument("--check-seconds", type=float, default=330.0, help="the time box of the check")
    parser.add_argument("--render-seconds", type=float, default=20.0)
    parser.add_argument("--jobs", type=int, default=12, help="the check's workers")
    parser.add_argument("--unit-timeout", type=float, default=90.0, help="the check's --timeout per unit")
    parser.add_argument("--twins-jobs", type=int, default=12)
    parser.add_argument("--dry-run", action="store_true", help="print the steps and their time boxes")
    args = parser.parse_args(argv)
    if min(args.jobs, args.twins_jobs) < 1:
        parser.error("--jobs and --twins-jobs must be at least 1")
    unknown = [stage for stage in args.stages if stage not in STAGES]
    if unknown:
        parser.error(f"unknown stage {unknown[0]!r}: choose from {', '.join(STAGES)}")
    steps = plan(args)
    if any(seconds < 1 for _, seconds in steps):
        parser.error(f"--total {args.total:g} leaves no time for the twins after the other stages")
    if args.dry_run:
        for step, seconds in steps:
            print(f"{seconds:6.0f}s  {shlex.join(step.argv)}")
        if "render" in args.stages:
            print(f"{args.render_seconds:6.0f}s  {sys.executable} benchmarks/hf_readiness.py render ...")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done: list[Step] = []
    for step, seconds in steps:
        if step.name == "twins":  # whatever the earlier steps left
            seconds = args.total - (time.monotonic() - started) - render_reserve(args)
            if seconds <= 1:
                continue
        run_step(step, seconds)
        done.append(step)
        _record(out, done)
    command = render_argv(out) if "render" in args.stages else None
    if command is not None:
        page = out / "hf.md"
        page.write_text((ROOT / "docs" / "hf.md").read_text(encoding="utf-8"), encoding="utf-8")
        render = Step("render", command, str(out / "render.log"))
        run_step(render, args.render_seconds)
        done.append(render)
    _record(out, done)
    for step in done:
        print(f"{step.name:12} rc={step.rc} {'TIMED OUT ' if step.timed_out else ''}{step.wall_s:.0f}s "
              f"of {step.seconds:.0f}s")
    return 0 if all(not step.timed_out for step in done) else 1


if __name__ == "__main__":
    sys.exit(main())
