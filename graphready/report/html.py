"""The triage report as one self-contained HTML file: inline CSS and SVG, no scripts, no external fonts.

Long paths, chains and code wrap instead of scrolling sideways, so it reads at 1280 px or on a phone.
"""

from __future__ import annotations

import html
import re

from graphready.findings import Evidence, Finding
from graphready.report.chart import panel_svg, unit_panels
from graphready.report.describe import (cause_stats, config_items, first_location, run_line,
                                       settings_missing, when)
from graphready.report.triage import (EVIDENCE_HELP, EVIDENCE_LABELS, EVIDENCE_ORDER, INTERNAL_HELP, RANKING, Item,
                                      RootCause, RunInfo, Triage)
from graphready.report.units import UNIT_COLUMNS, NUMERIC_COLUMNS, unit_row

CSS = """
*, *::before, *::after { box-sizing: border-box; }
body { margin: 0; background: #f6f8fa; color: #1f2328; overflow-wrap: anywhere;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 32px 0 12px; padding-bottom: 6px; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 17px; margin: 0 0 6px; }
p { margin: 6px 0; }
.muted { color: #59636e; }
.nowrap { white-space: nowrap; }
code, pre, .code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: 13px; overflow-wrap: anywhere; word-break: break-word; }
code { background: #eff1f3; border-radius: 4px; padding: 1px 4px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 12px; }
.card { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 10px 14px; }
.card .num { font-size: 26px; font-weight: 650; line-height: 1.2; }
.card .label { color: #59636e; font-size: 13px; }
table { width: 100%; border-collapse: collapse; table-layout: fixed; background: #fff;
  border: 1px solid #d0d7de; border-radius: 8px; }
th, td { padding: 6px 10px; border-bottom: 1px solid #d8dee4; text-align: left; vertical-align: top;
  overflow-wrap: anywhere; }
th { background: #f6f8fa; font-size: 13px; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
col.name { width: 22%; }
th { overflow-wrap: normal; }
table.units td { vertical-align: baseline; }
@media (max-width: 640px) {
  table.units, table.units tbody, table.units td { display: block; width: 100%; }
  table.units colgroup, table.units thead { display: none; }
  table.units tr { display: grid; grid-template-columns: 1fr 1fr; column-gap: 16px; padding: 6px 12px;
    border-bottom: 1px solid #d0d7de; }
  table.units td { border: 0; padding: 1px 0; display: flex; justify-content: space-between; gap: 8px;
    font-size: 14px; }
  table.units td.unit { grid-column: 1 / -1; font-weight: 600; }
  table.units td[data-label]::before { content: attr(data-label); color: #59636e; font-weight: 400; }
}
.cause { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 16px; margin: 0 0 16px; }
.fix { background: #ddf4ff; border-left: 4px solid #0969da; padding: 6px 10px; border-radius: 4px; margin: 8px 0; }
.item { border-top: 1px solid #d8dee4; padding: 12px 0 4px; margin-top: 12px; }
.loc { font-weight: 600; }
.badge { display: inline-block; border-radius: 999px; padding: 0 8px; font-size: 12px; font-weight: 600;
  line-height: 20px; margin-right: 4px; white-space: nowrap; border: 1px solid transparent; }
.sev-error { background: #ffebe9; color: #a40e26; border-color: #ffcecb; }
.sev-warning { background: #fff8c5; color: #7d4e00; border-color: #f5e0a0; }
.sev-info { background: #ddf4ff; color: #0550ae; border-color: #b6e3ff; }
.ev-confirmed { background: #8250df; color: #fff; }
.ev-static { background: #eff1f3; color: #1f2328; border-color: #d0d7de; }
.ev-dynamic { background: #fbefff; color: #6e40c9; border-color: #e8d5ff; }
.st-new { background: #cf222e; color: #fff; }
.st-baseline { background: #eff1f3; color: #59636e; border-color: #d0d7de; }
.status-pass { color: #1a7f37; font-weight: 600; }
.status-fail { color: #bc4c00; font-weight: 600; }
.status-error, .status-internal-error { color: #cf222e; font-weight: 600; }
.chain { margin: 6px 0; color: #59636e; }
.chain .arrow { color: #8c959f; padding: 0 2px; }
.snippet { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: 6px 0; margin: 8px 0; }
.line { display: flex; }
.line.hl { background: #ffebe9; }
.ln { flex: 0 0 4.5em; text-align: right; padding-right: 12px; color: #8c959f; user-select: none;
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; font-size: 13px; }
.line .code { flex: 1 1 auto; min-width: 0; white-space: pre-wrap; padding-right: 8px; tab-size: 4; }
@media (max-width: 640px) {
  main { padding: 16px 12px 40px; }
  .cause { padding: 12px; }
  .ln { flex-basis: 3em; padding-right: 8px; }
  .snippet .code, .ln { font-size: 12px; }
  table.kv th { width: 7.5em; padding-left: 0; }
  .run { padding: 10px 12px; }
}
details > summary { cursor: pointer; color: #0969da; margin-top: 12px; font-weight: 600; }
ul.changes { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 10px 10px 10px 32px; }
ul.changes li { margin: 4px 0; overflow-wrap: anywhere; }
.cards.evidence { grid-template-columns: repeat(auto-fit, minmax(260px, 1fr)); margin-top: 12px; }
.card .help { color: #59636e; font-size: 13px; margin-top: 4px; }
.card .num.sev-error, .card .num.sev-warning, .card .num.sev-info { background: none; border: 0; }
.card .num.sev-error { color: #a40e26; }
.card .num.sev-warning { color: #7d4e00; }
.card .num.sev-info { color: #0550ae; }
ol.ranking { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; margin: 0; padding: 0;
  list-style: none; counter-reset: rank; }
ol.ranking li { counter-increment: rank; display: grid; grid-template-columns: 2.2em 1fr; gap: 2px 8px;
  padding: 10px 14px; border-bottom: 1px solid #d8dee4; }
ol.ranking li:last-child { border-bottom: 0; }
ol.ranking li::before { content: counter(rank); grid-row: span 2; font-size: 20px; font-weight: 650;
  color: #59636e; line-height: 1.3; }
ol.ranking .what a { font-weight: 600; color: #0969da; text-decoration: none; }
ol.ranking .stats { color: #59636e; font-size: 13px; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); gap: 12px; margin-bottom: 16px; }
figure.chart { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 12px 14px; margin: 0;
  min-width: 0; }
figure.chart figcaption { font-weight: 600; margin-bottom: 6px; }
svg.chart { display: block; overflow: visible; }
.run { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 12px 16px; margin: 0 0 12px; }
table.kv { border: 0; margin-top: 6px; }
table.kv th { width: 10em; background: none; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
table.kv td { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: 13px; }
"""


