"""Nightly GPU gate: lint, check the configured targets, run the `gpu` test suite, write a triage report.

    python ci/nightly_gpu.py --out nightly/ [--baseline graphready-baseline.json]

Runs `graphready check` once per `[tool.graphready] check-targets` entry over all visible GPUs.
Writes `lint.json`, `check-<target>.json`, `results.json` (all findings, baselined ones marked), `junit.xml`
(lint, check and pytest in one file), `report.html` and `report.md` into `--out`.

Exit status: 0 when nothing new fails; 1 when a finding at or above its run's fail-on severity is
not in the baseline, a checked unit errored, or a GPU test failed; 2 when the gate itself cannot
run (bad configuration, a crashed step, no GPU without `--allow-no-gpu`). Legacy debt recorded in
the baseline is reported but never blocks.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

CI_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(CI_DIR.parent))  # run from a checkout without installing graphready

from graphready.config import load_config  # noqa: E402
from graphready.errors import UsageError  # noqa: E402
from graphready.findings import Finding, Severity, report_to_json, summarize  # noqa: E402
from graphready.lint.baseline import assign_fingerprints, load_baseline, write_baseline  # noqa: E402
from graphready.output import render  # noqa: E402
from graphready.report.baseline import diff_against, finding_key  # noqa: E402
from graphready.report.html import render_html  # noqa: E402
from graphready.report.inputs import ResultDocument, load_result  # noqa: E402
from graphready.report.markdown import render_markdown  # noqa: E402
from graphready.report.triage import build_triage  # noqa: E402

from gpu_worker_pinning import POOL_VARIABLE  # noqa: E402

PYTEST_NO_TESTS = 5


@dataclass
class Gate:
    """What each step found; `problems` fail the gate, `notes` are only reported."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except UsageError as exc:
        print(f"nightly_gpu: error: {exc}", file=sys.stderr)
        return 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the results and the report")
    parser.add_argument("--root", type=Path, default=Path("."), help="project root holding pyproject.toml")
    parser.add_argument("--baseline", type=Path,
                        help="lint baseline file (default: [tool.graphready] baseline); without one every finding is new")
    parser.add_argument("--write-baseline", type=Path, metavar="FILE",
                        help="record every current lint and check finding as legacy debt here, then exit 0")
    parser.add_argument("--allow-no-gpu", action="store_true",
                        help="without a CUDA device, run lint only instead of failing")
    parser.add_argument("--pytest-args", default="", help="extra arguments for the gpu pytest run (one string)")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    root = args.root.resolve()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(root)
    baseline_path = args.baseline or config.baseline
    baseline = load_baseline(baseline_path) if baseline_path else None
    gpus = visible_gpus()
    if not gpus and not args.allow_no_gpu:
        raise UsageError("no CUDA device visible (pass --allow-no-gpu to run lint only)")
    gate = Gate()

    documents = [graphready_json(["lint", "--format", "json"], root, out / "lint.json")]
    if not gpus:
        gate.notes.append("check and gpu tests skipped: no CUDA device")
    elif not config.check_targets:
        gate.notes.append("check skipped: no `check-targets` in [tool.graphready]")
    for target in config.check_targets if gpus else []:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", target)
        documents.append(graphready_json(["check", target, "--format", "json", "--gpus", str(len(gpus))],
                                         root, out / f"check-{name}.json"))
    findings = [f for doc in documents for f in doc.findings]
    fingerprint_check_findings(findings, root)
    if args.write_baseline:
        write_baseline(args.write_baseline, findings)
        print(f"recorded {len(findings)} findings in {args.write_baseline}")
        return 0
    pytest_junit = run_gpu_tests(root, out, gpus, args.pytest_args, gate) if gpus else None
    for finding in findings:
        finding.baselined = baseline is not None and finding_key(finding) in baseline
    judge(documents, baseline or set(), gate)
    write_results(out / "results.json", documents, findings)
    write_junit(out / "junit.xml", documents, pytest_junit)
    triage = build_triage(documents, root, baseline=baseline, baseline_path=baseline_path)
    (out / "report.html").write_text(render_html(triage), encoding="utf-8")
    (out / "report.md").write_text(render_markdown(triage), encoding="utf-8")

    for line in gate.notes:
        print(f"note: {line}")
    for line in gate.problems:
        print(f"FAIL: {line}")
    print(f"nightly gate {'FAILED' if gate.problems else 'passed'}; report: {out / 'report.html'}")
    return 1 if gate.problems else 0


