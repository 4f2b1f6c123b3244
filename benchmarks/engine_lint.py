"""How good is `graphready lint` on real inference engines? Counts, scope, time and precision.

Downloads pinned SGLang, vLLM and LMDeploy wheels once (`pip download --no-deps`, cached under
~/.cache/graphready-bench/), unpacks the Python code (all of it for the current releases; the model,
layer and runner code for the older ones), lints each tree with its built-in profile
(`profile = "sglang"` / `"vllm"`; LMDeploy, which has none, with the roots a user names by hand) and
prints per-rule counts, how many functions were hot and why, and the time. The corpus is the current
release of each engine plus the older releases that `engine_history.py` uses (the profiles must hold across versions, and those trees hold
real bugs). Precision comes from `benchmarks/engine_labels.tsv`: findings an inference engineer read
and labelled TRUE (a real CUDA-graph hazard on a captured path) or FALSE, with a one-line reason; it is
printed per tree, over all findings, and over distinct statements (a line that several releases ship
counts once), and apart for findings whose hot chain has a step made inside a branch (`[if ...]`) and
for the rest. Every TRUE label must still be reported (recall on labelled hazards).

    python benchmarks/engine_lint.py                      # every pinned tree, shipped profiles
    python benchmarks/engine_lint.py --latest             # only the current release of each engine
    python benchmarks/engine_lint.py --recipe forward     # the old `*:*.forward` recipe, for comparison
    python benchmarks/engine_lint.py --sample 60 --sample-out /tmp/sample.tsv   # rows to label (seed 8)
    python benchmarks/engine_lint.py --latest --settings sglang=deploy.toml   # a deployment's assume facts added
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

CACHE_DIR = Path.home() / ".cache" / "graphready-bench"
LABELS = Path(__file__).with_name("engine_labels.tsv")
LABEL_COLUMNS = ["engine", "path", "line", "rule", "label", "reason", "code"]
SEED = 8


@dataclass(frozen=True)
class Engine:
    name: str
    pin: str  # the exact release linted: labels refer to its line numbers
    prefixes: tuple[str, ...]
    settings: str = ""  # the [tool.graphready] body of an engine with no shipped profile

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.pin}"


SGLANG_CODE = ("sglang/srt/models/", "sglang/srt/layers/", "sglang/srt/model_executor/")
VLLM_CODE = ("vllm/model_executor/models/", "vllm/model_executor/layers/", "vllm/v1/worker/", "vllm/compilation/")
VLLM_V0_CODE = VLLM_CODE + ("vllm/worker/", "vllm/attention/")  # V0 runners and attention backends
# The current releases are linted whole, as a user runs `graphready lint` in an engine checkout (kernels,
# distributed, speculative decoding, diffusion runtime, tests and benchmarks included); the older ones only
# their model, layer and runner code, the part engine_history.py's cases live in.
# An engine graphready ships no profile for, set up as a new user would from the README: roots named by
# hand (the model entry classes, the layer modules, the CUDA attention backends' implementations) and the
# engine's decode flag as captured-if.
LMDEPLOY_SETTINGS = """\
hot-paths = ["lmdeploy.pytorch.models.*:*ForCausalLM.forward", "lmdeploy.pytorch.nn.*:*.forward",
             "lmdeploy.pytorch.backends.cuda.*:*Impl.forward"]
captured-if = ["is_decoding"]
"""
LATEST = [Engine("sglang", "0.5.23", ("sglang/",)), Engine("vllm", "0.33.0", ("vllm/",)),
          Engine("lmdeploy", "0.18.0", ("lmdeploy/",), LMDEPLOY_SETTINGS)]
OLDER = [Engine("sglang", "0.5.13.post1", SGLANG_CODE), Engine("sglang", "0.5.2", SGLANG_CODE),
         Engine("sglang", "0.4.6.post2", SGLANG_CODE), Engine("sglang", "0.4.4", SGLANG_CODE),
         Engine("vllm", "0.15.1", VLLM_CODE), Engine("vllm", "0.7.2", VLLM_V0_CODE),
         Engine("vllm", "0.6.6.post1", VLLM_V0_CODE)]
RECIPES = {
    "profile": lambda engine: engine.settings or f'profile = "{engine.name}"\n',
    "forward": lambda engine: 'hot-paths = ["*:*.forward"]\n',
}


class BenchError(Exception):
    """A download, unpack or lint step failed: message, exit 2."""


def wheel(engine: Engine) -> Path:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE_DIR.glob(f"{engine.name}-{engine.pin}-*.whl"))
    if not found:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", engine.requirement, "--no-deps",
                               "-d", str(CACHE_DIR)], capture_output=True, text=True)
        found = sorted(CACHE_DIR.glob(f"{engine.name}-{engine.pin}-*.whl"))
        if proc.returncode != 0 or not found:
            raise BenchError(f"could not download {engine.requirement}:\n{proc.stderr.strip()}")
    return found[-1]


def unpack(engine: Engine, recipe: str, root: Path, extra: str = "") -> tuple[Path, int, int]:
    """The engine's code under root/<engine>, with a pyproject for the recipe and `extra` settings (a
    deployment's own keys: `assume-true` / `assume-false`); (tree, files, lines)."""
    tree = root / engine.name
    files = lines = 0
    with zipfile.ZipFile(wheel(engine)) as archive:
        for name in archive.namelist():
            if name.endswith(".py") and name.startswith(engine.prefixes):
                data = archive.read(name)
                target = tree / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                files += 1
                lines += data.count(b"\n")
    (tree / "pyproject.toml").write_text("[tool.graphready]\n" + RECIPES[recipe](engine) + extra, encoding="utf-8")
    return tree, files, lines


