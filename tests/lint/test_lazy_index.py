"""The lazy index works out call sites and eager-only regions only for the functions the hot walk reaches, and
finds exactly what an index of every function finds: in one process, in worker processes, and through the cache."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from graphready.cli import main
from graphready.errors import EXIT_INTERNAL
from graphready.lint.cache import LintCache
from graphready.lint.datacodec import encode
from graphready.lint.files import module_name
from graphready.lint.lazyindex import IndexPool
from graphready.lint.scope.guards import Guards
from graphready.lint.scope.index import ModuleIndexer, index_module, module_indexer

REPO = Path(__file__).resolve().parents[2]
CORPUS = sorted((REPO / "tests" / "fixtures" / "dsv4_like").rglob("*.py")) + sorted(
    (REPO / "graphready" / "lint" / "scope").glob("*.py"))

CALLER = '''from graphready import hot_path
from helpers import helper


@hot_path
def step(x):
    return helper(x)
'''
HELPERS = '''def helper(x):
    return x.sum()


def other(x):
    return x.sum().item()
'''


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_every_function_deepened_gives_the_eager_index(path):
    module, is_package = module_name(path.relative_to(REPO).as_posix())
    guards = Guards.of({"VERBOSE", "_is_hip"}, {"is_decode"}, 90)
    eager = index_module(module, path.name, path.read_text(), guards, is_package)
    indexer = module_indexer(module, path.name, path.read_text(), guards, is_package, lazy=True)
    for qualname in reversed(list(indexer.index.functions)):  # nested ones before the functions they sit in
        indexer.deepen(qualname)
    assert encode(indexer.index) == encode(eager)


def test_a_lazy_index_leaves_unreached_work_undone():
    indexer = module_indexer("helpers", "helpers.py", HELPERS + "\n\ndef third(x):\n    return helper(x)\n", Guards(),
                             lazy=True)
    third = indexer.index.functions["third"]
    assert not third.deep and third.calls == []
    indexer.deepen("third")
    assert third.deep and [site.target for site in third.calls] == ["helpers.helper"]


@pytest.fixture
def project(project_tree, monkeypatch):
    root = project_tree({"step.py": CALLER, "helpers.py": HELPERS})("")
    monkeypatch.chdir(root)
    return root


def _findings(capsys, *args) -> list[tuple[str, int, str]]:
    main(["lint", "--format", "json", *args])
    return [(f["path"], f["line"], f["rule"]) for f in json.loads(capsys.readouterr().out)["findings"]]


def _cached_function(project: Path, path: str, qualname: str) -> dict:
    cache = LintCache(project, True)
    return json.loads(cache.body_path(path).read_text())["index"]["functions"][qualname]


def test_a_function_the_cache_left_unworked_is_worked_out_when_a_change_reaches_it(project, capsys):
    assert _findings(capsys) == []
    assert _cached_function(project, "helpers.py", "other")["deep"] is False  # not reached: saved as left
    (project / "step.py").write_text(CALLER.replace("return helper(x)", "return helper(x) + other(x)").replace(
        "import helper", "import helper, other"))
    assert _findings(capsys) == [("helpers.py", 6, "GR101")]  # helpers.py came from the cache
    assert "deep" not in _cached_function(project, "helpers.py", "other")  # and is saved worked out now
    assert _findings(capsys, "--no-cache") == [("helpers.py", 6, "GR101")]


def test_worker_processes_find_what_one_process_finds(project, capsys):
    for n in range(8):  # enough files for the index workers
        (project / f"mod{n}.py").write_text(CALLER.replace("def step", f"def step{n}"))
    serial = _findings(capsys, "--no-cache", "-j", "1")
    assert _findings(capsys, "--no-cache", "-j", "2") == serial


@pytest.mark.parametrize("jobs", ["1", "2"], ids=["serial", "index-workers"])
def test_a_function_that_fails_to_be_worked_out_is_reported_and_its_file_not_cached(project, monkeypatch, capsys,
                                                                                      jobs):
    for n in range(8):
        (project / f"mod{n}.py").write_text(CALLER.replace("def step", f"def step{n}"))
    deepen = ModuleIndexer.deepen

    def tripping(self, qualname):
        if qualname == "helper":
            raise KeyError("a region table tripped over its own state")
        return deepen(self, qualname)

    with monkeypatch.context() as patch:
        patch.setattr(ModuleIndexer, "deepen", tripping)
        main(["lint", "--format", "json", "-j", jobs])
    out = json.loads(capsys.readouterr().out)
    assert [(f["path"], f["rule"]) for f in out["findings"]] == [("helpers.py", "GR002")]
    assert out["findings"][0]["message"].startswith("graphready failed while indexing `helper`")
    assert "helpers.py" not in json.loads(LintCache(project, True).path.read_text())["entries"]
    assert main(["lint", "--format", "json", "-j", jobs]) == 0


def test_workers_answer_a_walk_that_asks_about_every_function_at_once():
    """Thousands of questions with long answers: neither side may wait on the other to read (both blocked sending
    into full buffers would hang the run)."""
    calls = "".join(f"    helper_{n}(x, y, z)\n" for n in range(60))
    source = "".join(f"def helper_{n}(x, y=None, z=None):\n{calls}    return x\n\n\n" for n in range(400))
    jobs = [(f"mod{m}", f"mod{m}.py", source, Guards(), False) for m in range(4)]
    answers = {}

    def walk():
        pool = IndexPool(2, jobs)
        try:
            indexes = pool.index(None, digests=False)
            asked = [(index.path, qualname) for index, _ in indexes for qualname in index.functions]
            for path, qualname in asked:
                pool.ask(path, [qualname])
            for path, qualname in asked:
                answers[(path, qualname)] = pool.answer(path, qualname)
        finally:
            pool.close()

    worker = threading.Thread(target=walk, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the index workers and the walk wait on each other"
    assert len(answers) == 1600 and all(len(facts[0]) == 60 for facts in answers.values())  # every call site
