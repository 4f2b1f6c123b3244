from graphready.catalog import load_catalog
from graphready.findings import Evidence
from graphready.lint.baseline import load_baseline
from graphready.report.inputs import load_result
from graphready.report.triage import build_triage


def triage_of(results, baseline=True):
    docs = [load_result(results["lint"]), load_result(results["check"])]
    keys = load_baseline(results["baseline"]) if baseline else None
    return build_triage(docs, results["root"], baseline=keys, baseline_path=results["baseline"] if baseline else None)


def test_findings_are_grouped_by_rule_with_the_catalog_summary_and_fix(results):
    triage = triage_of(results)
    causes = {cause.rule: cause for cause in triage.causes}
    assert set(causes) == {"GR101", "GD201", "GD303"}
    doc = load_catalog()["GR101"]
    assert causes["GR101"].summary == doc.summary
    assert causes["GR101"].fix == " ".join(doc.fix.split())
    assert len(causes["GR101"].items) == 2 and triage.total == 4
    assert [c.rule for c in triage.causes][:1] == ["GR101"]  # the biggest group of the most severe rules first
    assert triage.causes[-1].rule == "GD303"  # warnings after errors


def test_lint_and_check_findings_at_the_same_line_confirm_each_other(results):
    triage = triage_of(results)
    evidence = {(i.finding.rule, i.finding.line): i.evidence for c in triage.causes for i in c.items}
    assert evidence == {("GR101", 7): Evidence.CONFIRMED, ("GR101", 8): Evidence.STATIC,
                        ("GD201", 7): Evidence.CONFIRMED, ("GD303", 6): Evidence.DYNAMIC}
    assert triage.evidence_counts == {Evidence.CONFIRMED: 2, Evidence.STATIC: 1, Evidence.DYNAMIC: 1}


def test_one_side_alone_keeps_the_evidence_its_tool_recorded(results):
    lint_only = build_triage([load_result(results["lint"])], results["root"])
    assert lint_only.evidence_counts == {Evidence.CONFIRMED: 0, Evidence.STATIC: 2, Evidence.DYNAMIC: 0}
    check_only = build_triage([load_result(results["check"])], results["root"])
    assert check_only.evidence_counts == {Evidence.CONFIRMED: 1, Evidence.STATIC: 0, Evidence.DYNAMIC: 1}


def test_baseline_splits_new_from_known_and_lists_what_was_fixed(results):
    triage = triage_of(results)
    assert sorted(f.fingerprint for f in triage.new) == ["fp-capture", "fp-sync", "fp-unstable"]
    assert triage.fixed == [{"path": "pkg/gone.py", "rule": "GR101", "fingerprint": "fp-gone"}]
    states = {i.finding.fingerprint: i.state for c in triage.causes for i in c.items}
    assert states == {"fp-sync": "new", "fp-old": "baseline", "fp-capture": "new", "fp-unstable": "new"}
    gr101 = next(c for c in triage.causes if c.rule == "GR101")
    assert [i.state for i in gr101.items] == ["new", "baseline"]  # new debt first


def test_without_a_baseline_nothing_is_called_new(results):
    triage = triage_of(results, baseline=False)
    assert triage.new == [] and triage.fixed == []
    assert {i.state for c in triage.causes for i in c.items} == {""}


def test_snippets_frame_the_finding_and_units_are_collected(results):
    triage = triage_of(results)
    item = next(i for c in triage.causes for i in c.items if i.finding.fingerprint == "fp-sync")
    assert [n for n, _ in item.snippet] == [5, 6, 7, 8]
    assert item.snippet[2][1].strip() == "peak = x.abs().max().item()"
    assert [u["name"] for u in triage.units][:2] == ["layers.0.attn", "layers.0.mhc_post"]


def test_the_same_results_given_twice_are_reported_once(results):
    docs = [load_result(results["lint"]), load_result(results["lint"])]
    assert build_triage(docs, results["root"]).total == 2


def test_only_a_tool_that_ran_can_have_fixed_its_baseline_entries(results):
    baseline = {("pkg/gone.py", "GR101", "fp-gone"), ("pkg/model.py", "GD304", "fp-freed")}
    lint_only = build_triage([load_result(results["lint"])], results["root"], baseline=baseline)
    assert [e["rule"] for e in lint_only.fixed] == ["GR101"]
    both = build_triage([load_result(results["lint"]), load_result(results["check"])], results["root"],
                        baseline=baseline)
    assert sorted(e["rule"] for e in both.fixed) == ["GD304", "GR101"]
