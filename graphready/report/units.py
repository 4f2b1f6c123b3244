"""The report's units table: what every output shows, with eager and graph kernel counts side by side."""

from __future__ import annotations

from graphready.output.units import unit_cells

UNIT_COLUMNS = ("unit", "status", "capture", "eager ms", "replay ms", "speedup", "eager kernels", "graph kernels")
NUMERIC_COLUMNS = {"eager ms", "replay ms", "speedup", "eager kernels", "graph kernels"}


def unit_row(unit: dict) -> tuple[str, ...]:
    """Display strings in `UNIT_COLUMNS` order; '-' where a value was not recorded."""
    graph = unit.get("graph_kernels")
    return (*unit_cells(unit), "-" if graph is None else str(graph))
