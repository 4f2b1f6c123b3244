"""The lint cache is data only: a planted file cannot run code, and bad entries are re-made."""

from __future__ import annotations

import json
import os
import pickle
import signal

import pytest

from graphready.cli import main
from graphready.lint.cache import LintCache

HOT = "import torch\nfrom graphready import hot_path\n\n\n@hot_path\ndef step(x: torch.Tensor):\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A configured project with one hot `.item()`, as the working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.graphready]\n")
    (tmp_path / "mod.py").write_text(HOT + "    return x.item()\n")
    return tmp_path


class _Payload:
    """Unpickling this runs `touch marker`: what an attacker would plant in a pull request."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_planted_pickle_never_runs(project, capsys):
    marker = project / "pwned"
    payload = pickle.dumps({"mod.py": _Payload(marker)})
    pickle.loads(payload)  # the payload is live: unpickling it does create the file
    assert marker.exists()
    marker.unlink()

    cache = LintCache(project, True)
    cache.path.parent.mkdir()
    for name in (cache.path.name, cache.path.with_suffix(".pickle").name, cache.run_path.name):  # and pickle's old one
        (cache.path.parent / name).write_bytes(payload)
    assert main(["lint", "--format", "json"]) == 1
    assert not marker.exists()
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["GR101"]

    written = json.loads(cache.path.read_text())  # replaced by a plain JSON cache, stale files gone
    assert written["format"] == "graphready-lint-cache" and set(written["entries"]) == {"mod.py"}
    assert sorted(p.name for p in cache.path.parent.iterdir()) == sorted(
        [".gitignore", cache.path.name, cache.project_path.name, cache.run_path.name, cache.bodies.name])
    assert json.loads(cache.body_path("mod.py").read_text())["index"]["module"] == "mod"
    assert json.loads(cache.run_path.read_text())["format"] == "graphready-lint-run"


def test_entries_of_the_wrong_shape_are_dropped_and_remade(project, capsys):
    assert main(["lint", "--format", "json"]) == 1
    first = json.loads(capsys.readouterr().out)["findings"]
    cache = LintCache(project, True)
    data = json.loads(cache.path.read_text())
    entry = data["entries"]["mod.py"]
    body = json.loads(cache.body_path("mod.py").read_text())  # the index is in a file of its own
    body["index"]["functions"]["step"]["lineno"] = "7; import os"  # a string where an int belongs
    cache.body_path("mod.py").write_text(json.dumps(body))
    entry["analysis"] = {key: [{"rule": "GR101", "line": 1}] for key in entry["analysis"]}
    cache.path.write_text(json.dumps(data))
    run = json.loads(cache.run_path.read_text())  # the whole result of that run, which this one would reuse
    run["result"]["findings"] = [{"rule": "GR101", "line": "1"}]  # of the wrong shape: read nothing from it
    cache.run_path.write_text(json.dumps(run))
    assert main(["lint", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"] == first
    remade = json.loads(cache.body_path("mod.py").read_text())
    assert remade["index"]["functions"]["step"]["lineno"] == 6


def test_a_truncated_entry_is_remade_silently(project, capsys):
    assert main(["lint", "--format", "json"]) == 1
    first = json.loads(capsys.readouterr().out)["findings"]
    cache = LintCache(project, True)
    body = cache.body_path("mod.py")
    body.write_text(body.read_text()[:40])  # cut off mid-index: not JSON
    cache.run_path.unlink()
    cache.project_path.unlink()  # the hot path is walked again: the index is read
    assert main(["lint", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"] == first
    assert json.loads(body.read_text())["index"]["module"] == "mod"


@pytest.mark.parametrize("spoil", ["missing", "another version"])
def test_an_index_file_missing_or_of_another_version_is_remade(project, capsys, spoil):
    """Another run may have replaced a file's index (or a user deleted it) between reading the entries and the
    index: the index is made again, never taken for the file it no longer describes."""
    assert main(["lint", "--format", "json"]) == 1
    first = json.loads(capsys.readouterr().out)["findings"]
    cache = LintCache(project, True)
    body = cache.body_path("mod.py")
    if spoil == "missing":
        body.unlink()
    else:
        data = json.loads(body.read_text())
        data["digest"] = "0" * 32
        body.write_text(json.dumps(data))
    cache.run_path.unlink()
    cache.project_path.unlink()
    assert main(["lint", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"] == first
    assert json.loads(body.read_text())["digest"] == json.loads(cache.path.read_text())["entries"]["mod.py"]["digest"]


def test_a_whole_result_is_reused_only_for_the_same_files_and_settings(project, capsys):
    """Nothing changed: the last run's result is read whole; a changed file or setting lints again."""
    assert main(["lint", "--format", "json"]) == 1
    first = json.loads(capsys.readouterr().out)["findings"]
    cache = LintCache(project, True)
    cache.path.unlink()  # the per-file cache is not needed when nothing changed
    assert main(["lint", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"] == first
    assert not cache.path.exists()
    (project / "mod.py").write_text(HOT + "    y = x * 2\n    return y.item()\n")
    assert main(["lint", "--format", "json"]) == 1
    assert [f["line"] for f in json.loads(capsys.readouterr().out)["findings"]] == [first[0]["line"] + 1]
    assert main(["lint", "--format", "json", "--ignore", "GR101"]) == 0  # a setting is part of the key
    assert json.loads(capsys.readouterr().out)["findings"] == []


def test_a_cache_made_under_another_python_or_libcst_is_not_used(project, capsys, monkeypatch):
    """A newer Python parses syntax an older one rejects (and libcst's parser changes between versions): results
    cached under one must not answer for another."""
    from graphready.lint import cache as cache_module

    assert main(["lint", "--format", "json"]) == 1
    first = json.loads(capsys.readouterr().out)["findings"]
    made = LintCache(project, True)
    assert made.run_path.exists()
    monkeypatch.setattr(cache_module, "parsers", lambda: "('cpython', '3.99.0', \"version = '9.9'\")")
    other = LintCache(project, True)
    assert other.stamp != made.stamp
    assert main(["lint", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"] == first
    assert other.run_path.exists() and not made.run_path.exists()  # linted again, the other cache's files gone
    assert not made.bodies.exists()


def test_a_deleted_file_leaves_the_cache(project, capsys):
    (project / "extra.py").write_text("def helper(x):\n    return x\n")
    assert main(["lint", "--format", "json"]) == 1
    cache = LintCache(project, True)
    assert cache.body_path("extra.py").exists()
    (project / "extra.py").unlink()
    assert main(["lint", "--format", "json"]) == 1
    assert set(json.loads(cache.path.read_text())["entries"]) == {"mod.py"}
    assert not cache.body_path("extra.py").exists() and cache.body_path("mod.py").exists()


class _Hung(Exception):
    pass


def _lint_within(seconds: int, argv: list[str]) -> int:
    """`main(argv)`, failing the test rather than hanging it."""
    def hung(signum, frame):
        raise _Hung(f"lint did not finish in {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        return main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("which", ["entries", "index file", "whole result", "hot path"])
def test_a_cache_file_that_is_a_fifo_is_not_read(project, capsys, which):
    """A FIFO (or a link to `/dev/zero`, which a checkout can hold) in the cache would block the run forever or
    read without end: only regular files are read, anything else counts as missing."""
    assert main(["lint", "--format", "json"]) == 1
    first = json.loads(capsys.readouterr().out)["findings"]
    cache = LintCache(project, True)
    planted = {"entries": cache.path, "index file": cache.body_path("mod.py"), "whole result": cache.run_path,
               "hot path": cache.project_path}[which]
    if which == "index file":
        cache.run_path.unlink()
        cache.project_path.unlink()  # the walk reads the index
    planted.unlink()
    os.mkfifo(planted)
    assert _lint_within(60, ["lint", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"] == first


def test_a_planted_link_in_the_cache_is_replaced_not_written_through(project, tmp_path_factory, capsys):
    """A checkout may hold `.graphready_cache/.gitignore` (or an entry) as a link to a file outside it: the run
    replaces the link and leaves the file it pointed at as it was."""
    outside = tmp_path_factory.mktemp("outside") / "precious.txt"
    outside.write_text("keep me\n")
    cache = LintCache(project, True)
    cache.path.parent.mkdir()
    for name in (".gitignore", cache.path.name, cache.run_path.name):
        (cache.path.parent / name).symlink_to(outside)
    assert main(["lint", "--format", "json"]) == 1
    assert outside.read_text() == "keep me\n"
    assert not (cache.path.parent / ".gitignore").is_symlink() and not cache.path.is_symlink()
