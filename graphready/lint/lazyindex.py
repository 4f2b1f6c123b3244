"""A lazy index: the call sites and eager-only regions of a function are worked out when the hot walk reaches it.

Working them out for every function was a third of indexing (432k lines of SGLang: 13,482 functions, of which the
walk reaches 2,024). The process that indexed a file keeps its tree and answers for its functions: worker processes
for a cold run (no tree is parsed twice or sent between processes), this process for files whose index came from
the cache (parsed again, only when a function the last run left unworked is reached now).
"""

from __future__ import annotations

import gc
import hashlib
import json
import pickle
from collections import deque
from typing import TYPE_CHECKING, Callable

from graphready.lint.analysis.deep import call_deep
from graphready.lint.datacodec import encode
from graphready.lint.failures import Failure
from graphready.lint.scope.guards import Guards
from graphready.lint.scope.index import FunctionInfo, ModuleIndex, ModuleIndexer, module_indexer
from graphready.lint.scope.positions import lines_of, ranked
from graphready.lint.workers import Workers

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

DEEP_FIELDS = ("calls", "excluded", "memo", "cold_spans", "empty_when_captured", "never_runs", "assumed")
# This process and a worker must never both block sending (each waiting for the other to read). What this process
# sends is small (a file by its number in the jobs the worker was started with, a question), and it never has more
# than JOBS_AHEAD + 1 files and ASKED_AHEAD + 1 questions unanswered at a worker: far less than a pipe holds, so its
# sends never block, whatever the worker is sending.
ASKED_AHEAD = 64  # questions a worker holds: enough for its next 50 ms, few enough that one the walk waits on is read
LOST = "none of its code was checked and calls through it were not followed (the hot path may miss what they reach)"
DEEP_LOST = "its calls were not followed (the hot path may miss what they reach)"
IndexJob = tuple[str, str, str, Guards, bool]  # module, path, source, guards, is_package


def index_file(job: IndexJob) -> ModuleIndexer | Failure:
    """One file's lazy indexer, or this file's failure (GR002: the other files are indexed all the same)."""
    module, rel, text, guards, is_package = job
    try:
        return call_deep(module_indexer, module, rel, text, guards, is_package, True)
    except Exception as exc:
        return Failure.of(exc, rel, "indexing", lost=LOST)


def index_digest(index: ModuleIndex) -> str:
    """Of what the hot walk reads of an index before it works out any function's deep facts, each function's lines
    as ranks (scope/positions.py): files alike in it, and in the deep facts of the functions the walk works out
    (`deep_digest`), give the same hot path."""
    encoded = encode(index)
    uses = _uses_by_function(index)
    ranks: dict[str, dict[int, int]] = {}
    functions = {}
    for qualname, info in encoded.get("functions", {}).items():
        shallow = {name: value for name, value in info.items() if name not in DEEP_FIELDS and name != "deep"}
        key = index.functions[qualname].key
        functions[qualname], ranks[key] = ranked(shallow, _lines(uses, key))
    encoded["functions"] = functions
    encoded["class_uses"] = _ranked_uses(uses, ranks)
    return _digest(encoded)


def deep_digest(index: ModuleIndex, qualnames: list[str]) -> str:
    """Of the deep facts of the named functions (worked out) and their uses of classes, each function's lines as
    ranks among all of its own: with `index_digest`, what the walk read of the file."""
    uses = _uses_by_function(index)
    facts = []
    for qualname in qualnames:
        info = index.functions[qualname]
        encoded, rank = ranked(encode(info), _lines(uses, info.key))
        facts.append([encoded, sorted((name, rank[line]) for name, line in uses.get(info.key, ()))])
    return _digest(facts)


def function_lines(index: ModuleIndex, qualnames: list[str]) -> dict[str, list[int]]:
    """Each named function's lines, sorted, as `deep_digest` ranks them."""
    uses = _uses_by_function(index)
    return {qualname: lines_of(encode(info), _lines(uses, info.key))
            for qualname in qualnames if (info := index.functions.get(qualname)) is not None}


def _uses_by_function(index: ModuleIndex) -> dict[str, list[tuple[str, int]]]:
    """Function key ("" for module level) -> the classes it uses and the lines (the walk asks whether each runs)."""
    found: dict[str, list[tuple[str, int]]] = {}
    for name, uses in index.class_uses.items():
        for key, line in uses:
            found.setdefault(key, []).append((name, line))
    return found


def _lines(uses: dict[str, list[tuple[str, int]]], key: str) -> list[int]:
    """The lines of the function's uses of classes (`_uses_by_function`)."""
    return [line for _, line in uses.get(key, ())]


