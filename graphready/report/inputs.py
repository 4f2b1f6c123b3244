"""Reading `graphready lint/check --format json` documents, with clear errors for anything else."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from graphready.errors import UsageError
from graphready.findings import JSON_VERSION, Finding


@dataclass
class ResultDocument:
    path: Path
    tool: str
    findings: list[Finding]
    units: list[dict]
    fail_on: str = "error"  # the severity at which this run's findings failed it
    run: dict | None = None  # `check` only: target, shard, workers (see graphready.report.shards)


def load_result(path: Path) -> ResultDocument:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise UsageError(f"{path}: not a graphready results document (expected a 'findings' list; "
                         "write one with `graphready lint --format json` or `graphready check --format json`)")
    if data.get("version") != JSON_VERSION:
        raise UsageError(f"{path}: results version {data.get('version')!r} is not supported "
                         f"(this graphready reads version {JSON_VERSION})")
    try:
        findings = [Finding.from_json(item) for item in data["findings"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: malformed finding: {exc}") from None
    units = data.get("units") or []
    if not isinstance(units, list) or not all(isinstance(u, dict) and "name" in u for u in units):
        raise UsageError(f"{path}: 'units' must be a list of objects with a 'name'")
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
    run = data.get("run")
    if run is not None and not isinstance(run, dict):
        raise UsageError(f"{path}: 'run' must be an object")
    return ResultDocument(path=path, tool=str(data.get("tool", "lint")), findings=findings, units=units,
                          fail_on=str(summary.get("fail_on", "error")), run=run)