_CODE_SPAN = re.compile(r"`([^`]+)`")
_BREAK_AFTER = re.compile(r"([.:/])(?=[^.:/])")
FOLD_AFTER = 10  # a rule's findings past this many sit in a <details> block: new ones come first


def render_html(triage: Triage) -> str:
    baseline = f"; baseline {_code(str(triage.baseline))}" if triage.baseline else ""
    body = [
        "<h1>graphready triage report</h1>",
        f'<p class="muted">Made {html.escape(when(triage.created))} by graphready {html.escape(triage.version)} '
        f'from {", ".join(_code(s) for s in triage.sources)}{baseline}.</p>',
        "<h2>Summary</h2>", _cards(triage), _evidence_cards(triage),
    ]
    if triage.internal:
        body += ["<h2>graphready's own failures</h2>", f'<p class="muted">{_inline(INTERNAL_HELP)}</p>',
                 "<ul>" + "".join(_internal(f) for f in triage.internal) + "</ul>"]
    body += ["<h2>Fix first</h2>"]
    if triage.causes:
        body += [f'<p class="muted">{_inline(RANKING)}</p>', _ranking(triage.causes)]
    else:
        body.append("<p>Nothing to fix: no findings.</p>")
    if triage.units:
        body += ["<h2>Units</h2>", _charts(triage.units), _units(triage.units)]
    body.append("<h2>Findings by root cause</h2>")
    if triage.causes:
        body += [_cause(rank, cause) for rank, cause in enumerate(triage.causes, 1)]
    else:
        body.append("<p>No findings: nothing in the hot path blocks CUDA-graph capture.</p>")
    body += ["<h2>Changes since the baseline</h2>", _changes(triage)]
    body += ["<h2>Runs and settings</h2>"] + [_run(run) for run in triage.runs]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>graphready triage report</title>\n<style>{CSS}</style>\n</head>\n"
        "<body>\n<main>\n" + "\n".join(body) + "\n</main>\n</body>\n</html>\n"
    )