def visible_gpus() -> list[str]:
    """GPU ids this run may use, asked of a child process so this one never initialises CUDA."""
    if shutil.which("nvidia-smi") is None:
        return []  # no NVIDIA driver: skip the (slow) torch probe
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        return []  # no torch, or no usable driver: no GPU
    count = int(done.stdout.strip())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else [str(i) for i in range(count)]
    return ids[:count]


def fingerprint_check_findings(findings: list[Finding], root: Path) -> None:
    """Give `check` findings the lint baseline's line-move-proof fingerprint, so they can be baselined too."""
    missing = [f for f in findings if not f.fingerprint]
    sources = {}
    for path in {f.path for f in missing}:
        try:
            sources[path] = (root / path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            sources[path] = []
    assign_fingerprints(missing, sources)


def graphready_json(command: list[str], root: Path, dest: Path) -> ResultDocument:
    """Run `graphready <command>` (exit 0 or 1 are results; anything else is a broken step)."""
    done = subprocess.run([sys.executable, "-m", "graphready.cli", *command], cwd=root, capture_output=True,
                          text=True, env=_env_with_pythonpath(CI_DIR.parent))
    if done.returncode not in (0, 1):
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise UsageError(f"`graphready {' '.join(command)}` exited {done.returncode}: " + " / ".join(tail))
    dest.write_text(done.stdout, encoding="utf-8")
    return load_result(dest)


def run_gpu_tests(root: Path, out: Path, gpus: list[str], extra: str, gate: Gate) -> Path | None:
    """`pytest -m gpu` with one xdist worker per GPU, each pinned to its own device."""
    junit = out / "pytest-junit.xml"
    env = _env_with_pythonpath(CI_DIR, CI_DIR.parent)
    env[POOL_VARIABLE] = ",".join(gpus)
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-n", str(len(gpus)), "-p", "gpu_worker_pinning",
               f"--junitxml={junit}", "-q", *extra.split()]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    (out / "pytest.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode == PYTEST_NO_TESTS:
        gate.notes.append("no gpu-marked tests were collected")
    elif done.returncode != 0:
        gate.problems.append(f"gpu tests failed (pytest exit {done.returncode}, see pytest.log)")
    return junit if junit.is_file() else None


def judge(documents: list[ResultDocument], baseline: set, gate: Gate) -> None:
    """New failing findings and errored units fail the gate; baselined debt does not."""
    for doc in documents:
        fail_on = Severity.parse(doc.fail_on)
        new = [f for f in diff_against(doc.findings, baseline).new if f.severity >= fail_on]
        for finding in new:
            gate.problems.append(f"new {doc.tool} finding {finding.path}:{finding.line} {finding.rule} "
                                 f"{finding.name}: {finding.message}")
        known = sum(1 for f in doc.findings if f.baselined)
        if known:
            gate.notes.append(f"{known} {doc.tool} finding(s) are in the baseline")
        for unit in doc.units:
            if unit.get("status") == "error":
                gate.problems.append(f"unit {unit['name']} could not be checked: {unit.get('error', '')}")


def write_results(path: Path, documents: list[ResultDocument], findings: list[Finding]) -> None:
    fail_on = min((Severity.parse(doc.fail_on) for doc in documents), default=Severity.ERROR)
    units = [u for doc in documents for u in doc.units]
    doc = report_to_json(findings, summarize(findings, fail_on), units=units, tool="nightly")
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def write_junit(path: Path, documents: list[ResultDocument], pytest_junit: Path | None) -> None:
    """One `<testsuites>` holding the lint suite, the check suite and pytest's suites."""
    combined = ET.Element("testsuites", name="graphready nightly")
    for doc in documents:
        summary = summarize(doc.findings, Severity.parse(doc.fail_on))
        xml = render("junit", doc.findings, summary, tool=doc.tool, units=doc.units if doc.tool == "check" else None)
        combined.extend(ET.fromstring(xml.encode()).findall("testsuite"))
    if pytest_junit is not None:
        tree = ET.parse(pytest_junit).getroot()
        combined.extend(tree.findall("testsuite") if tree.tag == "testsuites" else [tree])
    for attribute in ("tests", "failures", "errors"):
        combined.set(attribute, str(sum(int(s.get(attribute, 0)) for s in combined)))
    ET.indent(combined)
    path.write_text(ET.tostring(combined, encoding="unicode", xml_declaration=True) + "\n", encoding="utf-8")


def _env_with_pythonpath(*folders: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, folders), *filter(None, [env.get("PYTHONPATH")])])
    return env


if __name__ == "__main__":
    sys.exit(main())
