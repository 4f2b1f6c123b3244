"""`assume-true` / `assume-false`: branch tests a deployment states once, as the hot chain prints them.

The fixtures are shaped like SGLang 0.5.23: Gemma 3's rotary embedding, whose dynamic-RoPE update runs
only `if "dynamic" in self.rope_type` (gemma3_causal.py), and a MoE layer that finalizes through a
reference fallback, a Marlin path or a fused op bound at load (muse_spark_fp4_moe.py's `_finalize_op`).
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from graphready.cli import main
from graphready.lint.scope.assume import Facts, parse

ROPE = '''\
import torch


class Gemma3RotaryEmbedding(torch.nn.Module):
    def _dynamic_frequency_update(self, position_ids, device):
        seq_len = torch.max(position_ids) + 1
        if seq_len > self.max_seq_len_cached:  # growth
            self.max_seq_len_cached = seq_len

    def forward(self, x, position_ids):
        if "dynamic" in self.rope_type:
            self._dynamic_frequency_update(position_ids, device=x.device)
        return x * self.inv_freq
'''

MOE = '''\
import torch


class Experts(torch.nn.Module):
    def forward(self, out: torch.Tensor, topk_ids: torch.Tensor):
        if self._finalize_op is None:
            return self._finalize_reference(out, topk_ids)
        elif self.use_marlin:
            return self._marlin(out, topk_ids)
        else:
            return self._fused(out, topk_ids)

    def _finalize_reference(self, out: torch.Tensor, topk_ids: torch.Tensor):
        valid = topk_ids >= 0
        if valid.any():
            out = out * 2
        return out

    def _marlin(self, out: torch.Tensor, topk_ids: torch.Tensor):
        return out[: int(topk_ids.max())]

    def _fused(self, out: torch.Tensor, topk_ids: torch.Tensor):
        return out + topk_ids.sum().item()
'''

FILES = {"pkg/__init__.py": "", "pkg/rope.py": ROPE, "pkg/moe.py": MOE}
ROOTS = {"hot-paths": ["pkg.*:*.forward"]}
DYNAMIC = ("pkg/rope.py", 7)  # `if seq_len > ...` in the dynamic update: a tensor read on the host
REFERENCE, MARLIN, FUSED = ("pkg/moe.py", 15), ("pkg/moe.py", 20), ("pkg/moe.py", 23)
EVERYTHING = {DYNAMIC, REFERENCE, MARLIN, FUSED}


def found(result) -> set[tuple[str, int]]:
    return {(f.path, f.line) for f in result.findings}


def test_without_facts_every_branch_is_hot_and_its_chain_prints_the_test(lint_project):
    result = lint_project(FILES, ROOTS)
    assert found(result) == EVERYTHING
    chains = {(f.path, f.line): f.hot_chain[-1] for f in result.findings}
    assert chains[DYNAMIC].endswith("_dynamic_frequency_update [if 'dynamic' in self.rope_type]")
    assert chains[MARLIN].endswith("_marlin [if self._finalize_op is not None and self.use_marlin]")


def test_a_matching_fact_makes_the_other_branch_cold_and_its_callees_unreached(lint_project):
    result = lint_project(FILES, {**ROOTS, "assume-false": ["'dynamic' in self.rope_type"]})
    assert found(result) == EVERYTHING - {DYNAMIC}
    assert "pkg.rope:Gemma3RotaryEmbedding._dynamic_frequency_update" not in result.hot_chains
    assert result.assumptions == [{"key": "assume-false", "entry": "'dynamic' in self.rope_type", "tests": 1,
                                   "call_edges": 1}]


@pytest.mark.parametrize(("table", "cold"), [
    ({"assume-true": ["self._finalize_op is not None"]}, {REFERENCE}),  # the `if` body
    ({"assume-true": ["self._finalize_op is None"]}, {MARLIN, FUSED}),  # its `elif` and `else`
    ({"assume-true": ["self.use_marlin"]}, {FUSED}),  # an `elif` test true: only the `else`
    ({"assume-false": ["self.use_marlin"]}, {MARLIN}),  # an `elif` test false: only its body
    # a chain's joined tests, stated false as a whole: that branch only
    ({"assume-false": ["self._finalize_op is not None and self.use_marlin"]}, {MARLIN}),
    ({"assume-false": ["self._finalize_op is not None and not self.use_marlin"]}, {FUSED}),
    # ... or true as a whole: every test in it holds
    ({"assume-true": ["self._finalize_op is not None and not self.use_marlin"]}, {REFERENCE, MARLIN}),
    ({"assume-true": ["self.use_marlin or self._finalize_op is None"]}, {FUSED}),
])
def test_both_branches_and_elif(lint_project, table, cold):
    assert found(lint_project(FILES, {**ROOTS, **table})) == EVERYTHING - cold


@pytest.mark.parametrize("table", [
    {"assume-false": ["'dynamic' in self.rope_type"]},
    {"assume-false": ['"dynamic"   in (self.rope_type)']},  # quotes, spacing, parentheses
    {"assume-true": ["not 'dynamic' in self.rope_type"]},  # `not x` true is `x` false
    {"assume-true": ["'dynamic' not in self.rope_type"]},
    {"assume-false": ["not ('dynamic' not in self.rope_type)"]},
])
def test_entries_are_normalised(lint_project, table):
    assert found(lint_project(FILES, {**ROOTS, **table})) == EVERYTHING - {DYNAMIC}


def test_normalised_facts_are_the_same_fact():
    said = [parse("assume-false", "x is None"), parse("assume-true", "not (x is None)"),
            parse("assume-true", "x is not None"), parse("assume-false", "(x  is  None)")]
    assert len({a.clauses for a in said}) == 1
    with pytest.raises(ValueError, match="contradict each other"):
        Facts.of([parse("assume-true", "x"), parse("assume-true", "not x")])


def test_a_fact_decides_and_or_tests_it_is_an_operand_of():
    facts = Facts.of([parse("assume-false", "a"), parse("assume-true", "b")])
    matched: list[str] = []
    value = {text: facts.decide(ast.parse(text, mode="eval").body, matched)
             for text in ("a and c", "b or c", "a or c", "not a and b", "c")}
    assert value == {"a and c": (False, "assume-false 'a'"), "b or c": (True, "assume-true 'b'"),
                     "a or c": None, "not a and b": (True, "assume-false 'a'"), "c": None}


def test_a_test_that_returns_makes_the_rest_cold_too(lint_project):
    source = textwrap.dedent('''\
        import torch


        class Experts(torch.nn.Module):
            def forward(self, out: torch.Tensor, topk_ids: torch.Tensor):
                if self._finalize_op is not None:
                    return self._finalize_op(out, topk_ids)
                return out + topk_ids.sum().item()
        ''')
    files = {"pkg/__init__.py": "", "pkg/moe.py": source}
    assert found(lint_project(files, ROOTS)) == {("pkg/moe.py", 8)}
    assert found(lint_project(files, {**ROOTS, "assume-true": ["self._finalize_op is not None"]})) == set()


@pytest.fixture
def project(project_tree, monkeypatch):
    def configure(table: str) -> Path:
        root = project_tree(FILES)(textwrap.dedent(table))
        monkeypatch.chdir(root)
        return root
    return configure


@pytest.mark.parametrize(("table", "message"), [
    ("assume-false = [\"'dynamic' in self.rope_typ\"]\n",
     "assume-false entry \"'dynamic' in self.rope_typ\" matches no `if` test in a function of the 3 modules"),
    # an entry is parsed, never run: this names no test (and creates no file)
    ("assume-true = [\"__import__('pathlib').Path('ran').touch()\"]\n", "matches no `if` test"),
    ("assume-true = [{test = 'self._finalize_op is None', in = 'pkg.rope'}]\n",
     "assume-true entry 'self._finalize_op is None' in pkg.rope matches no `if` test"),
    ("assume-true = ['self.use_marlin ==']\n", "is not a Python expression"),
    ("assume-true = ['x']\nassume-false = ['x']\n", "contradict each other"),
    ("assume-true = 'x'\n", "assume-true must be a list of branch tests"),
    ("assume-true = [{test = 'x', in = 'pkg:Experts'}]\n", "must be a string or {test ="),
])
def test_an_entry_that_matches_nothing_or_cannot_be_read_is_exit_2(project, capsys, table, message):
    root = project('hot-paths = ["pkg.*:*.forward"]\n' + table)
    assert main(["lint", "--no-cache"]) == 2
    assert message in capsys.readouterr().err
    assert not (root / "ran").exists()


def test_statistics_count_what_each_fact_made_cold(project, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the table folds long entries on a narrow terminal
    project('''\
        hot-paths = ["pkg.*:*.forward"]
        assume-false = ["'dynamic' in self.rope_type"]
        assume-true = ["self._finalize_op is None"]
        ''')
    assert main(["lint", "--no-cache", "--statistics", "--format", "json"]) == 1
    assumed = json.loads(capsys.readouterr().out)["summary"]["assume"]
    assert assumed == [
        {"key": "assume-false", "entry": "'dynamic' in self.rope_type", "tests": 1, "call_edges": 1,
         "functions": 1, "findings": 1},
        {"key": "assume-true", "entry": "self._finalize_op is None", "tests": 1, "call_edges": 2,
         "functions": 2, "findings": 2},
    ]
    assert main(["lint", "--no-cache", "--statistics"]) == 1
    out = capsys.readouterr().out
    assert "Assumed facts" in out and "assume-true 'self._finalize_op is None'" in out


def test_a_changed_fact_is_never_served_from_the_cache(project, capsys):
    tables = ['hot-paths = ["pkg.*:*.forward"]\n',
              'hot-paths = ["pkg.*:*.forward"]\nassume-true = ["self._finalize_op is None"]\n',
              'hot-paths = ["pkg.*:*.forward"]\nassume-false = ["self._finalize_op is None"]\n',
              'hot-paths = ["pkg.*:*.forward"]\n']
    runs = []
    for table in tables:
        root = project(table)
        for cache in ([], ["--no-cache"]):  # through the cache, then cold: the same findings
            main(["lint", "--format", "json", *cache])
            runs.append({(f["path"], f["line"]) for f in json.loads(capsys.readouterr().out)["findings"]})
        assert runs[-2] == runs[-1]
    assert (root / ".graphready_cache").is_dir()
    assert runs[0] == EVERYTHING and runs[2] == EVERYTHING - {MARLIN, FUSED} and runs[4] == EVERYTHING - {REFERENCE}
    assert runs[6] == runs[0]


def test_a_profiles_facts_apply_and_need_not_match(lint_project, monkeypatch):
    import graphready.profiles

    shipped = {"hot-paths": ["pkg.*:*.forward"], "assume-false": ["'dynamic' in self.rope_type", "self.use_ep"]}
    monkeypatch.setattr(graphready.profiles, "load_profile", lambda name: shipped)
    result = lint_project(FILES, {"profile": "engine"})
    assert found(result) == EVERYTHING - {DYNAMIC}  # `self.use_ep` names no test here: a profile spans releases
    assert [(a["entry"], a["tests"]) for a in result.assumptions] == [("'dynamic' in self.rope_type", 1),
                                                                      ("self.use_ep", 0)]


def test_a_fact_about_a_local_is_scoped_to_its_modules(lint_project):
    """`out is None` or `use_fused` mean something else in every module that tests them."""
    files = {**FILES, "pkg/other.py": MOE}
    other = {("pkg/other.py", line) for _, line in (REFERENCE, MARLIN, FUSED)}
    scoped = {"test": "self._finalize_op is None", "in": "pkg.mo*"}
    result = lint_project(files, {**ROOTS, "assume-false": [scoped]})
    assert found(result) == EVERYTHING - {REFERENCE} | other
    assert result.assumptions == [{"key": "assume-false", "entry": "self._finalize_op is None", "in": "pkg.mo*",
                                   "tests": 1, "call_edges": 1}]
    elsewhere = {"test": "self._finalize_op is None", "in": "pkg.other"}  # the opposite, in another module
    opposite = {**ROOTS, "assume-false": [scoped], "assume-true": [elsewhere]}
    assert found(lint_project(files, opposite)) == EVERYTHING - {REFERENCE} | {("pkg/other.py", REFERENCE[1])}


def test_a_fact_about_a_branch_that_is_cold_anyway_takes_nothing_away(project, capsys):
    """`--statistics` counts against the code as a run without the facts sees it: a debug guard stays cold."""
    (project('hot-paths = ["pkg.*:*.forward"]\n') / "pkg" / "dump.py").write_text(textwrap.dedent('''\
        import torch


        class Layer(torch.nn.Module):
            def forward(self, x: torch.Tensor):
                if VERBOSE:
                    self._dump(x)
                return x

            def _dump(self, x: torch.Tensor):
                print(x.sum().item())
        '''))
    project('hot-paths = ["pkg.*:*.forward"]\neager-if = ["VERBOSE"]\nassume-false = ["VERBOSE"]\n')
    assert main(["lint", "--no-cache", "--statistics", "--format", "json"]) == 1
    (fact,) = json.loads(capsys.readouterr().out)["summary"]["assume"]
    assert fact == {"key": "assume-false", "entry": "VERBOSE", "tests": 1, "call_edges": 0, "functions": 0,
                    "findings": 0}
