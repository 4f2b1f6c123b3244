"""The triage report as one self-contained HTML file: inline CSS, no scripts, no external fonts.

Long paths, chains and code wrap instead of scrolling sideways, so it reads at 1280 px or on a phone.
"""

from __future__ import annotations

import html
import re

from graphready.findings import Evidence
from graphready.output.units import UNIT_COLUMNS, unit_cells
from graphready.report.triage import EVIDENCE_LABELS, EVIDENCE_ORDER, Item, RootCause, Triage

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
col.name { width: 34%; }
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
.status-error { color: #cf222e; font-weight: 600; }
.chain { margin: 6px 0; color: #59636e; }
.chain .arrow { color: #8c959f; padding: 0 2px; }
.snippet { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: 6px 0; margin: 8px 0; }
.line { display: flex; }
.line.hl { background: #ffebe9; }
.ln { flex: 0 0 4.5em; text-align: right; padding-right: 12px; color: #8c959f; user-select: none;
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; font-size: 13px; }
.line .code { flex: 1 1 auto; min-width: 0; white-space: pre-wrap; padding-right: 8px; tab-size: 4; }
details > summary { cursor: pointer; color: #0969da; margin-top: 12px; font-weight: 600; }
ul.changes { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 10px 10px 10px 32px; }
ul.changes li { margin: 4px 0; overflow-wrap: anywhere; }
"""

_CODE_SPAN = re.compile(r"`([^`]+)`")
FOLD_AFTER = 10  # a rule's findings past this many sit in a <details> block: new ones come first


def render_html(triage: Triage) -> str:
    body = [
        "<h1>graphready triage report</h1>",
        f'<p class="muted">From {", ".join(_code(s) for s in triage.sources)}'
        + (f"; baseline {_code(str(triage.baseline))}" if triage.baseline else "") + ".</p>",
        _cards(triage),
    ]
    if triage.units:
        body += ["<h2>Units</h2>", _units(triage.units)]
    body.append("<h2>Findings by root cause</h2>")
    if triage.causes:
        body += [_cause(cause) for cause in triage.causes]
    else:
        body.append("<p>No findings: nothing in the hot path blocks CUDA-graph capture.</p>")
    body += ["<h2>Changes since the baseline</h2>", _changes(triage)]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>graphready triage report</title>\n<style>{CSS}</style>\n</head>\n"
        "<body>\n<main>\n" + "\n".join(body) + "\n</main>\n</body>\n</html>\n"
    )


def _cards(triage: Triage) -> str:
    cards = [("findings", triage.total)]
    cards += [(EVIDENCE_LABELS[ev], triage.evidence_counts[ev]) for ev in EVIDENCE_ORDER]
    if triage.baseline is not None:
        cards += [("new since baseline", len(triage.new)), ("fixed since baseline", len(triage.fixed))]
    if triage.units:
        passed = sum(1 for u in triage.units if u.get("status") == "pass")
        cards.append(("units passing", f"{passed}/{len(triage.units)}"))
    items = "".join(f'<div class="card"><div class="num">{value}</div><div class="label">{html.escape(label)}'
                    "</div></div>" for label, value in cards)
    return f'<div class="cards">{items}</div>'


def _units(units: list[dict]) -> str:
    numeric = {"eager ms", "replay ms", "speedup", "kernels/step"}
    head = "".join(f'<th class="num">{c}</th>' if c in numeric else f"<th>{c}</th>" for c in UNIT_COLUMNS)
    rows = []
    for unit in units:
        cells = unit_cells(unit)
        tds = []
        for column, cell in zip(UNIT_COLUMNS, cells):
            if column in numeric:
                tds.append(f'<td class="num">{html.escape(cell)}</td>')
            elif column == "status":
                tds.append(f'<td class="status-{html.escape(cell)}">{html.escape(cell)}</td>')
            elif column == "unit":
                tds.append(f'<td class="code">{html.escape(cell)}</td>')
            else:
                tds.append(f"<td>{html.escape(cell)}</td>")
        rows.append("<tr>" + "".join(tds) + "</tr>")
    colgroup = '<colgroup><col class="name">' + "<col>" * (len(UNIT_COLUMNS) - 1) + "</colgroup>"
    return f"<table>{colgroup}<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _cause(cause: RootCause) -> str:
    counts = {ev: sum(1 for i in cause.items if i.evidence is ev) for ev in EVIDENCE_ORDER}
    tally = ", ".join(f"{n} {EVIDENCE_LABELS[ev]}" for ev, n in counts.items() if n)
    parts = [
        f'<section class="cause" id="{html.escape(cause.rule)}">',
        f"<h3>{html.escape(cause.rule)} {html.escape(cause.name)} {_severity(cause.severity.label)}</h3>",
        f"<p>{_inline(cause.summary)}</p>" if cause.summary else "",
        f'<p class="muted">{len(cause.items)} finding{"s" * (len(cause.items) != 1)}: {tally}</p>',
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
    if f.severity.label != cause_severity:  # the project configured this rule's severity differently
        badges.append(_severity(f.severity.label))
    unit = f' <span class="muted">unit {_code(f.unit)}</span>' if f.unit else ""
    parts = [
        '<div class="item">',
        f'<div><span class="loc code">{html.escape(f.path)}:{f.line}:{f.column + 1}</span> '
        f'{"".join(badges)}{unit}</div>',
        f"<p>{_inline(f.message)}</p>",
    ]
    if f.hot_chain:
        arrow = '<span class="arrow">&rarr;</span>'
        parts.append('<div class="chain">hot chain: ' + arrow.join(_code(step) for step in f.hot_chain) + "</div>")
    if item.snippet:
        lines = []
        for number, text in item.snippet:
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


def _severity(label: str) -> str:
    return f'<span class="badge sev-{label}">{label}</span>'


def _evidence(evidence: Evidence) -> str:
    return f'<span class="badge ev-{evidence.value}">{EVIDENCE_LABELS[evidence]}</span>'


def _code(text: str) -> str:
    return f"<code>{html.escape(text)}</code>"


def _inline(text: str) -> str:
    """Escaped prose in which `backticked` spans become code, as in the rule catalog."""
    return _CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", html.escape(text))
