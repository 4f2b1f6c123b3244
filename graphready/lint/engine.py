"""Runs one lint: index every file, find the hot path, run the rules, then turn hits into findings."""

from __future__ import annotations

import contextlib
import gc
import hashlib
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from graphready.catalog import catalog_dir, rule_doc
from graphready.config import Config
from graphready.findings import Finding, Severity
from graphready.lint.baseline import apply_baseline, assign_fingerprints, load_baseline
from graphready.lint.cache import CacheEntry, LintCache, digest, run_stamp
from graphready.lint.analysis.candidate import Candidate
from graphready.lint.analysis.functionkeys import function_keys
from graphready.lint.analysis.project import ProjectFacts
from graphready.errors import InternalError, UsageError
from graphready.lint.cuda import CUDA_SUFFIXES, scan_cuda
from graphready.lint.failures import Failure, recorded
from graphready.lint.analysis.deep import call_deep
from graphready.lint.files import discover, module_name, relative
from graphready.lint.progress import Progress
from graphready.lint.scope.conditions import BranchTests
from graphready.lint.scope.hotpath import (
    CAPTURE_STEP, HotSet, Project, _matches as matches_root, find_hot, untaken_fallbacks,
)
from graphready.lint.lazyindex import IndexPool, LazyFacts, deep_digest, function_lines, index_digest, index_file
from graphready.lint.workers import Workers
from graphready.lint.scope.index import FunctionInfo, ModuleIndex
from graphready.sourcefile import SourceText, read_source
from graphready.lint.scope.guards import Guards
from graphready.lint.analysis.candidate import PARSE_ERROR, UNUSED_SUPPRESSION
from graphready.lint.suppressions import parse_suppressions

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

PARALLEL_THRESHOLD = 8  # fewer files than this are not worth a process pool


@dataclass
class Selection:
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)

    def enabled(self, code: str, opt_in: bool = False) -> bool:
        """Prefixes choose codes; an opt-in code must be named in full (or by ALL)."""
        if opt_in:
            chosen = "ALL" in self.select or code in self.select
        else:
            chosen = not self.select or "ALL" in self.select or any(code.startswith(p) for p in self.select)
        return chosen and not any(code.startswith(p) for p in self.ignore)


@dataclass
class LintResult:
    findings: list[Finding]
    suppressed: list[Finding]
    files: int
    lines: int
    hot_functions: int
    scope: dict = field(default_factory=dict)  # HotSet.scope(): how many functions are hot and why
    hot_chains: dict[str, list[str]] = field(default_factory=dict)  # hot function -> root..function
    nested: list[Path] = field(default_factory=list)  # projects of their own under the given paths
    skipped: list[Path] = field(default_factory=list)  # named files that are not .py/.cu/.cuh
    requested: int = 0  # source files under the given paths, read or not
    failures: list[Failure] = field(default_factory=list)  # graphready's own, one per file or function (GR002)
    assumptions: list[dict] = field(default_factory=list)  # per assume-true/false fact: what it made cold


@dataclass
class WalkedFile:
    """What the hot walk read of one file besides its index as first made: the functions it worked out the deep
    facts of, in the file as it was (the cache's entry of that digest holds them)."""

    digest: str  # of the file's bytes when they were read
    deep: list[str]


@dataclass
class ProjectStage:
    """What a run works out from all of the indexes together: kept in the cache under a key of every index as first
    made, and used again where each file changed since still reads the same to the walk (`LintRun._carried`), so a
    run that reuses it reads only the indexes of the files it analyses again."""

    hot: HotSet
    facts: ProjectFacts
    targets: dict[str, list[str]]  # path -> the functions the rules check (hot, or holding capture sites ...)
    parse_errors: dict[str, tuple[int, int, str]]  # path -> where and why the stdlib parser gave up
    files: dict[str, WalkedFile] = field(default_factory=dict)


class _Indexes:
    """path -> ModuleIndex: those made this run, and those from the cache decoded when first read."""

    def __init__(self, cached: dict[str, str], made: dict[str, ModuleIndex], cache: LintCache,
                 remake: Callable[[str], ModuleIndex]):
        self.cached = cached  # path -> file digest, in the order of the sources
        self.made = made
        self.decoded: dict[str, ModuleIndex] = {}
        self.cache = cache
        self.remake = remake  # for an entry that fails its checks once decoded

    def __getitem__(self, rel: str) -> ModuleIndex:
        if rel in self.made:
            return self.made[rel]
        if rel not in self.decoded:
            entry = self.cache.get(rel, self.cached[rel])
            self.decoded[rel] = entry.index if entry is not None else self.remake(rel)
        return self.decoded[rel]

    def every(self) -> dict[str, ModuleIndex]:
        """All of them: those from the cache first."""
        return {**{rel: self[rel] for rel in self.cached}, **self.made}


@dataclass
class _Source:
    path: Path
    rel: str
    text: str
    digest: str
    requested: bool


def _read(path: Path, rel: str, salt: str, requested: bool) -> _Source | Candidate:
    read = read_source(path)
    if not isinstance(read, SourceText):
        return Candidate(PARSE_ERROR, 1, 0, 1, 0, read, "")
    return _Source(path, rel, read.text, digest(read.data, salt), requested)


