"""Rule hits as plain data (no libcst), so the engine can load cached results without libcst."""

from __future__ import annotations

from dataclasses import dataclass

# Codes produced by the engine itself rather than by a rule class.
UNUSED_SUPPRESSION = "GR000"
PARSE_ERROR = "GR001"
INTERNAL_ERROR = "GR002"  # graphready itself failed on the file or function (lint/failures.py)


@dataclass
class Candidate:
    """A rule hit before hot-chain, severity, suppressions and baseline are applied."""

    rule: str
    line: int
    column: int
    end_line: int
    end_column: int
    message: str
    function: str  # key of the function it is in
    severity: str | None = None  # set when a rule reports a milder case than its catalog default
