"""The README's pre-commit snippet and the CI templates name a graphready revision that exists, pin it the
way they say, and install graphready itself (not the user's project)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML comes with pre-commit (the `dev` extra)")
from packaging.requirements import Requirement  # noqa: E402  (packaging comes with pip and pytest)

REPO = Path(__file__).resolve().parents[2]


def readme_snippet() -> dict:
    text = (REPO / "README.md").read_text()
    block = re.search(r"```yaml\n(# \.pre-commit-config\.yaml\n.*?)```", text, flags=re.S)
    assert block, "the README has no .pre-commit-config.yaml snippet"
    return yaml.safe_load(block.group(1))


def examples() -> dict[str, dict]:
    return {"README.md": readme_snippet(),
            "ci/.pre-commit-config.yaml": yaml.safe_load((REPO / "ci" / ".pre-commit-config.yaml").read_text())}


def lint_workflow() -> dict:
    return yaml.safe_load((REPO / "ci" / "github" / "lint.yml").read_text())


def test_the_pre_commit_examples_agree_and_are_valid_configs():
    for name, config in examples().items():
        (hook_repo,) = config["repos"]
        assert [h["id"] for h in hook_repo["hooks"]] == ["graphready-lint"], name
        assert hook_repo["repo"] == "https://github.com/OWNER/graphready", name
        assert hook_repo["rev"] == "main", name


def test_the_rev_the_examples_name_exists_and_autoupdate_pins_it_to_a_commit(tmp_path, graphready_repo):
    hook_repo, head = graphready_repo
    for name, config in examples().items():
        rev = config["repos"][0]["rev"]
        resolved = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=hook_repo,
                                  capture_output=True, text=True)
        assert resolved.returncode == 0 and resolved.stdout.strip() == head, f"{name}: rev {rev!r} does not exist"

        project = tmp_path / f"project-{len(list(tmp_path.glob('project-*')))}"
        project.mkdir()
        subprocess.run(["git", "init", "-q"], cwd=project, check=True)  # pre-commit works in a git checkout
        config["repos"][0]["repo"] = str(hook_repo)
        (project / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
        env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PRE_COMMIT_COLOR": "never"}
        done = subprocess.run([sys.executable, "-m", "pre_commit", "autoupdate", "--freeze"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        pinned = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())["repos"][0]["rev"]
        assert pinned == head, name  # no release tag yet: the commit the default branch points at


def test_the_lint_workflow_installs_graphready_from_the_same_repository():
    doc = lint_workflow()
    requirement = Requirement(doc["env"]["GRAPHREADY"])
    assert requirement.name == "graphready" and not requirement.extras  # core only: no torch
    assert requirement.url == "git+" + examples()["README.md"]["repos"][0]["repo"] + "@main"
    installs = [step["run"] for job in doc["jobs"].values() for step in job.get("steps", [])
                if "pip install" in step.get("run", "")]
    assert installs == ['python -m pip install "$GRAPHREADY"']


@pytest.mark.slow
def test_the_workflow_requirement_installs_graphready_itself(tmp_path, graphready_repo):
    hook_repo, _ = graphready_repo
    spec = lint_workflow()["env"]["GRAPHREADY"].replace("https://github.com/OWNER/graphready", hook_repo.as_uri())
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet",
                           "--report", str(tmp_path / "report.json"), spec],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (item,) = json.loads((tmp_path / "report.json").read_text())["install"]
    assert item["metadata"]["name"] == "graphready"
    assert item["download_info"]["url"] == hook_repo.as_uri()
