"""Does `graphready check` give the same verdicts on a busy machine as on an idle one?

A busy GPU or a starved CPU must never show up as a hazard, nor hide one. This runs one check target
(`graphready check TARGET --format json`) under each load in turn and compares every unit's status and the
rules of its findings with the idle run's:

- `idle`: nothing else running;
- `gpu`: another process holds 20 GB of the GPU, runs bf16 matmuls back to back and allocates and frees 1 GB
  between them (`nvidia-smi` shows it at 99 %);
- `cpu`: two busy-looping processes per CPU core.

Prints one row per load (seconds, units, failing units, findings) and every difference; exits 1 on any.
On a GPU machine:

    python benchmarks/check_under_load.py                     # the hazard units, idle / gpu / cpu
    python benchmarks/check_under_load.py dsv4 --check-args "--preset tiny" --loads idle,gpu
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
HAZARD_TARGET = "tests/hazards/units.py:hazard_units"
LOADS = ("idle", "gpu", "cpu")
# Each run gets empty compile caches: a torch.compile'd unit captured cold failed (GD203 warning) in the first run
# on a fresh machine and captured with only an info in the runs after it (the order decided, not the load).
COMPILE_CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def hog(kind: str, seconds: float) -> None:
    """The load itself, in a process of its own: `gpu` keeps the device busy, `cpu` one core."""
    end = time.monotonic() + seconds
    if kind == "cpu":
        while time.monotonic() < end:
            pass
        return
    import torch

    held = torch.empty(20 << 30, dtype=torch.uint8, device="cuda")  # noqa: F841 (memory another process holds)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while time.monotonic() < end:
        for _ in range(20):
            a @ a
        churn = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        del churn
        torch.cuda.synchronize()


@contextmanager
def loaded(kind: str, seconds: float) -> Iterator[None]:
    count = {"idle": 0, "gpu": 1, "cpu": 2 * (os.cpu_count() or 1)}[kind]
    procs = [subprocess.Popen([sys.executable, __file__, "--hog", "gpu" if kind == "gpu" else "cpu", str(seconds)])
             for _ in range(count)]
    try:
        if kind == "gpu":
            time.sleep(8)  # the matmuls are running before the check starts
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def checked(target: str, extra: list[str], kind: str, limit: float, out: Path) -> dict:
    """One check under one load: its seconds and, per unit, (status, sorted rules of its findings)."""
    report = out / f"{kind}.json"
    cmd = [sys.executable, "-m", "graphready", "check", target, *extra, "--format", "json", "--output", str(report)]
    caches = {name: str(out / f"{kind}-{name.lower()}") for name in COMPILE_CACHES}  # each run starts as cold
    started = time.monotonic()
    with loaded(kind, limit + 30):
        try:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=limit, check=False,
                                  env={**os.environ, **caches})
        except subprocess.TimeoutExpired:
            raise SystemExit(f"check under {kind} load took more than {limit:.0f} s (--time-limit)") from None
    seconds = time.monotonic() - started
    if not report.is_file():
        raise SystemExit(f"check under {kind} load wrote no report (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    data = json.loads(report.read_text(encoding="utf-8"))
    rules: dict[str, set[str]] = {}
    for finding in data["findings"]:
        rules.setdefault(finding.get("unit") or "", set()).add(finding["rule"])
    units = {u["name"]: (u["status"], sorted(rules.get(u["name"], ()))) for u in data["units"]}
    return {"seconds": seconds, "units": units, "findings": len(data["findings"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", default=HAZARD_TARGET)
    parser.add_argument("--check-args", default="--cold-capture --steps 4 --jobs 4",
                        help="more arguments for graphready check (default: %(default)s)")
    parser.add_argument("--loads", default=",".join(LOADS), help="comma-separated, idle first (default: %(default)s)")
    parser.add_argument("--time-limit", type=float, default=900, help="seconds one check may take")
    parser.add_argument("--hog", nargs=2, help=argparse.SUPPRESS)  # internal: one load process
    args = parser.parse_args(argv)
    if args.hog:
        hog(args.hog[0], float(args.hog[1]))
        return 0
    loads = args.loads.split(",")
    if loads[0] != "idle" or any(load not in LOADS for load in loads):
        parser.error(f"--loads: idle first, then any of {', '.join(LOADS[1:])}")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="graphready-load-") as tmp:
        for kind in loads:
            runs[kind] = checked(args.target, shlex.split(args.check_args), kind, args.time_limit, Path(tmp))
            run = runs[kind]
            failing = sum(status != "pass" for status, _ in run["units"].values())
            print(f"{kind:5} {run['seconds']:7.1f} s  {len(run['units'])} units, {failing} not passing, "
                  f"{run['findings']} findings", flush=True)
    differences = []
    idle = runs["idle"]["units"]
    for kind in loads[1:]:
        units = runs[kind]["units"]
        for name in sorted(idle.keys() | units.keys()):
            if idle.get(name) != units.get(name):
                differences.append(f"{kind}: {name}: idle {idle.get(name)}, under load {units.get(name)}")
    for line in differences:
        print(f"DIFFERS {line}")
    print("same verdicts under every load" if not differences else f"{len(differences)} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
