"""Reading `graphready lint/check --format json` documents, with clear errors for anything else."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from graphready.errors import UsageError, read_named_file
from graphready.findings import READABLE_JSON_VERSIONS, Finding


@dataclass
class ResultDocument:
    path: Path
    tool: str
    findings: list[Finding]
    units: list[dict]
    fail_on: str = "error"  # the severity at which this run's findings failed it
    root: Path | None = None  # the directory its finding paths are relative to, as the run recorded it
    version: str | None = None  # the graphready that wrote it
    created: str | None = None  # when, ISO 8601
    config: dict | None = None  # the settings the run used (`summary.config`)
    run: dict | None = None  # the whole run record; `check` adds target, shard, workers (see report.shards)


def load_result(path: Path) -> ResultDocument:
    text = read_named_file(path, "results file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise UsageError(f"{path}: not a graphready results document (expected a 'findings' list; "
                         "write one with `graphready lint --format json` or `graphready check --format json`)")
    version = data.get("version")
    if version not in READABLE_JSON_VERSIONS:
        raise UsageError(f"{path}: results version {data.get('version')!r} is not supported "
                         f"(this graphready reads versions {' and '.join(map(str, READABLE_JSON_VERSIONS))})")
    try:
        findings = [Finding.from_json(item, version) for item in data["findings"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: malformed finding: {exc}") from None
    units = data.get("units") or []
    if not isinstance(units, list) or not all(isinstance(u, dict) and "name" in u for u in units):
        raise UsageError(f"{path}: 'units' must be a list of objects with a 'name'")
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
    run = data.get("run", {})
    if not isinstance(run, dict) or not all(isinstance(run.get(k, ""), str) for k in ("root", "graphready", "created")):
        raise UsageError(f"{path}: 'run' must be an object whose 'root', 'graphready' and 'created' are strings")
    config = summary.get("config")
    if config is not None and not isinstance(config, dict):
        raise UsageError(f"{path}: 'summary.config' must be an object")
    return ResultDocument(path=path, tool=str(data.get("tool", "lint")), findings=findings, units=units,
                          fail_on=str(summary.get("fail_on", "error")),
                          root=Path(run["root"]) if run.get("root") else None,
                          version=run.get("graphready"), created=run.get("created"), config=config,
                          run=run or None)
