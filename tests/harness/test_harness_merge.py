"""graphready.merge: GD findings confirmed by a GR twin at the same line, or static blind spots."""

from __future__ import annotations

from graphready.findings import Evidence, Finding, Severity
from graphready.merge import is_twin, mark_evidence


def _finding(rule: str, path: str = "model/layer.py", line: int = 10) -> Finding:
    return Finding(path=path, line=line, column=0, rule=rule, name="x", severity=Severity.ERROR, message="m")


def test_sync_confirmed_by_host_sync_lint_at_same_line():
    check, lint = _finding("GD101"), _finding("GR101")
    merged = mark_evidence([check], [lint])
    assert check.evidence is Evidence.CONFIRMED
    assert lint.evidence is Evidence.CONFIRMED
    assert merged == [check, lint]


def test_no_lint_finding_at_the_line_is_a_static_blind_spot():
    check = _finding("GD304", line=12)
    lint = _finding("GR601", line=13)
    mark_evidence([check], [lint])
    assert check.evidence is Evidence.DYNAMIC
    assert lint.evidence is Evidence.STATIC


def test_same_line_but_unrelated_rule_is_not_a_twin():
    check, lint = _finding("GD401"), _finding("GR101")
    mark_evidence([check], [lint])
    assert check.evidence is Evidence.DYNAMIC
    assert lint.evidence is Evidence.STATIC


def test_same_line_in_another_file_is_not_a_twin():
    check, lint = _finding("GD101", path="a.py"), _finding("GR101", path="b.py")
    mark_evidence([check], [lint])
    assert check.evidence is Evidence.DYNAMIC


def test_paths_compare_after_normalising_dot_slash():
    check, lint = _finding("GD202", path="./kernels/cute.py"), _finding("GR404", path="kernels/cute.py")
    mark_evidence([check], [lint])
    assert check.evidence is Evidence.CONFIRMED


def test_capture_failed_pairs_with_any_hot_path_rule_family():
    assert is_twin("GD201", "GR101")
    assert is_twin("GD201", "GR303")
    assert is_twin("GD201", "GR503")
    assert not is_twin("GD201", "GR601")
    assert not is_twin("GD201", "GR001")


def test_twin_table_from_the_brief():
    pairs = {
        "GD101": ["GR101", "GR102", "GR103"],
        "GD202": ["GR404"],
        "GD301": ["GR303", "GR302", "GR601"],
        "GD302": ["GR601", "GR403"],
        "GD304": ["GR601", "GR403"],
        "GD401": ["GR301"],
        "GD402": ["GR301"],
        "GD501": ["GR401", "GR402", "GR403"],
        "GD102": ["GR302"],
        "GD203": ["GR603", "GR501"],
        "GD602": ["GR503"],
    }
    for check, lints in pairs.items():
        for lint in lints:
            assert is_twin(check, lint), (check, lint)
    assert not is_twin("GD401", "GR302")
    assert not is_twin("GD303", "GR101")


def test_one_lint_finding_can_confirm_two_checks():
    sync, capture = _finding("GD101"), _finding("GD201")
    lint = _finding("GR101")
    mark_evidence([sync, capture], [lint])
    assert sync.evidence is capture.evidence is Evidence.CONFIRMED


def test_lint_paths_relative_to_a_nested_project_still_pair():
    check = _finding("GD101", path="examples/decoder/decoder/attention.py", line=23)
    lint = _finding("GR101", path="decoder/attention.py", line=23)
    mark_evidence([check], [lint])
    assert check.evidence is Evidence.CONFIRMED


def test_check_command_cross_checks_with_the_real_linter(tmp_path):
    import pytest

    pytest.importorskip("libcst")
    from graphready.harness.command import cross_check_with_lint

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\n')
    (tmp_path / "layer.py").write_text(
        "import torch\n"
        "from graphready import hot_path\n"
        "\n"
        "\n"
        "@hot_path\n"
        "def step(x: torch.Tensor) -> torch.Tensor:\n"
        "    peak = x.abs().max().item()\n"
        "    return x / peak\n"
    )
    sync = _finding("GD101", path="layer.py", line=7)
    blind = _finding("GD304", path="layer.py", line=8)
    cross_check_with_lint([sync, blind], tmp_path, enabled=None)
    assert sync.evidence is Evidence.CONFIRMED
    assert blind.evidence is Evidence.DYNAMIC
