"""Where a `graphready check` run spent its time, from its JSON: loads, eager checks, capture, replay checks.

    python benchmarks/check_timing.py check.json

Prints the wall time, each worker's load time, the units checked per worker, and the per-phase sums and
per-unit means of the harness's own work (eager checks, capture, replay-vs-eager checks).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PHASES = ("eager_check_s", "capture_s", "replay_check_s", "check_s")


def main() -> int:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[1].strip())
    doc = json.loads(Path(sys.argv[1]).read_text())
    run, units = doc.get("run", {}), doc.get("units", [])
    workers = run.get("workers", [])
    loads = [w["load_s"] for w in workers if w.get("load_s") is not None]
    statuses = [u["status"] for u in units]
    print(f"target {run.get('target')} {run.get('factory_kwargs')}: {len(units)} units "
          f"({statuses.count('pass')} pass, {statuses.count('fail')} fail, {statuses.count('error')} error), "
          f"wall {run.get('wall_s', 0):.1f} s")
    print(f"workers {len(workers)}, target loads {len(loads)}, load s {', '.join(f'{s:.1f}' for s in loads)}")
    for w in workers:
        print(f"  worker {w['id']} gpu {w['gpu'] if w['gpu'] is not None else 'all'}: {len(w['units'])} units, {w['end']}")
    timed = [u for u in units if "check_s" in u]
    for phase in PHASES:
        values = [u[phase] for u in timed]
        if values:
            print(f"{phase:>15}: sum {sum(values):7.1f} s, mean {sum(values) / len(values):6.2f} s, "
                  f"max {max(values):6.2f} s")
    slowest = sorted(timed, key=lambda u: -u["check_s"])[:3]
    print("slowest units: " + ", ".join(f"{u['name']} {u['check_s']:.1f} s" for u in slowest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
