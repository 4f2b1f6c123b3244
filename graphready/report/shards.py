"""Merge the JSON of `graphready check --shard K/N` runs into one document and one verdict.

The shards of one target must come from one split: the same N, every K exactly once, the same
listed units (the same commit and target arguments) and the same fail-on. The merged document is an
ordinary `check` document: every unit in listing order, every finding, a summary over all of them,
and every shard's workers. Documents without a shard pass through unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

from graphready.errors import UsageError
from graphready.findings import JSON_VERSION, Severity, summarize
from graphready.report.inputs import ResultDocument


def _key(doc: ResultDocument) -> str:
    run = doc.run or {}
    return json.dumps([run.get("target"), run.get("factory_kwargs")], sort_keys=True)


def _label(doc: ResultDocument) -> str:
    return str((doc.run or {}).get("target", "?"))


def merge_shards(documents: list[ResultDocument]) -> list[ResultDocument]:
    """The documents with each target's shards replaced by their merged document (first shard's place)."""
    groups: dict[str, list[ResultDocument]] = {}
    for doc in documents:
        if doc.tool == "check" and doc.run and doc.run.get("shard"):
            groups.setdefault(_key(doc), []).append(doc)
    merged = {key: _merge(group) for key, group in groups.items()}
    out, placed = [], set()
    for doc in documents:
        key = _key(doc) if doc.tool == "check" and doc.run and doc.run.get("shard") else None
        if key is None:
            out.append(doc)
        elif key not in placed:
            placed.add(key)
            out.append(merged[key])
    return out


def _merge(shards: list[ResultDocument]) -> ResultDocument:
    target = _label(shards[0])
    counts = {doc.run["shard"].get("count") for doc in shards}
    if len(counts) != 1:
        raise UsageError(f"shards of {target} come from different splits (N = {', '.join(map(str, sorted(counts)))})")
    count = counts.pop()
    by_index: dict[int, ResultDocument] = {}
    for doc in shards:
        index = doc.run["shard"].get("index")
        if index in by_index:
            raise UsageError(f"shard {index}/{count} of {target} given twice ({by_index[index].path}, {doc.path})")
        by_index[index] = doc
    missing = [k for k in range(1, count + 1) if k not in by_index]
    if missing:
        raise UsageError(f"shard {', '.join(f'{k}/{count}' for k in missing)} of {target} missing: "
                         "a merged verdict needs every shard")
    ordered = [by_index[k] for k in range(1, count + 1)]
    listed = ordered[0].run.get("listed")
    if any(doc.run.get("listed") != listed for doc in ordered):
        raise UsageError(f"shards of {target} listed different units (another commit or other target arguments)")
    fail_on = {doc.fail_on for doc in ordered}
    if len(fail_on) != 1:
        raise UsageError(f"shards of {target} ran with different --fail-on ({', '.join(sorted(fail_on))})")
    position = {name: i for i, name in enumerate(listed or [])}
    units = sorted((u for doc in ordered for u in doc.units), key=lambda u: position.get(u["name"], len(position)))
    workers = [dict(w, shard=k) for k, doc in enumerate(ordered, 1) for w in doc.run.get("workers", [])]
    run = {
        "target": ordered[0].run.get("target"),
        "factory_kwargs": ordered[0].run.get("factory_kwargs"),
        "listed": listed,
        "shards": count,
        "workers": workers,
        "wall_s": max(float(doc.run.get("wall_s") or 0.0) for doc in ordered),
    }
    label = Path(f"{target} shards 1-{count}/{count}")
    return ResultDocument(path=label, tool="check", findings=[f for doc in ordered for f in doc.findings],
                          units=units, fail_on=fail_on.pop(), run=run)


def verdict(doc: ResultDocument) -> tuple[bool, str]:
    """(passed, one line) for a merged check document: it passes when every unit passed."""
    statuses = [u.get("status") for u in doc.units]
    counts = {s: statuses.count(s) for s in ("pass", "fail", "error", "internal-error") if s in statuses}
    passed = all(s == "pass" for s in statuses)
    parts = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no units"
    return passed, f"{doc.path}: {len(statuses)} unit(s), {parts}: {'passed' if passed else 'FAILED'}"


def to_json(doc: ResultDocument) -> dict:
    """The merged document in the `check --format json` shape."""
    summary = summarize(doc.findings, Severity.parse(doc.fail_on))
    internal = sum(1 for f in doc.findings if f.internal)
    if internal:
        summary["internal_errors"] = internal
    return {"version": JSON_VERSION, "tool": "check", "findings": [f.to_json() for f in doc.findings],
            "summary": summary, "units": doc.units, "run": doc.run}
