"""`make test` gets torch the cheap way: a GPU machine's own torch, else the CPU build, else (only the
public index reachable) the configured index with a note. The decisions are run for real, against a
stand-in `python` that records what it was asked to do instead of downloading anything."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install_torch.sh"
INDEX = "https://cpu-wheels.invalid/whl/cpu"

STAND_IN = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
case "$*" in
  "-c import torch") [ -n "${HAS_TORCH:-}" ] ;;
  "-c import torch; print(torch.__version__)") echo 2.5.0+cu124 ;;
  *urlopen*) [ -n "${INDEX_UP:-}" ] ;;
  *) exit 0 ;;
esac
"""


def install(tmp_path: Path, index: str = INDEX, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    python = tmp_path / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    calls = tmp_path / "calls.log"
    calls.write_text("")
    done = subprocess.run(["bash", str(SCRIPT), str(python), "2.13.0", index], capture_output=True, text=True,
                          env={**os.environ, "CALLS": str(calls), **env}, timeout=60)
    return done, calls.read_text().splitlines()


def pip_calls(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("-m pip")]


def test_a_torch_the_venv_already_sees_is_kept(tmp_path):
    done, calls = install(tmp_path, HAS_TORCH="1")
    assert done.returncode == 0 and "torch 2.5.0+cu124 is already importable" in done.stdout
    assert pip_calls(calls) == []


def test_the_cpu_wheel_index_is_used_when_it_answers(tmp_path):
    done, calls = install(tmp_path, INDEX_UP="1")
    assert done.returncode == 0
    assert pip_calls(calls) == [f"-m pip install -q --index-url {INDEX} torch==2.13.0"]


def test_without_the_cpu_index_torch_comes_from_the_configured_index_with_a_note(tmp_path):
    done, calls = install(tmp_path)
    assert done.returncode == 0
    assert pip_calls(calls) == ["-m pip install -q torch==2.13.0"]
    assert f"{INDEX} cannot be reached" in done.stderr and "CUDA build" in done.stderr
    _, calls = install(tmp_path, index="")  # TORCH_INDEX= : straight to the configured index, nothing asked
    assert pip_calls(calls) == ["-m pip install -q torch==2.13.0"] and not [c for c in calls if "urlopen" in c]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("has_torch", [True, False])
def test_make_lends_the_host_torch_to_the_venv_only_when_there_is_one(tmp_path, has_torch):
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    python = tmp_path / "python"
    path = str(site) if has_torch else str(tmp_path / "empty")
    python.write_text(f'#!/bin/sh\nPYTHONPATH={path} exec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    venv = tmp_path / "venv"
    plan = subprocess.run(["make", "-n", "test", f"PYTHON={python}", f"VENV={venv}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    create = next(line for line in plan.stdout.splitlines() if " -m venv " in line)
    assert ("--system-site-packages" in create) is has_torch
    assert f'scripts/install_torch.sh {venv}/bin/python "2.13.0"' in plan.stdout
