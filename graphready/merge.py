"""Cross-reference `check` (GD) findings with `lint` (GR) findings at the same line.

A GD finding with a plausible static twin at the same path and line is *confirmed*: both tools
agree on the line to fix. One without is a *static blind spot*: only running the code found it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from graphready.findings import Evidence, Finding

# GD code -> GR codes (or GR prefixes ending in 'x') that describe the same hazard statically.
TWINS: dict[str, tuple[str, ...]] = {
    "GD101": ("GR101", "GR102", "GR103"),
    "GD102": ("GR302",),
    "GD201": ("GR1x", "GR2x", "GR3x", "GR4x", "GR5x"),
    "GD202": ("GR404",),
    "GD203": ("GR603", "GR501"),
    "GD301": ("GR303", "GR302", "GR601"),
    "GD302": ("GR601", "GR403"),
    "GD303": (),
    "GD304": ("GR601", "GR403"),
    "GD305": ("GR306", "GR307"),
    "GD306": (),
    "GD307": ("GR601", "GR305", "GR306"),
    "GD308": (),
    "GD309": ("GR605",),
    "GD401": ("GR301",),
    "GD402": ("GR301",),
    "GD501": ("GR401", "GR402", "GR403"),
    "GD601": (),
    "GD602": ("GR503",),
}


def is_twin(check_rule: str, lint_rule: str) -> bool:
    for pattern in TWINS.get(check_rule, ()):
        if pattern.endswith("x"):
            if lint_rule.startswith(pattern[:-1]) and len(lint_rule) == 5:
                return True
        elif lint_rule == pattern:
            return True
    return False


def _norm(path: str) -> str:
    return path.replace("\\", "/").removeprefix("./")


def same_file(a: str, b: str) -> bool:
    """Paths relative to different roots (the checkout, a nested project) name the same file."""
    a, b = _norm(a), _norm(b)
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def mark_evidence(check_findings: Iterable[Finding], lint_findings: Iterable[Finding]) -> list[Finding]:
    """Set `evidence` on every GD finding (confirmed or dynamic-only) and on the GR twins it confirms.

    Returns the GD findings followed by the lint findings, each lint finding marked confirmed when a
    GD finding pairs with it and static otherwise.
    """
    by_line: dict[int, list[Finding]] = defaultdict(list)
    lint = list(lint_findings)
    for finding in lint:
        by_line[finding.line].append(finding)
    confirmed_lint: set[int] = set()
    checks = list(check_findings)
    for finding in checks:
        twins = [
            f for f in by_line.get(finding.line, []) if same_file(finding.path, f.path) and is_twin(finding.rule, f.rule)
        ]
        finding.evidence = Evidence.CONFIRMED if twins else Evidence.DYNAMIC
        confirmed_lint.update(id(f) for f in twins)
    for finding in lint:
        finding.evidence = Evidence.CONFIRMED if id(finding) in confirmed_lint else Evidence.STATIC
    return checks + lint
