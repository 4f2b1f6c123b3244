"""Rule base class: handlers named `visit_<libcst node>` / `leave_<libcst node>`, Fixit-style.

A rule's name, severity and docs live in its catalog entry (`rules/<code>.toml`); the class holds
only the matching logic.
"""

from __future__ import annotations

from typing import ClassVar


class Rule:
    code: ClassVar[str]
    # "hot": only in hot code; "always": capture-site rules that apply wherever captures are set up
    scope: ClassVar[str] = "hot"