def _internal(f: Finding) -> str:
    unit = f' <span class="muted">unit {_code(f.unit)}</span>' if f.unit else ""
    return f"<li>{_code(f'{f.path}:{f.line}')} {html.escape(f.rule)}{unit}: {_inline(f.message)}</li>"


def _cards(triage: Triage) -> str:
    cards = [("findings", triage.total, "")]
    if triage.internal:
        cards.append(("internal errors", len(triage.internal), " sev-error"))
    cards += [(f"{sev.label}{'s' * (sev.label != 'info')}", n, f" sev-{sev.label}")
              for sev, n in triage.severity_counts.items()]
    if triage.baseline is not None:
        cards += [("new since baseline", len(triage.new), ""), ("fixed since baseline", len(triage.fixed), "")]
    if triage.units:
        passed = sum(1 for u in triage.units if u.get("status") == "pass")
        cards.append(("units passing", f"{passed}/{len(triage.units)}", ""))
    items = "".join(f'<div class="card"><div class="num{cls}">{value}</div><div class="label">{html.escape(label)}'
                    "</div></div>" for label, value, cls in cards)
    return f'<div class="cards">{items}</div>'


def _evidence_cards(triage: Triage) -> str:
    items = "".join(
        f'<div class="card"><div>{_evidence(ev)} <strong>{triage.evidence_counts[ev]}</strong></div>'
        f'<div class="help">{_inline(EVIDENCE_HELP[ev])}</div></div>' for ev in EVIDENCE_ORDER)
    return f'<div class="cards evidence">{items}</div>'


def _ranking(causes: list[RootCause]) -> str:
    rows = "".join(
        f'<li><div class="what"><a href="#{html.escape(c.rule)}">{html.escape(c.rule)} {html.escape(c.name)}</a> '
        f'{_severity(c.severity.label)}</div><div class="stats">{html.escape(cause_stats(c))} · start at '
        f"{_code(first_location(c))}</div></li>" for c in causes)
    return f'<ol class="ranking">{rows}</ol>'


def _charts(units: list[dict]) -> str:
    figures = "".join(f'<figure class="chart"><figcaption>{html.escape(panel.title)}</figcaption>'
                      f"{panel_svg(panel)}</figure>" for panel in unit_panels(units))
    return f'<div class="charts">{figures}</div>' if figures else ""


def _units(units: list[dict]) -> str:
    head = "".join(f'<th class="num">{c}</th>' if c in NUMERIC_COLUMNS else f"<th>{c}</th>" for c in UNIT_COLUMNS)
    rows = []
    for unit in units:
        tds = []
        for column, cell in zip(UNIT_COLUMNS, unit_row(unit)):
            label = f' data-label="{column}"'  # shown beside the value when a phone stacks the row
            if column in NUMERIC_COLUMNS:
                tds.append(f'<td class="num"{label}>{html.escape(cell)}</td>')
            elif column == "status":
                tds.append(f'<td class="status-{html.escape(cell)}"{label}>{html.escape(cell)}</td>')
            elif column == "unit":
                tds.append(f'<td class="code unit">{_breakable(cell)}</td>')
            else:
                tds.append(f"<td{label}>{html.escape(cell)}</td>")
        rows.append("<tr>" + "".join(tds) + "</tr>")
    colgroup = '<colgroup><col class="name">' + "<col>" * (len(UNIT_COLUMNS) - 1) + "</colgroup>"
    return f'<table class="units">{colgroup}<thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _cause(rank: int, cause: RootCause) -> str:
    counts = {ev: sum(1 for i in cause.items if i.evidence is ev) for ev in EVIDENCE_ORDER}
    tally = ", ".join(f"{n} {EVIDENCE_LABELS[ev]}" for ev, n in counts.items() if n)
    parts = [
        f'<section class="cause" id="{html.escape(cause.rule)}">',
        f"<h3>{rank}. {html.escape(cause.rule)} {html.escape(cause.name)} {_severity(cause.severity.label)}</h3>",
        f"<p>{_inline(cause.summary)}</p>" if cause.summary else "",
        f'<p class="muted">{html.escape(cause_stats(cause))}: {tally}</p>',
    ]
    if cause.fix:
        parts.append(f'<div class="fix"><strong>Fix:</strong> {_inline(cause.fix)}</div>')
    shown, folded = cause.items[:FOLD_AFTER], cause.items[FOLD_AFTER:]
    parts += [_item(item, cause.severity.label) for item in shown]
    if folded:
        parts.append(f"<details><summary>{len(folded)} more {html.escape(cause.rule)} finding"
                     f"{'s' * (len(folded) != 1)}</summary>")
        parts += [_item(item, cause.severity.label) for item in folded]
        parts.append("</details>")
    parts.append("</section>")
    return "\n".join(parts)


