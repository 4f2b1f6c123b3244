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
import multiprocessing
import os
from collections import deque
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from typing import Callable

from graphready.lint.analysis.deep import call_deep
from graphready.lint.datacodec import encode
from graphready.lint.failures import Failure
from graphready.lint.scope.guards import Guards
from graphready.lint.scope.index import FunctionInfo, ModuleIndex, ModuleIndexer, module_indexer

DEEP_FIELDS = ("calls", "excluded", "memo", "cold_spans", "empty_when_captured", "never_runs", "assumed")
# A worker and this process must never both block sending (each waiting for the other to read): a file is sent
# to a worker only once it has sent back the last one, and questions, which are small, only while fewer than AHEAD
# of its answers are unread.
AHEAD = 32
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
    """Of a lazy index as first made: files indexed alike give the same hot path."""
    text = json.dumps(encode(index), separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


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


def _serve(connection: Connection) -> None:
    """A worker: index the files it is sent, keep their indexers, answer for their functions until told to stop.
    A file's tree is dropped once every function in it is worked out (none is asked about twice); the others live
    to the end, so the cyclic collector (which would walk them again and again) stays off."""
    gc.disable()
    indexers: dict[str, ModuleIndexer] = {}
    unworked: dict[str, int] = {}  # path -> its functions not worked out yet
    while True:
        message = connection.recv()
        if message[0] == "index":
            found = index_file(message[1])
            if isinstance(found, Failure):
                connection.send(found)
                continue
            path = found.index.path
            unworked[path] = sum(not info.deep for info in found.index.functions.values())
            if unworked[path]:
                indexers[path] = found
            connection.send((found.index, index_digest(found.index) if message[2] else ""))
        elif message[0] == "deepen":
            _, path, qualnames = message
            connection.send(deepen(indexers[path], qualnames))
            unworked[path] -= len(qualnames)
            if not unworked[path]:
                del indexers[path]
        else:  # nothing to flush: leave without freeing the trees one by one (a third of a second on 430k lines)
            connection.close()
            os._exit(0)


class IndexPool:
    """Worker processes that index files and then answer the walk's questions about the functions in them."""

    def __init__(self, workers: int):
        self.connections: list[Connection] = []
        self.processes = []
        for _ in range(workers):
            ours, theirs = multiprocessing.Pipe()
            process = multiprocessing.Process(target=_serve, args=(theirs,), daemon=True)
            process.start()
            theirs.close()
            self.connections.append(ours)
            self.processes.append(process)
        self.owner: dict[str, int] = {}  # path -> the worker holding its tree
        self.asked: list[deque[str]] = [deque() for _ in range(workers)]  # per worker, the paths asked, in order
        self.answers: dict[tuple[str, str], tuple | Failure] = {}  # (path, qualname) -> answers read, not yet taken

    def index(self, jobs: list[IndexJob], advance: Callable[[], None] | None, digests: bool,
              meanwhile: Callable[[], None] | None = None) -> list[tuple[ModuleIndex, str] | Failure]:
        """Each job's index (and with `digests`, its `index_digest`), the largest files first, each sent to a worker
        with room for it; `meanwhile` runs here once the workers have their first files."""
        order = sorted(range(len(jobs)), key=lambda i: len(jobs[i][2]), reverse=True)
        results: list[tuple[ModuleIndex, str] | Failure | None] = [None] * len(jobs)
        busy: list[int | None] = [None for _ in self.connections]  # the job each worker is on
        pending = deque(order)
        while pending or any(b is not None for b in busy):
            for worker, connection in enumerate(self.connections):
                if pending and busy[worker] is None:
                    busy[worker] = pending.popleft()
                    connection.send(("index", jobs[busy[worker]], digests))
            if meanwhile is not None:
                meanwhile()
                meanwhile = None
            for connection in wait([c for c, b in zip(self.connections, busy) if b is not None]):
                worker = self.connections.index(connection)
                position, busy[worker] = busy[worker], None
                # read whole, the worker waits for its next file: sent before this index is unpickled (it sat idle
                # through that)
                answer = connection.recv_bytes()
                if pending:
                    busy[worker] = pending.popleft()
                    connection.send(("index", jobs[busy[worker]], digests))
                results[position] = ForkingPickler.loads(answer)
                if not isinstance(results[position], Failure):
                    self.owner[jobs[position][1]] = worker
                if advance is not None:
                    advance()
        return results

    def ask(self, path: str, qualnames: list[str]) -> None:
        """Start working out these functions' deep facts."""
        worker = self.owner[path]
        while len(self.asked[worker]) >= AHEAD:
            self._read(worker)
        self.connections[worker].send(("deepen", path, qualnames))
        self.asked[worker].append(path)

    def answer(self, path: str, qualname: str) -> tuple | Failure:
        """The deep facts of a function asked about (the worker answers in the order asked)."""
        while (path, qualname) not in self.answers:
            self._read(self.owner[path])
        return self.answers.pop((path, qualname))

    def _read(self, worker: int) -> None:
        path = self.asked[worker].popleft()
        for qualname, facts in self.connections[worker].recv().items():
            self.answers[(path, qualname)] = facts

    def close(self) -> None:
        """Read the answers not taken (a worker blocked sending one would never stop), then stop the workers."""
        for worker, connection in enumerate(self.connections):
            try:
                while self.asked[worker]:
                    self._read(worker)
                connection.send(("stop",))
            except (OSError, EOFError):  # a worker that died is gone already
                pass
            connection.close()
        for process in self.processes:
            process.join()


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
