"""The published pre-commit hook, run by the real `pre-commit` on a throwaway project.

The hook repository is a snapshot of this working tree (tracked and untracked, not ignored files),
committed in tmp, so the test checks what a user would get from the next commit.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ci_examples import HOT_SYNC

yaml = pytest.importorskip("yaml", reason="PyYAML comes with pre-commit (the `dev` extra)")

REPO = Path(__file__).resolve().parents[2]
CLEAN = """import torch
from graphready import hot_path


@hot_path
def post_block(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5
"""

DEFAULT_STREAM_LAUNCH = """#include <cuda_runtime.h>

__global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}

void launch_scale(float* x, int n) {
    scale<<<(n + 127) / 128, 128>>>(x, n);
}
"""

CURRENT_STREAM_LAUNCH = DEFAULT_STREAM_LAUNCH.replace(
    "#include <cuda_runtime.h>", "#include <c10/cuda/CUDAStream.h>"
).replace("128>>>(x, n);", "128, 0, c10::cuda::getCurrentCUDAStream()>>>(x, n);")


@pytest.mark.slow
def test_hook_lints_changed_files_through_pre_commit(tmp_path, graphready_repo, git):
    hook_repo, rev = graphready_repo

    project = tmp_path / "project"
    project.mkdir()
    config = yaml.safe_load((REPO / "ci" / ".pre-commit-config.yaml").read_text())
    config["repos"][0].update(repo=str(hook_repo), rev=rev)
    (project / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    (project / "hot.py").write_text(HOT_SYNC)
    (project / "clean.py").write_text(CLEAN)
    (project / "scale.cu").write_text(DEFAULT_STREAM_LAUNCH)
    (project / "scale_on_stream.cu").write_text(CURRENT_STREAM_LAUNCH)
    (project / "notes.txt").write_text("x.item() in prose is not code\n")
    git(project, "init", "-q")
    git(project, "add", "-A")

    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PRE_COMMIT_COLOR": "never"}
    env.pop("VIRTUAL_ENV", None)

    def pre_commit(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--files", *files], cwd=project,
                              env=env, capture_output=True, text=True, timeout=600)

    failing = pre_commit("hot.py", "scale.cu", "notes.txt")
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "graphready lint" in failing.stdout and "Failed" in failing.stdout
    assert "hot.py:7" in failing.stdout and "GR101" in failing.stdout
    assert "scale.cu:9" in failing.stdout and "GR404" in failing.stdout

    passing = pre_commit("clean.py", "scale_on_stream.cu", "notes.txt")
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "Passed" in passing.stdout

    skipped = pre_commit("notes.txt")
    assert skipped.returncode == 0 and "no files to check" in skipped.stdout.lower()

    envs = list((tmp_path / "pre-commit-home").glob("repo*/py_env-*"))
    assert envs, "pre-commit made no Python environment for the hook"
    site = [p for env_dir in envs for p in env_dir.glob("lib/python*/site-packages")]
    assert any((p / "libcst").is_dir() for p in site)
    assert not any((p / "torch").exists() for p in site), "the hook environment must not pull torch"