def _item(item: Item, cause_severity: str) -> str:
    f = item.finding
    badges = [_evidence(item.evidence)]
    if item.state:
        badges.append(f'<span class="badge st-{item.state}">{item.state}</span>')
    if f.severity.label != cause_severity:  # the project configured this finding's severity lower
        badges.append(_severity(f.severity.label))
    unit = f' <span class="muted">unit {_code(f.unit)}</span>' if f.unit else ""
    callers = (f' <span class="muted nowrap">{f.hot_callers} hot caller{"s" * (f.hot_callers != 1)}</span>'
               if f.hot_callers else "")
    parts = [
        '<div class="item">',
        f'<div><span class="loc code">{_breakable(f.path)}:{f.line}:{f.column + 1}</span> '
        f'{"".join(badges)}{unit}{callers}</div>',
        f"<p>{_inline(f.message)}</p>",
    ]
    if f.hot_chain:
        arrow = '<span class="arrow">&rarr;</span>'
        parts.append('<div class="chain">hot chain: ' + arrow.join(_code(step) for step in f.hot_chain) + "</div>")
    if item.snippet:
        lines = []
        indent = min((len(t) - len(t.lstrip()) for _, t in item.snippet if t.strip()), default=0)
        for number, text in ((n, t[indent:]) for n, t in item.snippet):
            marked = " hl" if f.line <= number <= f.end_line else ""
            lines.append(f'<div class="line{marked}"><span class="ln">{number}</span>'
                         f'<span class="code">{html.escape(text) or " "}</span></div>')
        parts.append('<div class="snippet">' + "".join(lines) + "</div>")
    parts.append("</div>")
    return "\n".join(parts)


def _changes(triage: Triage) -> str:
    if triage.baseline is None:
        return '<p class="muted">No baseline given (pass <code>--baseline FILE</code> to compare).</p>'
    parts = [f"<h3>New ({len(triage.new)})</h3>"]
    if triage.new:
        parts.append('<ul class="changes">' + "".join(
            f"<li>{_code(f'{f.path}:{f.line}')} {html.escape(f.rule)} {html.escape(f.name)}: "
            f"{_inline(f.message)}</li>" for f in triage.new) + "</ul>")
    else:
        parts.append("<p>Nothing new: every finding is already in the baseline.</p>")
    parts.append(f"<h3>Fixed ({len(triage.fixed)})</h3>")
    if triage.fixed:
        parts.append('<ul class="changes">' + "".join(
            f"<li>{_code(e['path'])} {html.escape(e['rule'])} "
            f'<span class="muted">fingerprint {html.escape(e["fingerprint"])}</span></li>'
            for e in triage.fixed) + "</ul>")
    else:
        parts.append("<p>Nothing fixed since the baseline.</p>")
    return "\n".join(parts)


def _run(run: RunInfo) -> str:
    parts = [f'<div class="run"><h3>{html.escape(run.tool)} · {_code(run.source)}</h3>',
             f'<p class="muted">{html.escape(run_line(run))}</p>']
    items = config_items(run.config)
    if items:
        rows = "".join(f"<tr><th>{html.escape(key)}</th><td>{_breakable(value)}</td></tr>" for key, value in items)
        parts.append(f'<table class="kv"><tbody>{rows}</tbody></table>')
    else:
        parts.append(f"<p>{html.escape(settings_missing(run))}</p>")
    parts.append("</div>")
    return "\n".join(parts)


def _severity(label: str) -> str:
    return f'<span class="badge sev-{label}">{label}</span>'


def _evidence(evidence: Evidence) -> str:
    return f'<span class="badge ev-{evidence.value}">{EVIDENCE_LABELS[evidence]}</span>'


def _code(text: str) -> str:
    """A code span that wraps after `.`, `:` and `/` (dotted names, paths) before breaking a word."""
    return f"<code>{_breakable(text)}</code>"


def _breakable(text: str) -> str:
    return _BREAK_AFTER.sub(r"\1<wbr>", html.escape(text))


def _inline(text: str) -> str:
    """Escaped prose in which `backticked` spans become code, as in the rule catalog."""
    return _CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", html.escape(text))
