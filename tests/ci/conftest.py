"""A git repository holding a snapshot of this working tree, as a user would clone graphready from."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GIT_IDENTITY = ["-c", "user.name=graphready tests", "-c", "user.email=tests@example.invalid",
                "-c", "commit.gpgsign=false"]


def run_git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *GIT_IDENTITY, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def graphready_repo(tmp_path: Path) -> tuple[Path, str]:
    """(path, commit id): tracked and untracked, not ignored files of this checkout, committed on `main`
    with no tags, so the tests see what a user gets from the next commit."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    dest = tmp_path / "graphready"
    dest.mkdir()
    files = run_git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    run_git(dest, "init", "-q", "-b", "main")
    run_git(dest, "add", "-A")
    run_git(dest, "commit", "-q", "-m", "snapshot")
    return dest, run_git(dest, "rev-parse", "HEAD")


@pytest.fixture
def git():
    """`git(cwd, *args)`: run git with a fixed identity, return its stdout."""
    return run_git
