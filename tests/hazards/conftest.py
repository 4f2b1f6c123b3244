"""GPU hazard tests: every unit of units.py is checked once per session, in parallel worker processes."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hazard_expectations import CLEAN_TWINS, HAZARDS, TARGET, cuda_available, expected_markers  # noqa: E402

from graphready.harness.pytest_plugin import graph_unit_check, gpu_available  # noqa: E402,F401  (the fixture)

# GD402 fires above 48 MiB so the 64 MiB hazard trips it, while the 32 MiB cuBLAS workspace that a
# GEMM's first call on the capture stream takes from the graph pool (H100) does not.
CAPTURE_ALLOC_LIMIT = 48 * 2**20
REPO_ROOT = Path(__file__).resolve().parents[2]


def _verdict(result, markers) -> str:
    if result.name in HAZARDS:
        cls, codes = HAZARDS[result.name]
        found = {(f.rule, f.line) for f in result.findings}
        ok = all((code, markers.get(cls, {}).get(code)) in found for code in codes)
        return "fires at the marked line" if ok else "MISSED"
    return "passes" if result.status() == "pass" and not result.findings else "FALSE POSITIVE"


def write_verdicts(results: dict, directory: Path) -> None:
    """A markdown verdict table plus the raw results, for the closing note."""
    from units import kernel_backend

    markers = expected_markers(kernel_backend())
    rows = ["| unit | expected | found | status | eager ms | replay ms | kernels eager/graph | verdict |", "|---|---|---|---|---|---|---|---|"]
    for name, result in results.items():
        expected = ",".join(HAZARDS[name][1]) if name in HAZARDS else "-"
        found = ",".join(sorted({f"{f.rule}@{f.line}({f.severity.label})" for f in result.findings})) or "-"
        rows.append(
            f"| {name} | {expected} | {found} | {result.status()} | {result.eager_ms or '-'} | {result.replay_ms or '-'} "
            f"| {result.kernels}/{result.graph_kernels} | {_verdict(result, markers)} |"
        )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "verdicts.md").write_text(
        f"GD202 kernel backend: {kernel_backend()}\n\n" + "\n".join(rows) + "\n", encoding="utf-8"
    )
    (directory / "results.json").write_text(
        json.dumps({name: r.to_json() for name, r in results.items()}, indent=1), encoding="utf-8"
    )


def _check_all_hazard_units() -> dict:
    from graphready.harness.isolation import WorkerOptions, list_units
    from graphready.harness.scheduler import run_units

    options = WorkerOptions(steps=4, capture_alloc_limit=CAPTURE_ALLOC_LIMIT, timeout_s=300, root=str(REPO_ROOT),
                            cold_capture=True)
    units = list_units(TARGET, options)
    run = run_units(TARGET, units, options, gpus=1, jobs=int(os.environ.get("GRAPHREADY_HAZARD_JOBS", "4")))
    return {r.name: r for r in run.results}


def _shared_results(shared_dir: Path) -> dict:
    """Check the units once per test session, even with pytest-xdist: the first worker runs them, the rest read."""
    from graphready.harness.result import UnitResult

    cache = shared_dir / "graphready-hazard-results.json"
    try:
        os.close(os.open(shared_dir / "graphready-hazard-results.lock", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        deadline = time.monotonic() + 1800
        while not cache.exists():
            if time.monotonic() > deadline:
                pytest.fail("timed out waiting for another worker's hazard results")
            time.sleep(2)
        return {name: UnitResult.from_json(data) for name, data in json.loads(cache.read_text()).items()}
    results = _check_all_hazard_units()
    partial = cache.with_suffix(".partial")
    partial.write_text(json.dumps({name: r.to_json() for name, r in results.items()}), encoding="utf-8")
    partial.replace(cache)
    return results


@pytest.fixture(scope="session")
def hazard_results(tmp_path_factory):
    if not cuda_available():
        pytest.skip("needs a CUDA GPU")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # workers share the session's base folder (popen-gwN's parent)
        by_name = _shared_results(tmp_path_factory.getbasetemp().parent)
    else:
        by_name = _check_all_hazard_units()
    verdict_dir = os.environ.get("GRAPHREADY_VERDICT_DIR")
    if verdict_dir:
        write_verdicts(by_name, Path(verdict_dir))
    return by_name


__all__ = ["CLEAN_TWINS", "HAZARDS", "graph_unit_check", "hazard_results"]
