"""What changed since a lint baseline (read by `graphready.lint.baseline`): what is new, what was fixed."""

from __future__ import annotations

from dataclasses import dataclass

from graphready.findings import Finding

BaselineKey = tuple[str, str, str]


@dataclass(frozen=True)
class BaselineDiff:
    new: list[Finding]  # found now, not in the baseline
    fixed: list[dict]  # baseline entries no longer found


def finding_key(finding: Finding) -> BaselineKey:
    """The key the lint baseline matches on: path, rule and the line-move-proof fingerprint."""
    return (finding.path, finding.rule, finding.fingerprint or "")


def diff_against(findings: list[Finding], baseline: set[BaselineKey],
                 tools: frozenset[str] = frozenset({"lint", "check"})) -> BaselineDiff:
    """New = not in the baseline; fixed = in the baseline, no longer found by a tool that ran.

    A baseline entry of a tool that did not run (a GD entry in a lint-only run) is not "fixed".
    """
    found = {finding_key(f) for f in findings}
    new = [f for f in findings if finding_key(f) not in baseline]
    fixed = [{"path": p, "rule": r, "fingerprint": fp} for p, r, fp in sorted(baseline - found)
             if rule_tool(r) in tools]
    return BaselineDiff(new=new, fixed=fixed)


def rule_tool(rule: str) -> str:
    """Which tool reports a rule code: GD codes come from `check`, everything else from `lint`."""
    return "check" if rule.startswith("GD") else "lint"
