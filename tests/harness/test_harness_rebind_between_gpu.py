"""GD305 between replays on the GPU: an attribute the graph reads, re-bound by the input preparation or
by the unit's loop, is reported at the assigning line; the engine idioms beside them stay clean."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from graphready.harness.isolation import WorkerOptions, list_units
from graphready.harness.scheduler import run_units

pytestmark = pytest.mark.gpu
REPO_ROOT = Path(__file__).resolve().parents[2]
UNITS_FILE = Path(__file__).with_name("rebind_units.py")
TARGET = "tests/harness/rebind_units.py:rebind_units"
# firing unit -> (class whose `# hazard: GD305` line it must be reported at, who re-bound it)
FIRING = {"prepared_bias": ("PreparedBias", "input preparation (`make_inputs`)"),
          "loop_refreshed_bias": ("LoopRefreshedBias", "the unit's loop")}
CLEAN = ("copied_prepared_bias", "persistent_buffers", "host_side_info", "reshaped_cache", "loop_copied_bias")


def _marked_line(cls: str) -> int:
    """The line of the `# hazard: GD305` marker inside class `cls` of the units file."""
    current = None
    for number, text in enumerate(UNITS_FILE.read_text(encoding="utf-8").splitlines(), 1):
        current = text.split("(")[0].split(":")[0].removeprefix("class ") if text.startswith("class ") else current
        if current == cls and re.search(r"#\s*hazard:\s*GD305", text):
            return number
    raise AssertionError(f"no GD305 marker in {cls}")


@pytest.fixture(scope="module")
def results():
    from graphready.harness.pytest_plugin import gpu_available

    if not gpu_available():
        pytest.skip("needs a CUDA GPU")
    options = WorkerOptions(steps=2, timeout_s=300, root=str(REPO_ROOT))
    run = run_units(TARGET, list_units(TARGET, options), options)
    return {result.name: result for result in run.results}


@pytest.mark.parametrize("name", sorted(FIRING))
def test_a_rebind_between_replays_is_gd305_at_the_assigning_line(results, name):
    result = results[name]
    found = [f for f in result.findings if f.rule == "GD305"]
    assert len(found) == 1, [(f.rule, f.line, f.message) for f in result.findings]
    [finding] = found
    cls, who = FIRING[name]
    assert (finding.path, finding.line) == ("tests/harness/rebind_units.py", _marked_line(cls))
    assert "`self.bias` was re-bound to a new tensor by " in finding.message and who in finding.message
    assert not [f for f in result.findings if f.rule == "GD301"]  # the loop's difference is GD305's detail


def test_the_loop_rebind_says_how_the_loop_result_differs(results):
    [finding] = [f for f in results["loop_refreshed_bias"].findings if f.rule == "GD305"]
    assert "the loop's result differs from eager" in finding.message


@pytest.mark.parametrize("name", CLEAN)
def test_engine_preparation_idioms_stay_clean(results, name):
    result = results[name]
    assert result.status() == "pass" and not result.findings, [(f.rule, f.message) for f in result.findings]
