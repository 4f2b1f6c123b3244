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


def _graphready_argv(run: str) -> list[str]:
    argv = shlex.split(run.replace("${{ matrix.shard }}", "1").replace("${{ github.event.pull_request.base.sha }}", "HEAD"))
    assert argv[0] == "graphready"
    return argv[1:]


def test_gpu_shards_cover_every_slice_and_merge_into_one_verdict():
    import argparse

    from graphready.harness.command import add_arguments, parse_shard

    doc = workflow("gpu-shards.yml")
    shard_job, verdict = doc["jobs"]["shard"], doc["jobs"]["verdict"]
    shards = shard_job["strategy"]["matrix"]["shard"]
    check_run = next(s["run"] for s in shard_job["steps"] if "graphready check" in s.get("run", ""))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(_graphready_argv(check_run)[1:])
    assert parse_shard(args.shard) == (1, len(shards))
    assert check_run.endswith("--output check-${{ matrix.shard }}.json")
    merge = next(s["run"] for s in verdict["steps"] if "graphready report" in s.get("run", ""))
    argv = _graphready_argv(merge)
    assert argv[0] == "report" and "--merged" in argv
    assert [a for a in argv if a.startswith("check-")] == [f"check-{k}.json" for k in shards]
    assert verdict["needs"] == "shard" and verdict["if"] == "always()"
    changed = next(s["run"] for s in doc["jobs"]["changed-units"]["steps"] if "graphready check" in s.get("run", ""))
    assert parser.parse_args(_graphready_argv(changed)[1:]).changed_since == "HEAD"
