"""Every GD code fires on its hazard unit, at the marked line; every clean twin passes untouched."""

from __future__ import annotations

import pytest
from hazard_expectations import CLEAN_TWINS, COMPILER_GRAPHED, HAZARDS, expected_markers

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def markers():
    from units import kernel_backend

    return expected_markers(kernel_backend())


@pytest.mark.parametrize("name", sorted(HAZARDS))
def test_hazard_fires_at_marked_line(hazard_results, markers, name):
    result = hazard_results[name]
    cls, codes = HAZARDS[name]
    assert result.findings, f"{name}: no finding"
    found = {(f.rule, f.line) for f in result.findings}
    for code in codes:
        line = markers[cls][code]
        assert (code, line) in found, f"{name}: expected {code} at line {line}, got {sorted(found)}"


@pytest.mark.parametrize("name", CLEAN_TWINS)
def test_clean_twin_passes(hazard_results, name):
    result = hazard_results[name]
    assert result.error is None
    assert result.findings == [], [f"{f.rule}@{f.line}: {f.message}" for f in result.findings]
    assert result.status() == "pass"
    assert result.capture == "ok"


@pytest.mark.parametrize("name", CLEAN_TWINS)
def test_clean_twin_reports_measurements(hazard_results, name):
    result = hazard_results[name]
    assert result.eager_ms is not None and result.eager_ms > 0
    assert result.replay_ms is not None and result.replay_ms > 0
    assert result.kernels is not None and result.kernels >= 1
    if name in COMPILER_GRAPHED or name == "eager_only_check":  # counts differ by design (see below)
        assert result.graph_kernels is not None and result.graph_kernels >= 1
    else:
        assert result.graph_kernels == result.kernels


def test_kernels_launched_only_outside_capture_are_no_escape(hazard_results):
    """The kernel counts disagree, but a profiled capture ran no kernel: GD202 would be a false verdict."""
    result = hazard_results["eager_only_check"]
    assert result.kernels > result.graph_kernels >= 1
    assert any("no kernel ran during a profiled capture" in note for note in result.notes), result.notes


def test_lazy_work_is_info_when_the_cold_capture_succeeds(hazard_results):
    lazy = [f for f in hazard_results["lazy_scratch"].findings if f.rule == "GD203"]
    assert lazy and all(f.severity.label == "info" for f in lazy), [f.message for f in lazy]
    assert hazard_results["lazy_scratch"].status() == "pass"  # the warmed-up graph is right: info only


def test_compiled_units_are_checked_against_their_python_original(hazard_results):
    clean = hazard_results["clean_compile_graph_break"]
    assert clean.capture == "ok" and clean.eager_ms and clean.replay_ms
    assert hazard_results["compile_skipped_cudagraphs"].capture == "skipped"


def test_capture_failure_names_cuda_error(hazard_results):
    finding = next(f for f in hazard_results["sync_item"].findings if f.rule == "GD201")
    assert "cudaError" in finding.message
    assert "_local_scalar_dense" in finding.message or "item" in finding.message


def test_failed_capture_stops_the_unit_not_the_run(hazard_results):
    assert hazard_results["sync_item"].capture == "failed"
    assert hazard_results["clean_sync_item"].capture == "ok"


def test_a_cute_kernel_the_step_holds_compiled_is_a_verdict_not_a_worker_death(hazard_results):
    """Issue 26: the compiled kernel's dead weak proxies once killed the pointer audit, and the worker with it."""
    result = hazard_results["escaped_compiled_kernel"]
    assert result.error is None and result.capture == "ok"
    assert not [f for f in result.findings if f.rule == "GD201"], [f.message for f in result.findings]
    assert {"GD202", "GD301"} <= {f.rule for f in result.findings}  # the kernel ran outside the graph
    assert not [note for note in result.notes if note.startswith("escaped kernels not located")], result.notes
    assert all(failure.checks == ["pointer audit"] for failure in result.internal_failures)


def test_no_check_of_graphreadys_fails_on_any_hazard_unit(hazard_results):
    broken = {name: [(f.checks, f.error) for f in r.internal_failures] for name, r in hazard_results.items()
              if r.internal_failures}
    assert broken == {}