def _ranked_uses(uses: dict[str, list[tuple[str, int]]], ranks: dict[str, dict[int, int]]) -> dict[str, list[list]]:
    """Each function's uses of classes, lines as ranks among its lines (module-level uses: among theirs)."""
    found: dict[str, list[list]] = {}
    for key, held in uses.items():
        rank = ranks.get(key) or {line: r for r, line in enumerate(sorted(set(_lines(uses, key))))}
        found[key] = sorted([name, rank[line]] for name, line in held)
    return found


def _digest(value: object) -> str:
    return hashlib.blake2b(json.dumps(value, separators=(",", ":")).encode(), digest_size=16).hexdigest()


def deepen(indexer: ModuleIndexer, qualnames: list[str]) -> dict[str, tuple | Failure]:
    """The deep facts (DEEP_FIELDS) of the named functions, or each one's failure."""
    def work() -> dict[str, tuple | Failure]:
        found: dict[str, tuple | Failure] = {}
        for qualname in qualnames:
            try:
                info = indexer.deepen(qualname)
                found[qualname] = tuple(getattr(info, name) for name in DEEP_FIELDS)
            except Exception as exc:  # RecursionError included: this function's failure, not the run's
                found[qualname] = Failure.of(exc, indexer.index.path, "indexing",
                                             indexer.index.functions[qualname], lost=DEEP_LOST)
        return found
    return call_deep(work)


def _serve(connection: Connection, jobs: list[IndexJob]) -> None:
    """A worker, all of it on the thread with room for deep trees (each file and question handed to that thread and
    back cost 50 us and two thread switches, on the walk's critical path). `jobs` come with the process (inherited
    when forked): a file is sent by its number."""
    call_deep(_work, connection, jobs)


def _work(connection: Connection, jobs: list[IndexJob]) -> None:
    """Index the files this worker is sent, keep their indexers, answer for their functions until stopped.
    A question the walk waits on ("now") is answered before the others. Each function is worked out once (asked
    about again, the answer is empty: it went out already); a file's tree is dropped once every function in it is
    worked out. The others live to the end, so the cyclic collector (which would walk them again and again) stays
    off."""
    gc.disable()
    indexers: dict[str, ModuleIndexer] = {}
    unworked: dict[str, set[str]] = {}  # path -> its functions not worked out yet
    urgent: deque[tuple] = deque()
    waiting: deque[tuple] = deque()
    while True:
        while not (urgent or waiting) or connection.poll():
            message = connection.recv()
            (urgent if message[0] == "now" else waiting).append(message)
        message = urgent.popleft() if urgent else waiting.popleft()
        if message[0] == "index":
            found = index_file(jobs[message[1]])
            if isinstance(found, Failure):
                connection.send(found)
                continue
            path = found.index.path
            unworked[path] = {qualname for qualname, info in found.index.functions.items() if not info.deep}
            if unworked[path]:
                indexers[path] = found
            connection.send((found.index, index_digest(found.index) if message[2] else ""))
        else:
            _, path, qualnames = message
            todo = [qualname for qualname in qualnames if qualname in unworked.get(path, ())]
            connection.send((path, deepen(indexers[path], todo) if todo else {}))
            if todo:
                unworked[path].difference_update(todo)
                if not unworked[path]:
                    del indexers[path], unworked[path]


