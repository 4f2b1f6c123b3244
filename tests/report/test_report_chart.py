"""The per-unit chart: eager vs replay time and kernel counts, drawn only from what `check` recorded."""

import re
import xml.etree.ElementTree as ET

from graphready.report.chart import ESCAPED, GRAPH, panel_svg, unit_panels
from graphready.report.html import render_html
from graphready.report.inputs import load_result
from graphready.report.markdown import render_markdown
from graphready.report.triage import build_triage


def long_unit(results) -> str:
    return load_result(results["check"]).units[2]["name"]


def svgs(page: str) -> dict[str, ET.Element]:
    """Each inline chart by its title, parsed (it must be well-formed to be parsed at all)."""
    charts = {}
    for fragment in re.findall(r"<svg .*?</svg>", page, flags=re.S):
        svg = ET.fromstring(fragment)
        charts[svg.get("aria-label")] = svg
    return charts


def bars(svg: ET.Element) -> list[tuple[str, str, str]]:
    """(what, width, fill) of every bar, `what` being its tooltip."""
    return [(rect.find("title").text, rect.get("width"), rect.get("fill")) for rect in svg.iter("rect")
            if rect.find("title") is not None]


def test_time_and_kernel_bars_are_scaled_to_the_largest_recorded_value(results):
    page = render_html(build_triage([load_result(results["check"])]))
    charts = svgs(page)
    long = long_unit(results)
    assert set(charts) == {"Time per step (ms)", "Kernels per step"}
    assert bars(charts["Time per step (ms)"]) == [
        ("layers.0.attn eager: 3.200 ms", "100.00%", "#8c959f"),
        ("layers.0.attn graph replay: 0.800 ms · 4.00x", "25.00%", GRAPH),
        ("layers.0.mhc_post eager: 1.100 ms", "34.38%", "#8c959f"),
        (f"{long} eager: 2.000 ms", "62.50%", "#8c959f"),
        (f"{long} graph replay: 0.500 ms · 4.10x", "15.62%", GRAPH),  # the recorded speedup
    ]
    kernels = bars(charts["Kernels per step"])
    assert ("layers.0.attn in the graph: 112", "100.00%", GRAPH) in kernels
    assert (f"{long} in the graph: 28 · 12 escaped the graph", "25.00%", ESCAPED) in kernels
    assert "<script" not in page


def test_a_unit_that_never_replayed_gets_a_reason_instead_of_a_bar(results):
    page = render_html(build_triage([load_result(results["check"])]))
    time_chart = svgs(page)["Time per step (ms)"]
    texts = ["".join(t.itertext()) for t in time_chart.iter("text")]
    assert any(t.endswith("no graph: capture failed") for t in texts)
    assert not [b for b in bars(time_chart) if b[0].startswith("layers.0.mhc_post graph replay")]


def test_long_unit_names_are_cut_in_the_label_and_kept_whole_in_the_tooltip(results):
    time_chart = svgs(render_html(build_triage([load_result(results["check"])])))["Time per step (ms)"]
    labels = [t for t in time_chart.iter("text")
              if t.find("title") is not None and t.find("title").text == long_unit(results)]
    shown = labels[0].find("title").tail  # the label follows its tooltip
    assert shown.endswith("…") and len(shown) == 40 and long_unit(results).startswith(shown[:-1])


def test_markdown_draws_the_same_bars_as_text(results):
    md = render_markdown(build_triage([load_result(results["check"])]))
    blocks = re.findall(r"```text\n(.*?)```", md, flags=re.S)
    time_lines, kernel_lines = blocks[0].splitlines(), blocks[1].splitlines()
    assert time_lines[0] == "Time per step (ms)" and kernel_lines[0] == "Kernels per step"

    assert time_lines[1].startswith("layers.0.attn") and time_lines[1].count("█") == 30
    assert "graph replay" in time_lines[2] and time_lines[2].count("█") == 8 and "0.800 ms · 4.00x" in time_lines[2]
    assert time_lines[3].count("█") == 10 and time_lines[4].endswith("no graph: capture failed")
    assert kernel_lines[6].endswith("28 · 12 escaped the graph") and kernel_lines[6].count("█") == 8


def test_no_recorded_number_means_no_chart():
    assert unit_panels([{"name": "u", "status": "error", "error": "crashed"}]) == []
    only_kernels = unit_panels([{"name": "u", "status": "pass", "kernels": 5, "graph_kernels": 5}])
    assert [p.title for p in only_kernels] == ["Kernels per step"]
    page_without_units = render_html(build_triage([]))
    assert "<svg" not in page_without_units


def test_the_legend_names_escaped_kernels_only_when_some_escaped():
    def legend(units):
        (kernels,) = [p for p in unit_panels(units) if p.title == "Kernels per step"]
        return [t.text for t in ET.fromstring(panel_svg(kernels)).iter("text")][:3]

    assert legend([{"name": "u", "status": "fail", "kernels": 10, "graph_kernels": 7}]) == [
        "eager", "in the graph", "kernels escaped"]
    assert "kernels escaped" not in legend([{"name": "u", "status": "pass", "kernels": 10, "graph_kernels": 10}])