def _one_file(function, *args):
    """`call_deep(function, *args)` for one file's job with the cyclic collector off, then one young-generation
    collection. A job's trees die in reference cycles (an indexer's bound methods held by what it builds): the
    collector, left on, walked each file's growing tree again and again (7 % of a cold run's wall time on
    432k lines); all of the job's objects are young, so one pass frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return call_deep(function, *args)
    finally:
        gc.collect(0)
        if enabled:
            gc.enable()


def _load_analysis() -> None:
    """Import libcst and the rules here while the index workers are busy: the analysis workers, forked from this
    process, then start on their first file at once (each imported them itself, 0.3-0.7 s)."""
    import graphready.lint.analysis.analyzer  # noqa: F401


_project_facts: ProjectFacts | None = None  # this process's, for `_analyze_job`: see `_share_project_facts`


def _share_project_facts(facts: ProjectFacts) -> None:
    global _project_facts
    _project_facts = facts


def _analyze_job(job) -> tuple[dict[str, list[Candidate]], list[Failure], dict[str, str]]:
    """Each wanted function's hits (qualname -> hits; "" for the file's own), the failures, and with `job.key_salt`
    the targets' cache keys (worked out here, in parallel, where the engine had no hits to look up)."""
    from graphready.lint.analysis.analyzer import analyze_file  # libcst loads only when something is parsed

    keys = {} if job.key_salt is None else function_keys(
        job, job.source, job.targets, job.hot_keys, (job.unwarmed, job.warmed, job.uncompiled), job.host_params,
        job.key_salt)
    try:
        return *_one_file(analyze_file, job, _project_facts), keys
    except RecursionError:  # deeper than the room call_deep makes: say so rather than crash
        return {"": [Candidate(PARSE_ERROR, 1, 0, 1, 0, "nested too deeply for graphready to analyse", "")]}, [], keys
    except Exception as exc:  # failed before any one function: the whole file is this file's failure (GR002)
        return {}, [Failure.of(exc, job.path, "analysing")], keys


@contextlib.contextmanager
def _whole_project(during: str) -> Iterator[None]:
    """A failure in a phase over the whole project cannot be pinned to one file: it ends the run (exit 3),
    saying which phase failed."""
    try:
        yield
    except (UsageError, InternalError):
        raise
    except Exception as exc:
        raise InternalError.wrap(None, exc, during) from None


@contextlib.contextmanager
def _uncollected() -> Iterator[None]:
    """No cyclic collection while the block runs, and what it leaves alive frozen (skipped by collections
    until `_thawed` ends): for the indexes, decoded from the cache or unpickled from the workers, millions of
    objects in no reference cycle that live to the end of the run, which each collection walked again (3 of
    the 7 s of a one-file-changed run on 432k lines). Each file's job collects its own cyclic garbage
    (`_one_file`), so none is frozen."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _thawed() -> Iterator[None]:
    """Once the run is over, the indexes frozen during it are collected as usual again."""
    try:
        yield
    finally:
        gc.unfreeze()


def _map(function, jobs: list, workers: int, advance: Callable[[], None] | None = None,
         cost: Callable[[object], int] = lambda job: 0, setup: tuple[Callable, tuple] | None = None) -> list:
    """`function` over `jobs`, in worker processes where there are enough; `advance` counts each result;
    `setup` (a function and its arguments) runs once in each process first."""
    if workers > 1 and len(jobs) >= PARALLEL_THRESHOLD:
        return _map_in_workers(function, jobs, workers, advance, cost, setup)
    if setup is not None:
        setup[0](*setup[1])
    results = []
    for job in jobs:
        results.append(function(job))
        if advance is not None:
            advance()
    return results


def _map_in_workers(function, jobs: list, workers: int, advance: Callable[[], None] | None,
                    cost: Callable[[object], int], setup: tuple[Callable, tuple] | None) -> list:
    """`_map` in `Workers` that start with the jobs and `setup` (a ProcessPoolExecutor, which pickled each job and
    woke two threads here per job, took 0.55 s of this process's CPU on 432k lines, 0.17 s now). Only numbers are
    sent: neither side can block the other."""
    order = deque(sorted(range(len(jobs)), key=lambda i: cost(jobs[i]), reverse=True))
    results: list = [None] * len(jobs)
    pool = Workers(workers, _work_on, (function, jobs, setup))
    try:
        for worker in range(workers):
            pool.feed(worker, order)
        for worker, position in pool.finished():
            done, result = pool.connections[worker].recv()
            if not done:  # the job raised: so does the map, as if it had run here
                raise result
            results[position] = result
            pool.feed(worker, order)
            if advance is not None:
                advance()
    finally:  # idle now, or the run failed
        pool.stop()
    return results


def _work_on(connection: Connection, function, jobs: list, setup: tuple[Callable, tuple] | None) -> None:
    """A worker of `_map_in_workers`: `setup`, then `function` on each job it is sent the number of, until killed.
    Each result goes back as (True, result), or (False, the exception the job raised)."""
    if setup is not None:
        setup[0](*setup[1])
    while True:
        job = jobs[connection.recv()]
        try:
            connection.send((True, function(job)))
        except Exception as exc:
            connection.send((False, exc))


def _one_per_line(hits: list[Candidate]) -> list[Candidate]:
    """A rule reports a line once: the first hit by column (a line is what a person fixes)."""
    first: dict[tuple[str, int], Candidate] = {}
    for hit in sorted(hits, key=lambda h: (h.line, h.column)):
        first.setdefault((hit.rule, hit.line), hit)
    return list(first.values())


def _shifted(hits: list[Candidate], by: int) -> list[Candidate]:
    """A function's hits with their lines moved by `by`: kept as offsets from its first line (an edit above it
    moves it, not its hits)."""
    return [replace(hit, line=hit.line + by, end_line=hit.end_line + by) for hit in hits]


def _within(hits: list[Candidate], span: tuple[int, int]) -> bool:
    """Every hit lies in the function's lines (`span`): one outside would not move with them, so is not kept."""
    return all(span[0] <= hit.line and hit.end_line <= span[1] for hit in hits)


