"""`check --changed-since REF` picks the units whose code (and what it calls) a diff touched;
`--shard K/N` slices the units the same way on every machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphready.errors import UsageError
from graphready.harness.changes import select_changed, touched_lines
from graphready.harness.command import parse_shard, shard_units
from graphready.harness.isolation import UnitInfo

MODEL = '''\
SCALE = 2


def helper(x):
    return x * SCALE


def attention(x):
    return helper(x) + 1


def mlp(x):
    return x - 1
'''

TARGET = '''\
from graphready.harness import Unit
from pkg import model


def attn_unit(x):
    return model.attention(x)


def mlp_unit(x):
    return model.mlp(x)


def table_unit(x):
    return TABLE["mlp"](x)


TABLE = {"mlp": model.mlp}


def factory():
    inputs = lambda seed: ()
    return [Unit("attn", attn_unit, inputs), Unit("mlp", mlp_unit, inputs),
            Unit("table", table_unit, inputs, reaches=(model.mlp,)), Unit("blind", table_unit, inputs)]
'''


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "model.py").write_text(MODEL)
    (tmp_path / "pkg" / "units.py").write_text(TARGET)
    (tmp_path / "pyproject.toml").write_text("[tool.graphready]\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    return tmp_path


def _units(repo: Path) -> list[UnitInfo]:
    lines = (repo / "pkg" / "units.py").read_text().splitlines()
    at = {name: lines.index(f"def {name}(x):") + 1 for name in ("attn_unit", "mlp_unit", "table_unit")}
    mlp_line = MODEL.splitlines().index("def mlp(x):") + 1
    return [
        UnitInfo("attn", None, "pkg/units.py", at["attn_unit"]),
        UnitInfo("mlp", None, "pkg/units.py", at["mlp_unit"]),
        UnitInfo("table", None, "pkg/units.py", at["table_unit"], (("pkg/model.py", mlp_line),)),
        UnitInfo("blind", None, "pkg/units.py", at["table_unit"]),
    ]


def _selected(repo: Path) -> list[str]:
    return [u.name for u in select_changed(_units(repo), "HEAD", repo).units]


def test_nothing_changed_selects_nothing(repo):
    assert _selected(repo) == []


def test_a_function_two_calls_deep_selects_only_the_units_that_reach_it(repo):
    path = repo / "pkg" / "model.py"
    path.write_text(path.read_text().replace("return x * SCALE", "return x * SCALE * 1"))
    selection = select_changed(_units(repo), "HEAD", repo)
    assert [u.name for u in selection.units] == ["attn"]
    assert selection.why["attn"] == "pkg.model:helper"


def test_code_declared_in_reaches_is_followed(repo):
    path = repo / "pkg" / "model.py"
    path.write_text(path.read_text().replace("return x - 1", "return x - 2"))
    # `table` reaches mlp only through a dict: selected because it declares it; `blind` does not.
    assert _selected(repo) == ["mlp", "table"]


def test_a_module_level_change_touches_every_function_of_the_module(repo):
    path = repo / "pkg" / "model.py"
    path.write_text(path.read_text().replace("SCALE = 2", "SCALE = 3"))
    assert _selected(repo) == ["attn", "mlp", "table"]


def test_committed_changes_since_the_ref_count_too(repo):
    path = repo / "pkg" / "model.py"
    path.write_text(path.read_text().replace("return x - 1", "return x - 3"))
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "mlp")
    assert [u.name for u in select_changed(_units(repo), "HEAD~1", repo).units] == ["mlp", "table"]
    assert [u.name for u in select_changed(_units(repo), "HEAD", repo).units] == []


def test_untracked_files_and_deleted_lines_are_touched(repo):
    (repo / "pkg" / "extra.py").write_text("def new():\n    return 1\n")
    path = repo / "pkg" / "model.py"
    path.write_text(path.read_text().replace("def mlp(x):\n    return x - 1\n", "def mlp(x):\n    pass\n"))
    touched = touched_lines("HEAD", repo)
    assert touched["pkg/extra.py"] is None
    assert touched["pkg/model.py"]


def test_a_unit_outside_the_indexed_project_is_always_selected(repo):
    outside = UnitInfo("elsewhere", None, "/somewhere/else.py", 3)
    selection = select_changed([outside], "HEAD", repo)
    assert [u.name for u in selection.units] == ["elsewhere"] and selection.untraced == ["elsewhere"]


def test_a_bad_ref_is_a_usage_error(repo):
    with pytest.raises(UsageError, match="no-such-ref"):
        select_changed(_units(repo), "no-such-ref", repo)


def test_cli_with_nothing_changed_checks_nothing_and_passes_without_a_gpu(repo):
    proc = subprocess.run(
        [sys.executable, "-m", "graphready.cli", "check", "pkg.units:factory", "--changed-since", "HEAD",
         "--format", "json"],
        cwd=repo, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "changed since HEAD: 0 of 4 unit(s)" in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["units"] == [] and doc["run"]["changed_since"]["ref"] == "HEAD"
    assert doc["run"]["listed"] == ["attn", "mlp", "table", "blind"]


def test_shards_are_disjoint_cover_every_unit_and_stay_balanced():
    units = [UnitInfo(f"u{i}", None, "p.py", 1) for i in range(11)]
    shards = [shard_units(units, (k, 4)) for k in range(1, 5)]
    names = [u.name for shard in shards for u in shard]
    assert sorted(names) == sorted(u.name for u in units) and len(names) == len(set(names))
    assert [len(s) for s in shards] == [3, 3, 3, 2]
    assert shard_units(units, (2, 4)) == shards[1]  # deterministic


@pytest.mark.parametrize("text", ["0/3", "4/3", "1", "a/b", "1/0"])
def test_bad_shards_are_usage_errors(text):
    with pytest.raises(UsageError, match="--shard"):
        parse_shard(text)
