"""Plain-text descriptions both renderers share: dates, the settings a run used, a root cause's stats."""

from __future__ import annotations

from datetime import datetime

from graphready.output.summary import counted
from graphready.report.triage import RootCause, RunInfo


def when(iso: str | None) -> str:
    """'2026-11-23 09:41 UTC' for an ISO 8601 time (as recorded, when it does not parse)."""
    if not iso:
        return "date not recorded"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if moment.utcoffset() is not None and not moment.utcoffset():
        return moment.strftime("%Y-%m-%d %H:%M UTC")
    return moment.strftime("%Y-%m-%d %H:%M %z").strip()


def run_line(run: RunInfo) -> str:
    """'lint by graphready 0.1.0, 2026-11-23 09:41 UTC, in /src/project' (what was recorded)."""
    version = f"graphready {run.version}" if run.version else "an older graphready (no run record)"
    where = f", in {run.root}" if run.root else ""
    return f"{run.tool} by {version}, {when(run.created)}{where}"


def settings_missing(run: RunInfo) -> str:
    if run.version is None:
        return "Settings not recorded: written by an older graphready."
    return f"Settings not recorded: this {run.tool} result was not written by the graphready command line."


def config_items(config: dict | None) -> list[tuple[str, str]]:
    """(setting, value) pairs in recorded order; lists joined, tables as `key = value`."""
    if not config:
        return []
    items = []
    for key, value in config.items():
        if key == "file":
            value = value or "none found: defaults"
        items.append((str(key), _value(value)))
    return items


def _value(value) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k} = {_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    return str(value)


def cause_stats(cause: RootCause) -> str:
    """'2 findings · 1 seen by check · 3 hot callers' (the last left out when not recorded)."""
    n, fan_in = len(cause.items), cause.fan_in
    callers = "" if fan_in is None else f" · {counted(fan_in, 'hot caller')}"
    return f"{counted(n, 'finding')} · {cause.seen_by_check} seen by check{callers}"


def first_location(cause: RootCause) -> str:
    f = cause.items[0].finding
    return f"{f.path}:{f.line}"