def _checked(info: FunctionInfo, hot: HotSet) -> bool:
    """The rules run on hot functions, and on any holding a capture site, `graph(`/`.replay(` or padded rows."""
    return bool(info.key in hot or info.capture_bodies or info.mentions_graph or info.padded_rows)


def _file_key(targets: list[tuple[str, bool]], hot: HotSet, salt: str) -> str:
    """What a file's hits are cached under, besides its digest: the functions checked (and which are hot), what
    the hot path says of them, and the project's facts."""
    hot_keys = {key for key, is_hot in targets if is_hot}
    warm_up = (hot_keys & hot.unwarmed, hot_keys & hot.warmed, hot_keys & hot.uncompiled)
    host_params = {k: sorted(hot.host_params[k]) for k in sorted(hot_keys & hot.host_params.keys())}
    given = {k: sorted(hot.given_params[k]) for k in sorted(hot_keys & hot.given_params.keys())}
    return repr((sorted(targets), [sorted(w) for w in warm_up], host_params, given, salt))


def _without_untaken_branches(info: FunctionInfo, given: set[str] | None, facts: bool = True) -> FunctionInfo:
    """`info` with its `if scale is None:` fallbacks made cold where every hot caller passes `scale`, and
    (with `facts`) the branches an assume-true/false fact rules out."""
    ranges = untaken_fallbacks(info, given) + ([(start, end) for _, start, end in info.assumed] if facts else [])
    return replace(info, excluded=info.excluded + ranges) if ranges else info


def _class_fields(project: Project) -> dict[str, dict[str, str]]:
    """Annotated class fields (`seq_lens: torch.Tensor` in a metadata dataclass) for every class,
    bases first, so `meta.seq_lens` has a kind wherever `meta: AttnMetadata` is a parameter."""
    fields: dict[str, dict[str, str]] = {}

    def of(dotted: str, depth: int = 0) -> dict[str, str]:
        if dotted in fields:
            return fields[dotted]
        found = project.class_named(dotted)
        if not found or depth > 8:
            return {}
        fields[dotted] = {}  # a cycle through bases ends here
        merged: dict[str, str] = {}
        for base in found[0].bases:
            merged.update(of(base, depth + 1))
        merged.update(found[0].field_kinds)
        fields[dotted] = merged
        return merged

    for index in project.modules.values():
        for info in index.classes.values():
            of(f"{index.module}.{info.qualname}")
    return {name: kinds for name, kinds in fields.items() if kinds}