def settings(values: list[str]) -> dict[str, str]:
    """`--settings ENGINE=FILE` -> {engine: the file's TOML text}, checked to be TOML keys of one table."""
    extra: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise BenchError(f"--settings takes ENGINE=FILE, got {value!r}")
        try:
            text = Path(path).read_text(encoding="utf-8")
            tomllib.loads(text)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise BenchError(f"--settings {value}: {exc}") from None
        extra[name] = extra.get(name, "") + text.rstrip("\n") + "\n"
    return extra


def lint(tree: Path, report: Path, statistics: bool = False) -> tuple[dict, float]:
    report.unlink(missing_ok=True)  # a report left by an earlier run must not pass for this one
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "graphready.cli", "lint", "--no-cache", "--format",  # paths
                           "json", "--output", str(report), *(["--statistics"] if statistics else [])],
                          capture_output=True, text=True, cwd=tree)  # from tree
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1) or not report.is_file():  # exit 1 is findings only with a report written
        raise BenchError(f"lint failed on {tree} (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    return json.loads(report.read_text(encoding="utf-8")), seconds


def key(engine: str, finding: dict) -> tuple[str, str, int, str]:
    return engine, finding["path"], int(finding["line"]), finding["rule"]


def load_labels(path: Path) -> dict[tuple[str, str, int, str], dict]:
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    labels = {}
    for row in rows:
        if row.get("label") not in ("TRUE", "FALSE"):
            raise BenchError(f"{path}: label must be TRUE or FALSE, got {row.get('label')!r} in {row}")
        labels[(row["engine"], row["path"], int(row["line"]), row["rule"])] = row
    return labels


def gating(findings: list[dict]) -> list[dict]:
    """Findings that fail a run at the default fail-on (warning and error): what users act on."""
    return [f for f in findings if f["severity"] in ("error", "warning")]


def print_run(engine: Engine, doc: dict, seconds: float, files: int, lines: int) -> None:
    summary, findings = doc["summary"], doc["findings"]
    scope = summary.get("scope", {})
    print(f"\n== {engine.requirement}: {files} files, {lines:,} lines, lint {seconds:.1f} s "
          f"({seconds / max(lines, 1) * 100_000:.1f} s per 100k lines)")
    print(f"hot functions: {summary.get('hot_functions', 0)}  roots: {scope.get('roots', {})}  "
          f"reached by calls: {scope.get('reached_by_calls', 0)}  left cold by exclude-roots: "
          f"{scope.get('excluded_by_exclude_roots', 0)}  roots of classes never built here: "
          f"{scope.get('roots_of_classes_never_built', 0)}")
    by_severity = summary.get("by_severity", {})
    print("findings: " + ", ".join(f"{by_severity.get(s, 0)} {s}" for s in ("error", "warning", "info")))
    counts = Counter((f["rule"], f["severity"]) for f in findings)
    for (rule, severity), count in sorted(counts.items()):
        print(f"  {rule} {severity:<8} {count:>5}")
    for fact in summary.get("assume", []):
        scope = f" in {fact['in']}" if fact.get("in") else ""
        print(f"  {fact['key']} {fact['entry']!r}{scope}: {fact['tests']} tests, {fact['call_edges']} calls not followed, "
              f"{fact.get('functions', 0)} functions and {fact.get('findings', 0)} findings left out")


def precision(runs: dict[str, dict], labels: dict) -> None:
    """Runs are keyed by tree (`sglang==0.5.23`); so are the labels' `engine` column."""
    rows_seen: list[dict] = []
    branched: Counter[tuple[bool, str]] = Counter()  # (a step of the chain is made in a branch, label)
    current = {key(tree, f) for tree, doc in runs.items() for f in gating(doc["findings"])}
    for tree, doc in runs.items():
        rows = [labels[key(tree, f)] for f in gating(doc["findings"]) if key(tree, f) in labels]
        rows_seen += rows
        branched.update((any(" [if " in step for step in f.get("hot_chain", [])), labels[key(tree, f)]["label"])
                        for f in gating(doc["findings"]) if key(tree, f) in labels)
        true = sum(row["label"] == "TRUE" for row in rows)
        share = f"{true / len(rows):.0%}" if rows else "n/a"
        print(f"precision {tree}: {true}/{len(rows)} labelled error/warning findings are real hazards ({share})")
        for f in gating(doc["findings"]):
            if key(tree, f) not in labels:  # new since the labels were written: label them (--sample)
                print(f"  unlabelled: {tree} {f['path']}:{f['line']} {f['rule']} {f['message'][:80]}")
    if rows_seen:
        hits = sum(row["label"] == "TRUE" for row in rows_seen)
        print(f"precision overall: {hits}/{len(rows_seen)} = {hits / len(rows_seen):.1%}")
        distinct = {statement(row): row["label"] for row in rows_seen}
        hits = sum(label == "TRUE" for label in distinct.values())
        print(f"precision over distinct statements (a line shipped by several releases once): "
              f"{hits}/{len(distinct)} = {hits / len(distinct):.1%}")
        for under, what in ((True, "behind a branch test (a chain step shows `[if ...]`)"),
                            (False, "on calls made every time (no test in the chain)")):
            print(f"real hazards {what}: {branched[(under, 'TRUE')]}/{branched[(under, 'TRUE')] + branched[(under, 'FALSE')]}")
        by_rule = Counter((row["rule"], row["label"]) for row in rows_seen)
        print("per rule (real/labelled): " + ", ".join(
            f"{rule} {by_rule[(rule, 'TRUE')]}/{by_rule[(rule, 'TRUE')] + by_rule[(rule, 'FALSE')]}"
            for rule in sorted({rule for rule, _ in by_rule})))
    true_labels = [k for k, row in labels.items() if row["label"] == "TRUE" and k[0] in runs]
    missing = [k for k in true_labels if k not in current]
    print(f"recall on labelled real hazards: {len(true_labels) - len(missing)}/{len(true_labels)} still reported")
    for tree, path, line, rule in missing:
        print(f"  no longer reported: {tree} {path}:{line} {rule} ({labels[(tree, path, line, rule)]['reason']})")


def statement(row: dict) -> tuple[str, str, str, str]:
    """A finding's identity across releases: engine, file, rule and the code on its line."""
    return row["engine"].split("==")[0], row["path"], row["rule"], " ".join(row["code"].split())


def source_line(tree: Path, finding: dict) -> str:
    source = (tree / finding["path"]).read_text(encoding="utf-8").splitlines()
    return source[finding["line"] - 1].strip()[:160] if finding["line"] <= len(source) else ""


def write_sample(runs: dict[str, dict], trees: dict[str, Path], per_engine: int, out: Path, labels: dict) -> None:
    """A fixed-seed sample of error/warning findings per tree, as label rows (known labels filled in)."""
    rows = []
    for name, doc in sorted(runs.items()):
        pool = sorted(gating(doc["findings"]), key=lambda f: (f["path"], f["line"], f["rule"]))
        for finding in random.Random(SEED).sample(pool, min(per_engine, len(pool))):
            known = labels.get(key(name, finding), {})
            rows.append({"engine": name, "path": finding["path"], "line": finding["line"], "rule": finding["rule"],
                         "label": known.get("label", ""), "reason": known.get("reason", ""),
                         "code": source_line(trees[name], finding)})
    with out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=LABEL_COLUMNS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"\nwrote {len(rows)} rows to label to {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", action="append", choices=["sglang", "vllm", "lmdeploy"], help="default: all")
    parser.add_argument("--latest", action="store_true", help="only the current release of each engine")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="profile")
    parser.add_argument("--labels", type=Path, default=LABELS)
    parser.add_argument("--sample", type=int, default=0, metavar="N", help="sample N findings per tree to label")
    parser.add_argument("--sample-out", type=Path, default=Path("engine_sample.tsv"))
    parser.add_argument("--keep", type=Path, metavar="DIR", help="unpack and write reports here (kept)")
    parser.add_argument("--settings", action="append", default=[], metavar="ENGINE=FILE",
                        help="add the file's [tool.graphready] keys (a deployment's assume-true/false facts) to that"
                             " engine's trees, and count what each fact left out")
    args = parser.parse_args(argv)
    corpus = [e for e in LATEST + ([] if args.latest else OLDER) if not args.engine or e.name in args.engine]
    try:
        extra = settings(args.settings)
        labels = load_labels(args.labels)
        with tempfile.TemporaryDirectory() as scratch:
            root = args.keep or Path(scratch)
            runs, trees = {}, {}
            for engine in corpus:
                tree, files, lines = unpack(engine, args.recipe, root / engine.requirement, extra.get(engine.name, ""))
                doc, seconds = lint(tree, root / f"{engine.requirement}.json", statistics=engine.name in extra)
                print_run(engine, doc, seconds, files, lines)
                runs[engine.requirement], trees[engine.requirement] = doc, tree
            shown = Counter(f["severity"] for doc in runs.values() for f in doc["findings"])
            print(f"\nall trees: {sum(shown.values())} findings shown ("
                  + ", ".join(f"{shown[s]} {s}" for s in ("error", "warning", "info")) + ")\n")
            precision(runs, labels)
            if args.sample:
                write_sample(runs, trees, args.sample, args.sample_out, labels)
    except BenchError as exc:
        print(f"engine_lint: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
