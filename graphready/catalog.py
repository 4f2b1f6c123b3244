"""The rule catalog: one TOML entry per rule code under the top-level `rules/` folder.

The catalog is the single source of truth for a rule's name, default severity and docs; the
`graphready rules` command, SARIF rule metadata and the example tests are all generated from it.
"""

from __future__ import annotations

import difflib
import functools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from graphready.findings import Severity

EXPECT_MARKER = re.compile(r"#\s*expect:\s*(?P<codes>GR\d{3}(?:\s*,\s*GR\d{3})*)")


class CatalogError(Exception):
    pass


@dataclass(frozen=True)
class Example:
    code: str
    title: str = ""
    filename: str = "example.py"
    config: dict = field(default_factory=dict)

    def expected(self) -> set[tuple[int, str]]:
        """(line, rule) pairs marked with `# expect: GRxxx` in a bad example."""
        marks: set[tuple[int, str]] = set()
        for lineno, text in enumerate(self.code.splitlines(), start=1):
            match = EXPECT_MARKER.search(text)
            if match:
                for code in match.group("codes").split(","):
                    marks.add((lineno, code.strip()))
        return marks

    def display_code(self) -> str:
        """The example as shown in docs: markers become a plain pointer comment."""
        return EXPECT_MARKER.sub(lambda m: f"# <- {m.group('codes')}", self.code).rstrip() + "\n"


@dataclass(frozen=True)
class RuleDoc:
    code: str
    name: str
    severity: Severity
    summary: str
    what: str
    why: str
    fix: str
    kind: str  # "lint" (GR, runs on source) or "check" (GD, found by the dynamic harness)
    bad: tuple[Example, ...]
    good: tuple[Example, ...]
    see_also: tuple[str, ...] = ()
    opt_in: bool = False  # runs only when `select` names the code itself (or ALL)

    def markdown(self) -> str:
        parts = [f"# {self.code} {self.name} [{self.severity.label}]", "", self.summary, ""]
        if self.opt_in:
            parts += [f"Off by default: enable it with `select = [\"{self.code}\"]` or `--select {self.code}`.", ""]
        parts += ["## What it does", "", self.what.strip(), "", "## Why is this bad?", "", self.why.strip(), ""]
        for heading, examples in (("Example", self.bad), ("Use instead", self.good)):
            if not examples:
                continue
            parts += [f"## {heading}", ""]
            for ex in examples:
                if ex.title:
                    parts += [f"{ex.title}:", ""]
                lang = "cuda" if ex.filename.endswith((".cu", ".cuh")) else "python"
                parts += [f"```{lang}", ex.display_code().rstrip(), "```", ""]
        parts += ["## Fix", "", self.fix.strip(), ""]
        if self.see_also:
            parts += ["## See also", "", ", ".join(self.see_also), ""]
        return "\n".join(parts)


def catalog_dir() -> Path:
    """`rules/` in a source checkout, `graphready/_catalog` in an installed wheel."""
    installed = Path(__file__).with_name("_catalog")
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[1] / "rules"


def _examples(entries: list, code: str, key: str) -> tuple[Example, ...]:
    out = []
    for entry in entries:
        if "code" not in entry:
            raise CatalogError(f"{code}: every [[{key}]] entry needs a 'code' field")
        out.append(
            Example(
                code=entry["code"],
                title=entry.get("title", ""),
                filename=entry.get("filename", "example.py"),
                config=entry.get("config", {}),
            )
        )
    return tuple(out)


def parse_rule(path: Path) -> RuleDoc:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{path.name}: {exc}") from None
    try:
        code = data["code"]
        return RuleDoc(
            code=code,
            name=data["name"],
            severity=Severity.parse(data["severity"]),
            summary=data["summary"],
            what=data["what"],
            why=data["why"],
            fix=data["fix"],
            kind=data.get("kind", "lint"),
            bad=_examples(data.get("bad", []), code, "bad"),
            good=_examples(data.get("good", []), code, "good"),
            see_also=tuple(data.get("see_also", [])),
            opt_in=bool(data.get("opt_in", False)),
        )
    except KeyError as exc:
        raise CatalogError(f"{path.name}: missing field {exc.args[0]!r}") from None


RULE_CODE = re.compile(r"G[DR]\d{3}")  # lint rules (GR) and the dynamic checks' findings (GD)


def _entries() -> list[Path]:
    """The catalog's files; an installation without them must not run (every finding would silently be an error
    and opt-in rules would run)."""
    found = sorted(catalog_dir().glob("*.toml"))
    if not found:
        raise CatalogError(f"no rule catalog in {catalog_dir()}: the graphready installation is incomplete")
    return found


@functools.cache
def rule_doc(code: str) -> RuleDoc | None:
    """One rule's entry, None for a code the catalog lacks: a lint run reads the entries of the codes it meets
    only (parsing all 48 was a tenth of a run after a one-line edit). `code` may come from a suppression comment:
    anything but a rule code is no file name."""
    _entries()
    path = catalog_dir() / f"{code}.toml"
    if not RULE_CODE.fullmatch(code) or not path.is_file():
        return None
    doc = parse_rule(path)
    if doc.code != path.stem:
        raise CatalogError(f"{path.name}: code {doc.code} does not match the file name")
    return doc


@functools.cache
def load_catalog() -> dict[str, RuleDoc]:
    rules = {}
    for path in _entries():
        doc = rule_doc(path.stem)
        if doc is None:
            raise CatalogError(f"{path.name}: the file name is no rule code (GR or GD and three digits)")
        rules[doc.code] = doc
    return rules


def lint_codes() -> list[str]:
    return sorted(code for code, doc in load_catalog().items() if doc.kind == "lint")


LOOKALIKES = str.maketrans({"O": "0", "o": "0", "I": "1", "l": "1", "L": "1"})


def check_code(code: str, where: str, prefix: bool = True) -> str:
    """`code` itself, or a UsageError naming `where` it was written and the nearest real code.

    With `prefix`, a leading part of codes (`GR`, `GR3`, `GR30`) and `ALL` are accepted too."""
    from graphready.errors import UsageError

    codes = lint_codes()
    if code in codes or (prefix and (code == "ALL" or (code.startswith("GR") and any(c.startswith(code) for c in codes)))):
        return code
    lookalike = code.translate(LOOKALIKES)  # GR1O1 and GR10l are typos of GR101
    nearest = [lookalike] if lookalike in codes else difflib.get_close_matches(code, codes, n=1, cutoff=0.0)
    kind = "rule code or prefix" if prefix else "rule code (a full code: no prefixes here)"
    hint = f"; did you mean {nearest[0]}?" if nearest else ""
    raise UsageError(f"{where}: unknown {kind} {code!r}{hint} (`graphready rules` lists them)")