class LintRun:
    def __init__(self, config: Config, selection: Selection, jobs: int = 1, use_cache: bool = True,
                 statistics: bool = False, progress: Progress | None = None):
        self.progress = progress  # counts indexed and analysed files (a bar on a terminal)
        self.config = config
        self.statistics = statistics  # also count what each assume fact made cold (analyses the code it rules out)
        self.selection = selection
        self.jobs = max(1, jobs)
        self.cache = LintCache(config.root, use_cache)
        self.salt = config.fingerprint()
        self.failures: list[Failure] = []
        self.bare_chains: set[str] = set()  # hot functions whose branch tests could not be traced
        self.uncached: set[str] = set()  # files graphready failed on a function of: left out of the cache
        self.digests: dict[str, str] = {}  # path -> the digest its cache entry is kept under
        self.replaced: dict[str, CacheEntry] = {}  # path -> its cache entry before this run indexed it again

    def run(self, paths: list[Path], split: bool = True) -> LintResult:
        found = discover(self.config, paths, split)
        files, requested = found.files, found.requested
        sources: list[_Source] = []
        unreadable: dict[str, list[Candidate]] = {}
        for path in files:
            rel = relative(path, self.config.root, resolved=True)
            read = _read(path, rel, self.salt, path in requested)
            if isinstance(read, Candidate):
                if path in requested:
                    unreadable[rel] = [read]
            else:
                sources.append(read)
        key = self._run_key(sources, unreadable)
        result = self.cache.run_result(key, LintResult)
        if result is None:
            with _thawed():
                result = self._lint(sources, unreadable)
            if not self.failures:  # a failure may be this machine's (too deep a file): the next run tries again
                self.cache.save_run_result(key, result)
        result = replace(result, nested=found.nested, skipped=found.skipped, requested=len(requested))
        if self.config.baseline is not None:
            apply_baseline(result.findings, load_baseline(self.config.baseline))
        return result

    def _run_key(self, sources: list[_Source], unreadable: dict[str, list[Candidate]]) -> str:
        """Everything a whole result depends on: graphready's code and catalog, every setting, the rules
        selected, and each file's digest (its bytes and the per-file settings) and whether it was named."""
        stated = repr((run_stamp(catalog_dir()), self._stated_config(), self.selection, self.statistics,
                       [(s.rel, s.digest, s.requested) for s in sources],
                       sorted((rel, c[0].message) for rel, c in unreadable.items())))
        return hashlib.blake2b(stated.encode(), digest_size=16).hexdigest()

    def _stated_config(self) -> Config:
        """The settings, with a stable repr (the assume facts' frozensets have none)."""
        return replace(self.config, assumptions=[a.label for a in self.config.assumptions],
                       own_assumptions=[a.label for a in self.config.own_assumptions])

    def _lint(self, sources: list[_Source], unreadable: dict[str, list[Candidate]]) -> LintResult:
        """Everything but the baseline, which is applied to a result read from the cache too."""
        python = [s for s in sources if s.rel.endswith(".py")]
        self.digests = {s.rel: s.digest for s in python}
        lazy = LazyFacts(self._guards(), {s.rel: (*module_name(s.rel), s.text) for s in python},
                         self._refilled, self.failures)
        try:
            with _uncollected():  # the indexes, decoded from the cache or sent back by workers, live to the end of the run
                indexes, index_digests = self._index(python, lazy)
                stage_key = self._stage_key(index_digests) if len(index_digests) == len(python) else None
                stage = self.cache.project_stage(stage_key, ProjectStage) if stage_key else None
                carried = self._carried(stage, python, indexes, lazy) if stage is not None else None
                if carried is not None and carried is not stage and not self.failures:  # saved with the changed files' digests
                    self.cache.save_project_stage(stage_key, carried)
                stage = carried
                every = indexes.every() if stage is None else None
            project = None
            if every is not None:
                project = Project({index.module: index for index in every.values()}, lazy)
                stage = self._project_stage(every, project)
                if stage_key and not self.failures:  # a run where graphready failed may have walked less
                    self.cache.save_project_stage(stage_key, stage)
        finally:
            lazy.close()
        hot, shared = stage.hot, stage.facts
        candidates = self._analyze([s for s in python if s.requested], indexes, lazy, hot, shared, stage.targets)
        assumptions = self._assumptions(python, every, project, lazy, hot, shared) if self.config.assumptions else []
        candidates.update(unreadable)
        for source in sources:
            if source.requested and source.rel.endswith(CUDA_SUFFIXES):
                with recorded(self.failures, source.rel, "scanning"):
                    candidates[source.rel] = scan_cuda(source.text)
        for source in python:
            error = stage.parse_errors.get(source.rel)
            if source.requested and error:
                line, column, message = error
                candidates.setdefault(source.rel, []).append(
                    Candidate(PARSE_ERROR, line, column, line, column, f"cannot parse: {message}", ""))
        self.cache.save({s.rel for s in python})
        owners = {module_name(s.rel)[0]: s.rel for s in python}

        def function(key: str) -> FunctionInfo | None:
            module, _, qualname = key.partition(":")
            return indexes[owners[module]].functions.get(qualname) if module in owners else None

        chains = BranchTests({module_name(s.rel)[0]: s.text for s in python}, hot, function)
        findings = [self._finding(rel, c, hot, chains) for rel, hits in candidates.items() for c in _one_per_line(hits)
                    if self._enabled(c.rule, rel)]  # before the chain: tracing one parses the functions along it
        texts = {s.rel: s.text for s in sources if s.requested}
        findings, suppressed = self._suppress(findings, texts)
        for finding in findings + suppressed:
            override = self.config.severity.get(finding.rule)
            if override is not None:
                finding.severity = override
        # graphready's own failures: never selected away, suppressed, re-graded or baselined
        failed = [self._finding(f.path, f.candidate(), hot, None) for f in self.failures]
        reported = findings + suppressed + failed
        paths = {finding.path for finding in reported}  # a fingerprint reads its line: only these files are split
        assign_fingerprints(reported, {rel: text.splitlines() for rel, text in texts.items() if rel in paths})
        requested_sources = [s for s in sources if s.requested]
        return LintResult(
            findings=sorted(findings + failed, key=Finding.sort_key),
            suppressed=sorted(suppressed, key=Finding.sort_key),
            files=len(requested_sources),
            lines=sum(s.text.count("\n") for s in requested_sources),
            hot_functions=len(hot.chains),
            scope=hot.scope(),
            hot_chains=hot.chains,
            failures=self.failures,
            assumptions=assumptions,
        )

    def _stage_key(self, index_digests: dict[str, str]) -> str | None:
        """Everything the hot path and the project's facts depend on: graphready's code, the settings and every
        file's index as first made. None where assume facts are set (their statistics walk the project again)."""
        if self.config.assumptions:
            return None
        stated = repr((run_stamp(catalog_dir()), self._stated_config(), sorted(index_digests.items())))
        return hashlib.blake2b(stated.encode(), digest_size=16).hexdigest()

    def _carried(self, stage: ProjectStage, sources: list[_Source], indexes: _Indexes,
                 lazy: LazyFacts) -> ProjectStage | None:
        """The last run's stage, if each file changed since reads the same to the walk: its index as first made
        alike (the stage's key says so), and the deep facts of the functions the walk worked out alike, lines as
        ranks, to those the cache's entry of the file as it was holds. The calls' lines the stage holds
        (`hot.via`) are moved to where they are now. None otherwise."""
        changed = [source for source in sources if source.rel not in stage.files
                   or stage.files[source.rel].digest != source.digest]
        if not changed:
            return stage
        failures = len(self.failures)
        files = dict(stage.files)
        moved: dict[str, tuple[ModuleIndex, ModuleIndex]] = {}  # module -> its index as walked, and now
        for source in changed:
            walked = files.get(source.rel)
            was = self.replaced.get(source.rel)
            if walked is None or was is None or was.digest != walked.digest:
                return None
            index, before = indexes[source.rel], was.index.functions
            if not all(q in index.functions and q in before and before[q].deep for q in walked.deep):
                return None
            for qualname in walked.deep:
                lazy.fill(source.rel, index.functions[qualname])
            if (len(self.failures) > failures
                    or deep_digest(index, walked.deep) != deep_digest(was.index, walked.deep)):
                return None
            files[source.rel] = replace(walked, digest=source.digest)
            moved[index.module] = (was.index, index)
        callers = {callee: stage.hot.chains[callee][-2].removesuffix(CAPTURE_STEP).partition(":")[::2]
                   for callee in stage.hot.via}
        wanted: dict[str, set[str]] = {}  # module changed -> its functions making a chain's call
        for module, qualname in callers.values():
            if module in moved:
                wanted.setdefault(module, set()).add(qualname)
        lines = {module: [function_lines(index, sorted(names)) for index in moved[module]]
                 for module, names in wanted.items()}
        via = dict(stage.hot.via)
        for callee, (module, qualname) in callers.items():
            if module in lines:
                before, now = (found.get(qualname, []) for found in lines[module])
                line = via[callee]
                if line not in before or len(before) != len(now):
                    return None
                via[callee] = now[before.index(line)]  # the same rank among the caller's lines
        return replace(stage, hot=replace(stage.hot, via=via), files=files)

    def _project_stage(self, indexes: dict[str, ModuleIndex], project: Project) -> ProjectStage:
        """Check the configured roots and facts against the project, find the hot path, collect the facts every
        file's analysis reads."""
        with _whole_project("finding the hot path"):
            if not any(index.parse_error for index in indexes.values()) and not self.failures:
                self._check_roots(project)  # a broken file, or one graphready failed on, may hold the root
                self._check_assumptions(indexes.values(), len(project.modules))
            hot = find_hot(project, self.config.hot_paths, self.config.exclude_roots, self.config.not_compiled,
                           self.config.warm_up_before_capture)
        with _whole_project("collecting the project's classes"):
            facts = ProjectFacts(
                tensor_functions={f"{index.module}.{info.qualname}" for index in indexes.values()
                                  for info in index.functions.values() if info.returns_tensor},
                autograd_functions=project.autograd_functions,
                class_fields=_class_fields(project),
                pageable_functions={f"{index.module}.{info.qualname}" for index in indexes.values()
                                    for info in index.functions.values() if info.returns_pageable},
                captured_device_fields=set().union(*(index.captured_device_fields for index in indexes.values())),
                parameter_attrs=set().union(*(index.parameter_attrs for index in indexes.values())),
                one_gpu_per_process=self.config.one_gpu_per_process)
        targets = {rel: names for rel, index in indexes.items()
                   if (names := [info.qualname for info in index.functions.values() if _checked(info, hot)])}
        errors = {rel: index.parse_error for rel, index in indexes.items() if index.parse_error}
        walked = {rel: WalkedFile(self.digests[rel], [q for q, info in index.functions.items() if info.deep])
                  for rel, index in indexes.items()}
        return ProjectStage(hot, facts, targets, errors, walked)

    def _check_roots(self, project: Project) -> None:
        """A hot-paths entry of the project's own that names no function is a typo or a stale
        name: linting on would check less than the user thinks, so it is an error."""
        for pattern in self.config.own_hot_paths:
            if not any(matches_root(pattern, key) for key in project.functions):
                where = self.config.source or "[tool.graphready]"
                raise UsageError(f"{where}: hot-paths entry {pattern!r} matches no function in the"
                                 f" {len(project.modules)} modules under {self.config.root}"
                                 " (modules are dotted from the directory holding pyproject.toml)")

    def _check_assumptions(self, indexes, modules: int) -> None:
        """An assume-true/false entry of the project's own that names no branch test is a typo or a test the
        code no longer has: it would state nothing, so it is an error (a profile's entries need not match)."""
        facts = self.config.facts()
        named = {label for index in indexes for label in index.assumed_tests}
        for assumption in self.config.own_assumptions:
            if not facts.named_as[assumption.label] & named:
                where = self.config.source or "[tool.graphready]"
                scope = f" in {assumption.scope}" if assumption.scope else ""
                raise UsageError(f"{where}: {assumption.key} entry {assumption.entry!r}{scope} matches no `if` test in a"
                                 f" function of the {modules} modules under {self.config.root} (write the test as"
                                 " --show-chain prints it, e.g. \"'dynamic' in self.rope_type\")")

    def _assumptions(self, python: list[_Source], indexes: dict[str, ModuleIndex], project: Project,
                     lazy: LazyFacts, hot: HotSet, shared: ProjectFacts) -> list[dict]:
        """Per assume-true/false fact: the branch tests it names and the calls of hot code its ruled-out
        branches hold; with `statistics`, also the functions hot only through those calls and the findings
        the facts took away (found by analysing, once more and without the facts, the code they rule out)."""
        tests: Counter[str] = Counter()
        for index in indexes.values():
            tests.update(index.assumed_tests)
        records = {fact.label: {"key": fact.key, "entry": fact.entry, **({"in": fact.scope} if fact.scope else {}),
                                "tests": tests[fact.label], "call_edges": len(hot.cut.get(fact.label, ()))}
                   for fact in self.config.assumptions}
        if not self.statistics:
            return list(records.values())
        with _whole_project("counting what the assume facts made cold"):
            whole = find_hot(project, self.config.hot_paths, self.config.exclude_roots, self.config.not_compiled,
                             self.config.warm_up_before_capture, follow_assumed=True)
        lost = {key: self._cut_by(key, whole, project) for key in whole.chains if key not in hot}
        touched = {info.key.split(":", 1)[0] for info in project.functions.values()
                   if info.key in lost or (info.assumed and (info.key in whole or info.capture_bodies))}
        sources = [s for s in python if s.requested and indexes[s.rel].module in touched]
        kept, self.failures = self.failures, []  # graphready's failures on code the facts rule out are not the run's
        try:
            hits = self._analyze(sources, indexes, lazy, whole, shared, None, facts=False, cached=False)
        finally:
            self.failures = kept
        for record in records.values():
            record["functions"] = record["findings"] = 0
        for label in lost.values():
            if label:
                records[label]["functions"] += 1
        for source in sources:
            suppressions = parse_suppressions(source.text)
            for hit in _one_per_line(hits.get(source.rel, [])):
                info = project.functions.get(hit.function)
                label = lost.get(hit.function) or (info.assumed_by(hit.line) if info else "")
                if (label and self._enabled(hit.rule, source.rel)
                        and not any(s.line in (hit.line, hit.end_line) and s.covers(hit.rule) for s in suppressions)):
                    records[label]["findings"] += 1
        return list(records.values())

    @staticmethod
    def _cut_by(key: str, whole: HotSet, project: Project) -> str:
        """The fact that rules out the first call of `key`'s chain (walked without the facts) that a run with
        them does not follow, or "" where none does."""
        chain = whole.chains[key]
        for caller, callee in zip(chain, chain[1:]):
            info = project.functions.get(caller.removesuffix(CAPTURE_STEP))
            line = whole.via.get(callee)
            if info is not None and line is not None and (label := info.assumed_by(line)):
                return label
        return ""

    def _phase(self, description: str, jobs: list) -> Callable[[], None] | None:
        return self.progress.phase(description, len(jobs)) if self.progress is not None else None

    # -- phase 1 ---------------------------------------------------------------------------
    def _guards(self) -> Guards:
        return Guards.of(self.config.eager_if, self.config.captured_if, self.config.gpu_capability,
                         self.config.facts())

    def _index(self, sources: list[_Source], lazy: LazyFacts) -> tuple[_Indexes, dict[str, str]]:
        """Each file's lazy index (lint/lazyindex.py), from the cache (decoded when first read) or made now (with
        enough files, by worker processes that stay to answer the hot walk), and each one's `index_digest`."""
        cached: dict[str, str] = {}
        digests: dict[str, str] = {}
        missing: list[_Source] = []
        for source in sources:
            found = self.cache.index_digest(source.rel, source.digest)
            if found is not None:
                cached[source.rel], digests[source.rel] = source.digest, found
            else:
                missing.append(source)
        guards = self._guards()
        jobs = []
        for source in missing:
            module, is_package = module_name(source.rel)
            jobs.append((module, source.rel, source.text, guards, is_package))
        advance = self._phase("indexing", jobs)
        if self.jobs > 1 and len(jobs) >= PARALLEL_THRESHOLD:
            lazy.pool = IndexPool(self.jobs, jobs)
            indexed = lazy.pool.index(advance, self.cache.enabled, meanwhile=_load_analysis)
        else:
            indexed = []
            for job in jobs:
                indexed.append(self._index_here(job, lazy))
                if advance is not None:
                    advance()
        made: dict[str, ModuleIndex] = {}
        for job, source, found in zip(jobs, missing, indexed):
            made[source.rel] = self._keep(source, job[0], found, digests)
        by_path = {source.rel: source for source in sources}

        def remake(rel: str) -> ModuleIndex:
            source = by_path[rel]
            module, is_package = module_name(rel)
            job = (module, rel, source.text, guards, is_package)
            return self._keep(source, module, self._index_here(job, lazy), digests)

        return _Indexes(cached, made, self.cache, remake), digests

    def _index_here(self, job, lazy: LazyFacts) -> tuple[ModuleIndex, str] | Failure:
        """One file's index made in this process (its indexer kept to answer the walk), and its digest."""
        found = index_file(job)
        if isinstance(found, Failure):
            return found
        lazy.local[job[1]] = found
        return found.index, index_digest(found.index) if self.cache.enabled else ""

    def _keep(self, source: _Source, module: str, made: tuple[ModuleIndex, str] | Failure,
              digests: dict[str, str]) -> ModuleIndex:
        """The index made for `source`, put in the cache; an empty one for a file graphready failed on."""
        if isinstance(made, Failure):  # the file stays out of the project and out of the cache
            self.failures.append(made)
            return ModuleIndex(module=module, path=source.rel)
        index, digests[source.rel] = made
        earlier = self.cache.earlier(source.rel)  # the file's hits per function outlive its other edits
        if earlier is not None:
            self.replaced[source.rel] = earlier
        self.cache.put(source.rel, CacheEntry(source.digest, index, digests[source.rel],
                                              functions=earlier.functions if earlier else {}))
        return index

    def _refilled(self, rel: str, ok: bool) -> None:
        """The hot walk filled in a function of `rel`: its cache entry is saved with it, unless graphready failed
        on one of its functions (a fixed graphready must index the file again)."""
        if not ok:
            self.uncached.add(rel)
        if rel in self.uncached:
            self.cache.discard(rel)
            return
        entry = self.cache.get(rel, self.digests[rel])
        if entry is not None:
            self.cache.put(rel, entry)

    # -- phase 3 ---------------------------------------------------------------------------
    def _analyze(self, sources: list[_Source], indexes, lazy: LazyFacts, hot: HotSet, shared: ProjectFacts,
                 checked: dict[str, list[str]] | None, facts: bool = True,
                 cached: bool = True) -> dict[str, list[Candidate]]:
        """Rule hits per file. `checked`: the functions of each file the rules run on, as the project stage
        found them (a file whose hits are cached needs no index); None: found from the indexes. Without
        `facts`, in the branches assume facts rule out too (not `cached`: those hits are only counted)."""
        stored = cached and self.cache.enabled  # with --no-cache no hit is looked up or kept: no key is worked out
        project_salt = shared.digest() if stored else ""
        results: dict[str, list[Candidate]] = {}
        # (source, file key, targets' lines by qualname, function keys, cached hits, FileJob or None)
        pending: list[tuple] = []
        for source in sources:
            if checked is not None:
                names = checked.get(source.rel, [])
                if not names:
                    continue
                if stored:
                    module = module_name(source.rel)[0]
                    key = _file_key([(f"{module}:{name}", f"{module}:{name}" in hot) for name in names], hot,
                                    project_salt)
                    found = self.cache.hits(source.rel, source.digest, key)
                    if found is not None:
                        results[source.rel] = found
                        continue
            index = indexes[source.rel]
            targets = []
            for info in index.functions.values():
                if _checked(info, hot):
                    if not info.deep:  # a hot path from the cache walked none of this run's lazy indexes
                        lazy.fill(source.rel, info)
                    with recorded(self.failures, source.rel, "analysing", info):
                        target = _without_untaken_branches(info, hot.given_params.get(info.key), facts)
                        targets.append((target, info.key in hot))
            if not targets:
                continue
            key = _file_key([(info.key, is_hot) for info, is_hot in targets], hot, project_salt) if stored else ""
            hot_keys = {info.key for info, is_hot in targets if is_hot}
            warm_up = (hot_keys & hot.unwarmed, hot_keys & hot.warmed, hot_keys & hot.uncompiled)
            host_params = {k: sorted(hot.host_params[k]) for k in sorted(hot_keys & hot.host_params.keys())}
            entry = self.cache.get(source.rel, source.digest) if stored else None
            if entry is not None and key in entry.analysis:
                results[source.rel] = entry.analysis[key]
                continue
            keys: dict[str, str] = {}  # qualname -> function key: worked out here only to look hits up
            if entry is not None and entry.functions:
                keys = function_keys(index, source.text, targets, hot_keys, warm_up, host_params, project_salt)
            spans = {info.qualname: (info.first_line, info.end_lineno) for info, _ in targets}
            known = {qualname: _shifted(entry.functions[k], spans[qualname][0]) for qualname, k in keys.items()
                     if k in entry.functions}
            wanted = {info.qualname for info, _ in targets} - known.keys()
            job = None
            if wanted:
                from graphready.lint.analysis.analyzer import FileJob

                job = FileJob(index.module, source.rel, source.text, index.imports, index.global_calls,
                              index.global_containers, index.classes, targets, index.functions, hot_keys, *warm_up,
                              host_params, wanted, project_salt if entry is not None and not keys else None)
            pending.append((source, key, spans, keys, known, job))
        jobs = [p[5] for p in pending if p[5] is not None]
        advance = self._phase("analysing", jobs) if cached else None  # --statistics' second pass: no bar
        analysed = iter(_map(_analyze_job, jobs, self.jobs, advance,
                             cost=lambda job: sum(info.end_lineno - info.first_line for info, _ in job.targets),
                             setup=(_share_project_facts, (shared,))))
        for source, key, spans, keys, known, job in pending:
            found, failures, made_keys = next(analysed) if job is not None else ({}, [], {})
            found.update(known)
            keys = keys or made_keys
            results[source.rel] = [hit for qualname in ["", *spans] for hit in found.get(qualname, [])]
            self.failures += failures
            entry = self.cache.get(source.rel, source.digest) if stored else None
            if entry is None:
                continue
            failed = {failure.name for failure in failures}  # a fixed graphready must analyse these again
            entry.functions = {k: _shifted(found[qualname], -spans[qualname][0]) for qualname, k in keys.items()
                               if qualname in found and qualname not in failed
                               and _within(found[qualname], spans[qualname])}
            if not failures:
                entry.analysis = {key: results[source.rel]}
            self.cache.put(source.rel, entry)
        return results

    # -- findings ----------------------------------------------------------------------------
    def _finding(self, rel: str, hit: Candidate, hot: HotSet, chains: BranchTests | None) -> Finding:
        doc = rule_doc(hit.rule)
        chain = self._chain(rel, hit.function, hot, chains) if hit.function in hot else None
        if chain is None and hit.function:
            # not hot: a capture site, or a replay preparation that pads a batch (GR605, scope/padding.py)
            chain = [f"{hit.function} [{'replay preparation' if hit.rule == 'GR605' else 'capture site'}]"]
        return Finding(
            path=rel, line=hit.line, column=hit.column, end_line=hit.end_line, end_column=hit.end_column,
            rule=hit.rule, name=doc.name if doc else hit.rule,
            severity=Severity.parse(hit.severity) if hit.severity else doc.severity if doc else Severity.ERROR,
            message=hit.message, hot_chain=list(chain or []),
            hot_callers=len(hot.callers.get(hit.function, ())) if hit.function in hot else None,
        )

    def _chain(self, rel: str, function: str, hot: HotSet, chains: BranchTests | None) -> list[str]:
        """The hot chain with the branch tests along it; without them (and a GR002) where tracing those fails."""
        if chains is not None and function not in self.bare_chains:
            with recorded(self.failures, rel, "tracing the hot chain of", chains.function(function),
                          lost="its findings show that chain without the branch tests along it", checked=True):
                return chains.chain(function)
            self.bare_chains.add(function)
        return hot.chains[function]

    def _enabled(self, rule: str, path: str) -> bool:
        doc = rule_doc(rule)
        if not self.selection.enabled(rule, opt_in=bool(doc and doc.opt_in)):
            return False
        for pattern, codes in self.config.per_file_ignores.items():
            if fnmatchcase(path, pattern) and any(rule.startswith(c) for c in codes):
                return False
        return True

    def _suppress(self, findings: list[Finding], texts: dict[str, str]) -> tuple[list[Finding], list[Finding]]:
        by_file: dict[str, list[Finding]] = {}
        for finding in findings:
            by_file.setdefault(finding.path, []).append(finding)
        kept: list[Finding] = []
        suppressed: list[Finding] = []
        for rel, text in texts.items():
            suppressions = parse_suppressions(text)
            by_line: dict[int, list] = {}
            for suppression in suppressions:
                by_line.setdefault(suppression.line, []).append(suppression)
            for finding in by_file.pop(rel, []):
                match = next((s for line in {finding.line, finding.end_line} for s in by_line.get(line, [])
                              if s.covers(finding.rule)), None)
                if match is None:
                    kept.append(finding)
                    continue
                match.used.add(finding.rule)
                finding.suppression_reason = match.reason or None
                suppressed.append(finding)
            failures = [f for f in self.failures if f.path == rel]
            for suppression in suppressions:
                if any(f.left_unchecked(suppression.line) for f in failures):
                    continue  # no rule ran there, so nothing tells whether it still hides a finding
                unused = self._unused(suppression)
                if unused and self._enabled(UNUSED_SUPPRESSION, rel):
                    doc = rule_doc(UNUSED_SUPPRESSION)
                    kept.append(Finding(rel, suppression.line, suppression.column, UNUSED_SUPPRESSION, doc.name,
                                        doc.severity, f"unused suppression: {unused}"))
        for remaining in by_file.values():
            kept.extend(remaining)
        return kept, suppressed

    def _unused(self, suppression) -> str:
        if suppression.codes is None:
            return "" if suppression.used else "nothing on this line is reported"
        stale = sorted(c for c in suppression.codes - suppression.used  # a rule that did not run cannot judge it
                       if self.selection.enabled(c, opt_in=(doc := rule_doc(c)) is not None and doc.opt_in))
        return f"no {', '.join(stale)} finding on this line" if stale else ""


def lint(config: Config, paths: list[Path], selection: Selection | None = None, jobs: int = 1,
         use_cache: bool = True, split: bool = True, statistics: bool = False,
         progress: Progress | None = None) -> LintResult:
    """Lint `paths` of the one project `config` belongs to; with `split`, directories under them
    that are projects of their own are listed in `LintResult.nested`, not linted. `statistics` also
    counts the findings each assume fact took away."""
    return LintRun(config, selection or Selection(config.select, config.ignore), jobs, use_cache,
                   statistics, progress).run(paths, split)
