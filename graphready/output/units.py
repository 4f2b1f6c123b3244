"""Reading the `units` rows of a `check` document the same way in every output."""

from __future__ import annotations

UNIT_COLUMNS = ("unit", "status", "capture", "eager ms", "replay ms", "speedup", "kernels/step")


def unit_speedup(unit: dict) -> float | None:
    """The unit's eager/replay ratio: its own `speedup`, else computed from the two timings."""
    if unit.get("speedup") is not None:
        return float(unit["speedup"])
    eager, replay = unit.get("eager_ms"), unit.get("replay_ms")
    if eager is None or not replay:
        return None
    return float(eager) / float(replay)


def unit_cells(unit: dict) -> tuple[str, ...]:
    """One table row of display strings, in `UNIT_COLUMNS` order; '-' where a value is unknown."""
    return (
        str(unit.get("name", "?")),
        str(unit.get("status", "?")),
        str(unit.get("capture") or "-"),
        _number(unit.get("eager_ms"), ".3f"),
        _number(unit.get("replay_ms"), ".3f"),
        _number(unit_speedup(unit), ".2f", suffix="x"),
        _number(unit.get("kernels"), "d"),
    )


def _number(value, spec: str, suffix: str = "") -> str:
    if value is None:
        return "-"
    try:
        return f"{value:{spec}}{suffix}"
    except (TypeError, ValueError):
        return str(value)
