"""The per-unit chart: eager vs replay time and eager vs graph kernels, from `check`'s `units` rows.

Two renderings of the same bars: inline SVG for the HTML report (no script, no fonts, no external
file) and fixed-width text bars for Markdown. Bar lengths are the only thing computed here; every
number shown is one the check recorded (a unit that never replayed simply has no replay bar).

The SVG has no viewBox: bar widths are percentages and text keeps its size, so the chart fills a
1280 px page and a 390 px phone alike instead of shrinking its labels.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from graphready.output.units import unit_speedup

LABEL_CHARS = 40  # longer unit names are cut (with an ellipsis) so a label fits a phone's width
INSIDE_FROM = 55.0  # percent: a bar longer than this carries its value inside, in white

EAGER, GRAPH, ESCAPED = "#8c959f", "#0969da", "#cf222e"


@dataclass(frozen=True)
class Bar:
    value: float | None  # None: not recorded (the phase did not run)
    text: str  # the value as shown, or why there is none


@dataclass(frozen=True)
class Row:
    unit: str
    status: str
    eager: Bar
    graph: Bar
    graph_color: str = GRAPH


@dataclass(frozen=True)
class Panel:
    title: str
    eager_label: str
    graph_label: str
    rows: list[Row]

    @property
    def scale(self) -> float:
        values = [b.value for r in self.rows for b in (r.eager, r.graph) if b.value is not None]
        return max(values, default=0.0) or 1.0


def unit_panels(units: list[dict]) -> list[Panel]:
    """The time panel and the kernel panel; a panel with no recorded number at all is left out."""
    times, kernels = [], []
    for unit in units:
        name, status = str(unit.get("name", "?")), str(unit.get("status", "?"))
        eager_ms, replay_ms = _number(unit.get("eager_ms")), _number(unit.get("replay_ms"))
        ratio = unit_speedup(unit) if replay_ms is not None else None
        speedup = f" · {ratio:.2f}x" if ratio is not None else ""
        times.append(Row(name, status, _bar(eager_ms, "{:.3f} ms"),
                         _bar(replay_ms, "{:.3f} ms" + speedup, _missing_replay(unit))))
        eager_k, graph_k = _number(unit.get("kernels")), _number(unit.get("graph_kernels"))
        escaped = eager_k is not None and graph_k is not None and graph_k < eager_k
        graph_text = "{:.0f}" + (f" · {eager_k - graph_k:.0f} escaped the graph" if escaped else "")
        kernels.append(Row(name, status, _bar(eager_k, "{:.0f}"), _bar(graph_k, graph_text, _missing_replay(unit)),
                           graph_color=ESCAPED if escaped else GRAPH))
    panels = [Panel("Time per step (ms)", "eager", "graph replay", times),
              Panel("Kernels per step", "eager", "in the graph", kernels)]
    return [p for p in panels if any(b.value is not None for r in p.rows for b in (r.eager, r.graph))]


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _bar(value: float | None, spec: str, missing: str = "not measured") -> Bar:
    return Bar(value, spec.format(value) if value is not None else missing)


def _missing_replay(unit: dict) -> str:
    if unit.get("capture") == "failed":
        return "no graph: capture failed"
    if unit.get("status") == "error":
        return "not measured: the unit stopped with an error"
    return "not measured"


# -- SVG -------------------------------------------------------------------------------------------
LABEL_H, BAR_H, BAR_GAP, ROW_GAP, LEGEND_H = 18, 12, 4, 14, 26


def panel_svg(panel: Panel) -> str:
    """One panel as an inline `<svg>` whose bars stretch with the page."""
    row_h = LABEL_H + 2 * BAR_H + BAR_GAP + ROW_GAP
    height = LEGEND_H + row_h * len(panel.rows)
    parts = [
        f'<svg class="chart" role="img" aria-label="{html.escape(panel.title)}" width="100%" height="{height}"'
        ' font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif"'
        ' font-size="12">',
        f"<title>{html.escape(panel.title)}: {html.escape(panel.eager_label)} vs {html.escape(panel.graph_label)}"
        "</title>",
        _legend(panel),
    ]
    for index, row in enumerate(panel.rows):
        top = LEGEND_H + index * row_h
        label = row.unit if len(row.unit) <= LABEL_CHARS else row.unit[:LABEL_CHARS - 1] + "…"
        status = f'<tspan fill="{_STATUS_COLORS.get(row.status, "#59636e")}"> · {html.escape(row.status)}</tspan>'
        parts.append(f'<text x="0" y="{top + 13}" fill="#1f2328"><title>{html.escape(row.unit)}</title>'
                     f"{html.escape(label)}{status}</text>")
        y = top + LABEL_H
        parts.append(_svg_bar(row.eager, y, EAGER, panel.scale, f"{row.unit} {panel.eager_label}"))
        parts.append(_svg_bar(row.graph, y + BAR_H + BAR_GAP, row.graph_color, panel.scale,
                              f"{row.unit} {panel.graph_label}"))
    parts.append("</svg>")
    return "\n".join(parts)


_STATUS_COLORS = {"pass": "#1a7f37", "fail": "#bc4c00", "error": "#cf222e"}


def _legend(panel: Panel) -> str:
    swatches = []
    x = 0
    keys = [(panel.eager_label, EAGER), (panel.graph_label, GRAPH)]
    if any(row.graph_color == ESCAPED for row in panel.rows):
        keys.append(("kernels escaped", ESCAPED))
    for label, color in keys:
        swatches.append(f'<rect x="{x}" y="4" width="12" height="12" rx="2" fill="{color}"/>'
                        f'<text x="{x + 17}" y="14" fill="#59636e">{html.escape(label)}</text>')
        x += 17 + 7 * len(label) + 18
    return "".join(swatches)


def _svg_bar(bar: Bar, y: int, color: str, scale: float, what: str) -> str:
    baseline = y + BAR_H - 2
    tip = f"<title>{html.escape(what)}: {html.escape(bar.text)}</title>"
    if bar.value is None:
        return f'<text x="0" y="{baseline}" fill="#59636e" font-style="italic">{tip}{html.escape(bar.text)}</text>'
    percent = 100.0 * bar.value / scale
    width = max(percent, 0.3) if bar.value > 0 else 0.0
    rect = f'<rect x="0" y="{y}" width="{width:.2f}%" height="{BAR_H}" rx="2" fill="{color}">{tip}</rect>'
    if percent > INSIDE_FROM:
        label = (f'<text x="{width:.2f}%" dx="-5" y="{baseline}" text-anchor="end" fill="#fff" font-weight="600">'
                 f"{html.escape(bar.text)}</text>")
    else:
        label = f'<text x="{width:.2f}%" dx="5" y="{baseline}" fill="#1f2328">{html.escape(bar.text)}</text>'
    return rect + label


# -- text ------------------------------------------------------------------------------------------
TEXT_BAR = 30  # characters for the longest bar


def panel_text(panel: Panel) -> list[str]:
    """One panel as fixed-width lines (for a Markdown code block): two bars per unit."""
    name_w = min(max(len(r.unit) for r in panel.rows), LABEL_CHARS)
    tag_w = max(len(panel.eager_label), len(panel.graph_label))
    lines = [panel.title]
    for row in panel.rows:
        name = row.unit if len(row.unit) <= LABEL_CHARS else row.unit[:LABEL_CHARS - 1] + "…"
        for first, tag, bar in ((True, panel.eager_label, row.eager), (False, panel.graph_label, row.graph)):
            head = f"{name:<{name_w}}" if first else " " * name_w
            cells = "█" * _chars(bar.value, panel.scale) if bar.value is not None else ""
            lines.append(f"{head}  {tag:<{tag_w}} {cells:<{TEXT_BAR}} {bar.text}".rstrip())
    return lines


def _chars(value: float, scale: float) -> int:
    if value <= 0:
        return 0
    return max(1, round(TEXT_BAR * value / scale))
