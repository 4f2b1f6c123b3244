"""The GitHub workflow templates are valid and call graphready the way its CLI accepts."""

import shlex
import sys
from pathlib import Path

import pytest

from graphready.output import FORMATS

yaml = pytest.importorskip("yaml", reason="PyYAML comes with pre-commit (the `dev` extra)")

CI = Path(__file__).resolve().parents[2] / "ci"


def workflow(name: str) -> dict:
    return yaml.safe_load((CI / "github" / name).read_text())


def steps(doc: dict) -> list[dict]:
    return [step for job in doc["jobs"].values() for step in job.get("steps", [])]


def test_lint_workflow_annotates_and_uploads_sarif():
    doc = workflow("lint.yml")
    runs = [step.get("run", "") for step in steps(doc)]
    formats = [shlex.split(r)[shlex.split(r).index("--format") + 1] for r in runs if "graphready lint" in r]
    assert set(formats) == {"github", "sarif"} and set(formats) <= set(FORMATS)
    upload = next(s for s in steps(doc) if s.get("uses", "").startswith("github/codeql-action/upload-sarif"))
    assert upload["with"]["sarif_file"] == "graphready.sarif" and upload["if"] == "always()"
    assert doc["permissions"]["security-events"] == "write"


def test_gpu_nightly_runs_the_gate_on_a_self_hosted_gpu_runner():
    doc = workflow("gpu-nightly.yml")
    triggers = doc[True] if True in doc else doc["on"]  # YAML 1.1 reads the key `on` as true
    assert "schedule" in triggers
    (job,) = doc["jobs"].values()
    assert job["runs-on"] == ["self-hosted", "gpu"]
    gate = next(s["run"] for s in job["steps"] if "nightly_gpu.py" in s.get("run", ""))
    argv = shlex.split(gate)
    assert argv[:2] == ["python", "ci/nightly_gpu.py"]
    sys.path.insert(0, str(CI))
    from nightly_gpu import parse_args

    args = parse_args(argv[2:])
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert Path(upload["with"]["path"]) == args.out and upload["if"] == "always()"
