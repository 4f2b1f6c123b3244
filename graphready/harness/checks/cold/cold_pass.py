"""The cold pass of `graphready check --cold-capture`: its worker command and how its results join
the main pass's. It runs in the parent, so it imports no torch.

Each lane first runs its units through `serve --cold` workers (a capture with no warm-up, GD203;
`graphready.harness.checks.cold.lazy`), then through the usual workers; a cold capture that fails
poisons its worker, which is replaced like any other. The cold pass's findings join each unit's
report; a cold failure counts only where the warmed-up capture succeeded.
"""

from __future__ import annotations

from graphready.findings import Severity
from graphready.harness.pool import WorkerRecord
from graphready.harness.result import UnitResult, make_finding

COLD_FLAG = "--cold"
COLD_PHASE = "cold capture"


def cold_command(command: tuple[str, ...]) -> tuple[str, ...]:
    """The worker command whose `serve` checks units with a cold capture instead of the full check."""
    return (*command, COLD_FLAG)


def merge_cold(main: UnitResult, cold: UnitResult | None) -> UnitResult:
    """`main` with the cold pass's GD203 findings, notes and time added (in place; returned)."""
    if cold is None:
        return main
    if cold.phase_seconds:
        main.phase_seconds[COLD_PHASE] = round(sum(cold.phase_seconds.values()), 4)
    main.notes += cold.notes
    warm_ok = main.capture == "ok"
    if cold.error is not None:  # the cold worker crashed or hung on this unit
        anchor = cold.findings[0] if cold.findings else None
        if warm_ok and anchor is not None:
            main.findings.append(make_finding(
                "GD203", f"the step cannot be captured without a warm-up: {cold.error}; run it once before capturing",
                unit=main.name, path=anchor.path, line=anchor.line, severity=Severity.WARNING,
            ))  # fmt: skip
        else:
            main.notes.append(f"capture without warm-up not checked: {cold.error}")
        return main
    if cold.internal_failures:  # graphready's own cold capture check failed: GD001, whatever the warm capture did
        anchor = next(f for f in cold.findings if f.internal)
        for failure in cold.internal_failures:
            main.add_internal_failure(failure, anchor.path, anchor.line)
    for finding in cold.findings:
        if finding.rule != "GD203":
            continue
        if finding.severity >= Severity.WARNING and not warm_ok:
            continue  # the warmed-up capture fails too: GD201 already says why
        main.findings.append(finding)
    return main


def merge_lane(
    main: tuple[list[UnitResult], list[WorkerRecord]], cold: tuple[list[UnitResult], list[WorkerRecord]] | None
) -> tuple[list[UnitResult], list[WorkerRecord]]:
    """One lane's results with its cold pass merged in, and the workers of both passes."""
    if cold is None:
        return main
    cold_by_name = {r.name: r for r in cold[0]}
    return [merge_cold(r, cold_by_name.get(r.name)) for r in main[0]], [*cold[1], *main[1]]