class IndexPool:
    """Worker processes that index files and then answer the walk's questions about the functions in them."""

    def __init__(self, workers: int, jobs: list[IndexJob]):
        self.jobs = jobs
        self.workers = Workers(workers, _serve, (jobs,))
        self.connections = self.workers.connections
        self.owner: dict[str, int] = {}  # path -> the worker holding its tree
        self.unasked: list[deque[tuple]] = [deque() for _ in range(workers)]  # per worker, questions not sent yet
        self.unanswered = [0] * workers  # per worker, questions sent whose answers are not read yet
        self.answers: dict[tuple[str, str], tuple | Failure] = {}  # (path, qualname) -> answers read, not yet taken

    def index(self, advance: Callable[[], None] | None, digests: bool,
              meanwhile: Callable[[], None] | None = None) -> list[tuple[ModuleIndex, str] | Failure]:
        """Each job's index (and with `digests`, its `index_digest`), the largest files first; `meanwhile` runs here
        once the workers have their first files."""
        jobs = self.jobs
        order = deque(sorted(range(len(jobs)), key=lambda i: len(jobs[i][2]), reverse=True))
        results: list[tuple[ModuleIndex, str] | Failure | None] = [None] * len(jobs)

        def message(number: int) -> tuple:
            return "index", number, digests

        for worker in range(len(self.connections)):
            self.workers.feed(worker, order, message)
        if meanwhile is not None:
            meanwhile()
        for worker, position in self.workers.finished():
            answer = self.connections[worker].recv_bytes()
            self.workers.feed(worker, order, message)  # before this index is unpickled: the worker goes on
            results[position] = pickle.loads(answer)
            if not isinstance(results[position], Failure):
                self.owner[jobs[position][1]] = worker
            if advance is not None:
                advance()
        return results

    def ask(self, path: str, qualnames: list[str]) -> None:
        """Start working out these functions' deep facts (the worker answers in the order asked, but for those
        `answer` finds missing)."""
        worker = self.owner[path]
        self.unasked[worker].append(("deepen", path, qualnames))
        self._pump(worker)

    def answer(self, path: str, qualname: str) -> tuple | Failure:
        """The deep facts of a function asked about: where the worker has not sent them yet, it is told that they
        are wanted now."""
        key = (path, qualname)
        worker = self.owner[path]
        self._pump(worker)
        if key not in self.answers:
            self._send(worker, ("now", path, [qualname]))
        while key not in self.answers:
            self._read(worker)
        return self.answers.pop(key)

    def _pump(self, worker: int) -> None:
        """Read the answers the worker has sent, and send it the questions it has room for."""
        while self.unanswered[worker] and self.connections[worker].poll():
            self._read(worker)
        self._top_up(worker)

    def _top_up(self, worker: int) -> None:
        """Send the worker the questions not sent yet, up to ASKED_AHEAD unanswered."""
        while self.unasked[worker] and self.unanswered[worker] < ASKED_AHEAD:
            self._send(worker, self.unasked[worker].popleft())

    def _send(self, worker: int, question: tuple) -> None:
        self.connections[worker].send(question)
        self.unanswered[worker] += 1

    def _read(self, worker: int) -> None:
        path, found = self.connections[worker].recv()
        self.unanswered[worker] -= 1
        for qualname, facts in found.items():
            self.answers[(path, qualname)] = facts
        self._top_up(worker)

    def close(self) -> None:
        """Stop the workers at once: they have nothing to flush (their trees need no freeing one by one), and one
        may be blocked sending answers the walk never took."""
        self.workers.stop()


class LazyFacts:
    """Fills in the deep facts of the functions the hot walk reaches: asked of the pool's worker that holds the
    file's tree, or worked out here (`sources`: path -> text, for files the cache gave the index of)."""

    def __init__(self, guards: Guards, sources: dict[str, tuple[str, bool, str]],
                 on_change: Callable[[str, bool], None], failures: list[Failure]):
        self.guards = guards
        self.sources = sources  # path -> (module, is_package, text)
        self.on_change = on_change  # (path, ok): a function of the file was filled in, or failed to be
        self.failures = failures
        self.pool: IndexPool | None = None
        self.local: dict[str, ModuleIndexer] = {}  # path -> an indexer of this process
        self.asked: set[tuple[str, str]] = set()  # (path, qualname) asked of the pool

    def want(self, path: str, info: FunctionInfo) -> None:
        """The walk will need `info`'s facts: a worker that holds its tree starts on them now."""
        if info.deep or (path, info.qualname) in self.asked or self.pool is None or path not in self.pool.owner:
            return
        self.asked.add((path, info.qualname))
        self.pool.ask(path, [info.qualname])

    def fill(self, path: str, info: FunctionInfo) -> None:
        """Give `info` its deep facts now."""
        if info.deep:
            return
        self.want(path, info)
        key = (path, info.qualname)
        if key in self.asked:
            facts = self.pool.answer(path, info.qualname)
            self.asked.discard(key)
        else:
            facts = deepen(self._local(path), [info.qualname])[info.qualname]
        failed = isinstance(facts, Failure)
        if failed:
            self.failures.append(facts)
        else:
            for name, value in zip(DEEP_FIELDS, facts):
                setattr(info, name, value)
        info.deep = True  # a failed one is asked no more: it calls nothing the walk knows of
        self.on_change(path, not failed)

    def _local(self, path: str) -> ModuleIndexer:
        if path not in self.local:
            module, is_package, text = self.sources[path]
            self.local[path] = call_deep(module_indexer, module, path, text, self.guards, is_package, True)
        return self.local[path]

    def close(self) -> None:
        """Stop the workers (their trees are freed); a later question about their files parses the file again."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
            self.asked.clear()
