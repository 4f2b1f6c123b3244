"""The scope model: exclude-roots, eager-only predicates of both polarities, profiles, and the
`--statistics` / JSON account of what was hot and why."""

from __future__ import annotations

import json

import pytest

from graphready.cli import main

MODEL = """import torch


class VisionTower(torch.nn.Module):
    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        n = int(pixels.sum())
        return pixels[:n]


class DecoderLayer(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.max().item()
"""


def _table(result):
    return sorted((f.path, f.line, f.rule) for f in result.findings)


def test_exclude_roots_leaves_matching_classes_cold_and_is_counted(lint_project):
    files = {"pkg/model.py": MODEL}
    both = lint_project(files, {"hot-paths": ["*:*.forward"]})
    assert {f.rule for f in both.findings} == {"GR101", "GR102"}
    result = lint_project(files, {"hot-paths": ["*:*.forward"], "exclude-roots": ["*:*Vision*"]})
    assert _table(result) == [("pkg/model.py", 12, "GR101")]
    assert result.scope["excluded_by_exclude_roots"] == 1
    assert result.scope["roots"] == {"hot-paths *:*.forward": 1}


def test_excluded_functions_are_not_entered_by_the_walk(lint_project):
    code = MODEL + """

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.visual = VisionTower()
        self.layer = DecoderLayer()

    def forward(self, x: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
        return self.layer(x) + self.visual(pixels)
"""
    result = lint_project({"pkg/model.py": code}, {"hot-paths": ["pkg.model:Model.forward"],
                                                    "exclude-roots": ["pkg.model:VisionTower"]})
    assert {f.rule for f in result.findings} == {"GR101"}


BRANCHES = """import torch


def get_is_capture_mode() -> bool:
    return False


def step(x: torch.Tensor, forward_batch, meta) -> torch.Tensor:
    if forward_batch.forward_mode.is_extend():
        x = x[: int(x.sum())]
    if not forward_batch.forward_mode.is_decode():
        x.item()
    if forward_batch.forward_mode.is_decode():
        y = x * 2
    else:
        y = x.nonzero()
    if get_is_capture_mode():
        z = y + 1
    else:
        z = y.tolist()
    if meta.num_prefills > 0 and x.dim() > 1:
        z = x.cpu()
    return x.max().item()  # the one captured hazard
"""


def test_eager_only_predicates_of_both_polarities(lint_project):
    config = {"hot-paths": ["pkg.step:step"], "eager-if": ["is_extend", "num_prefills"],
              "captured-if": ["is_decode", "get_is_capture_mode"]}
    result = lint_project({"pkg/step.py": BRANCHES}, config)
    assert _table(result) == [("pkg/step.py", 23, "GR101")]
    unguarded = lint_project({"pkg/step.py": BRANCHES}, {"hot-paths": ["pkg.step:step"]})
    assert len({f.line for f in unguarded.findings}) == 6


def test_debug_guards_is_an_alias_of_eager_if(lint_project):
    code = "import torch\n\n\ndef step(x: torch.Tensor, VERBOSE: bool):\n    if VERBOSE:\n        print(x)\n    return x\n"
    assert lint_project({"pkg/s.py": code}, {"hot-paths": ["pkg.s:step"], "debug-guards": ["VERBOSE"]}).findings == []


@pytest.fixture
def project(project_tree):
    return project_tree({"pkg/model.py": MODEL})


@pytest.mark.parametrize(("table", "message"), [
    ('profile = "sglangg"\n', "unknown profile 'sglangg' (did you mean 'sglang'?)"),
    ('profile = 3\n', "profile must be a string"),
    ('exclude-roots = ["pkg:"]\n', "exclude-roots entry 'pkg:'"),
    ('not-compiled = ["pkg:"]\n', "not-compiled entry 'pkg:'"),
    ('eager-if = ["forward_mode.is_extend()"]\n', "must be a bare name"),
    ('captured-iff = ["is_decode"]\n', "did you mean 'captured-if'?"),
])
def test_bad_scope_config_is_exit_2_with_a_message(project, capsys, table, message):
    assert main(["lint", str(project(table)), "--no-cache"]) == 2
    assert message in capsys.readouterr().err


def test_statistics_and_json_summary_say_what_was_hot(project, capsys):
    root = project('hot-paths = ["*:*.forward"]\nexclude-roots = ["*:VisionTower"]\n')
    assert main(["lint", str(root), "--no-cache", "--statistics"]) == 1
    out = capsys.readouterr().out
    assert "Hot scope" in out and "root: hot-paths *:*.forward" in out and "left cold by exclude-roots" in out
    assert main(["lint", str(root), "--no-cache", "--format", "json"]) == 1
    scope = json.loads(capsys.readouterr().out)["summary"]["scope"]
    assert scope == {"hot_functions": 1, "roots": {"hot-paths *:*.forward": 1}, "reached_by_calls": 0,
                     "excluded_by_exclude_roots": 1, "roots_of_classes_never_built": 0}


@pytest.mark.parametrize("profile", ["sglang", "vllm"])
def test_profiles_load_and_add_the_projects_own_lists(project, capsys, profile):
    root = project(f'profile = "{profile}"\nhot-paths = ["pkg.model:DecoderLayer.forward"]\n')
    assert main(["lint", str(root), "--no-cache", "--format", "json"]) == 1
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["profile"] == profile
    assert summary["scope"]["roots"] == {"hot-paths pkg.model:DecoderLayer.forward": 1}


# vLLM 0.33 fused_moe: a reduce implementation whose `apply` matches the profile's `*.apply` roots, built
# only by a prepare/finalize class that only an XPU opt-in path builds
NEVER_BUILT = {
    "pkg/reduce.py": """import torch


class NaiveBatchedReduce:
    def apply(self, out: torch.Tensor, hits: torch.Tensor) -> torch.Tensor:
        e_idx, t_idx = hits.nonzero(as_tuple=True)
        return out[e_idx]


class ContiguousReduce:
    def apply(self, out: torch.Tensor, hits: torch.Tensor) -> torch.Tensor:
        return out * hits
""",
    "pkg/batched.py": """from pkg.reduce import NaiveBatchedReduce


class BatchedPrepareFinalize:
    def finalize(self, out, hits):
        if isinstance(out, NaiveBatchedReduce):
            return out
        return NaiveBatchedReduce().apply(out, hits)
""",
    "pkg/select.py": """from pkg.batched import BatchedPrepareFinalize
from pkg.reduce import ContiguousReduce
from vllm.platforms import current_platform


def make_prepare_finalize(backend: str):
    if current_platform.is_xpu() and backend == "batched_triton":
        return BatchedPrepareFinalize()
    return ContiguousReduce()
""",
}
NEVER_BUILT_CONFIG = {"hot-paths": ["*:*.apply"], "eager-if": ["is_xpu"], "gpu-capability": 90}


def test_roots_of_classes_built_only_for_another_platform_stay_cold(lint_project):
    result = lint_project(NEVER_BUILT, NEVER_BUILT_CONFIG)
    assert _table(result) == []
    assert result.scope["roots_of_classes_never_built"] == 1
    assert result.scope["roots"] == {"hot-paths *:*.apply": 1}  # ContiguousReduce.apply, built on every GPU


@pytest.mark.parametrize(("path", "text", "replacement"), [
    ("pkg/select.py", "current_platform.is_xpu() and ", ""),  # built on every platform
    ("pkg/select.py", "current_platform.is_xpu()", "current_platform.has_device_capability(90)"),  # this GPU
    ("pkg/batched.py", "class BatchedPrepareFinalize:", "REGISTRY = {'naive': NaiveBatchedReduce}\n\n\nclass BatchedPrepareFinalize:"),
])
def test_a_class_built_on_this_gpu_or_used_otherwise_keeps_its_roots(lint_project, path, text, replacement):
    files = dict(NEVER_BUILT)
    assert text in files[path]
    files[path] = files[path].replace(text, replacement)
    result = lint_project(files, NEVER_BUILT_CONFIG)
    assert _table(result) == [("pkg/reduce.py", 6, "GR201")]
    assert result.scope["roots_of_classes_never_built"] == 0


def test_a_capability_this_gpu_lacks_leaves_the_class_unbuilt(lint_project):
    files = dict(NEVER_BUILT)
    files["pkg/select.py"] = files["pkg/select.py"].replace("current_platform.is_xpu()",
                                                            "current_platform.has_device_capability(100)")
    assert _table(lint_project(files, NEVER_BUILT_CONFIG)) == []


def test_a_class_built_in_a_lambda_is_built(lint_project):
    """`make_layers(n, lambda prefix: Layer(...))`, the engines' layer factory idiom, builds the class."""
    files = dict(NEVER_BUILT)
    files["pkg/select.py"] += '''

def make_layers(n, factory):
    return [factory(i) for i in range(n)]


def build_reduces(n: int):
    return make_layers(n, lambda i: BatchedPrepareFinalize())
'''
    assert _table(lint_project(files, NEVER_BUILT_CONFIG)) == [("pkg/reduce.py", 6, "GR201")]


# vLLM 0.15.1 fused_moe: the same batched prepare/finalize, which nothing in the package builds, imports or
# names (tests build it): an orphan, and so is what only it builds
ORPHAN = dict(NEVER_BUILT, **{"pkg/select.py": """from pkg.reduce import ContiguousReduce


def make_prepare_finalize(backend: str):
    return ContiguousReduce()
"""})


def test_a_class_nothing_names_is_never_built_nor_what_only_it_builds(lint_project):
    result = lint_project(ORPHAN, NEVER_BUILT_CONFIG)
    assert _table(result) == []
    assert result.scope["roots_of_classes_never_built"] == 1


@pytest.mark.parametrize("mention", [
    "from pkg.batched import BatchedPrepareFinalize\n",  # imported: built by code outside the linted paths
    "REGISTRY = {'batched': 'pkg.batched.BatchedPrepareFinalize'}\n",  # a registry finds it by name
    "ARCHS = ('batched', 'BatchedPrepareFinalize')\n",
])
def test_a_class_imported_or_named_in_a_string_may_be_built(lint_project, mention):
    files = dict(ORPHAN, **{"pkg/select.py": mention + ORPHAN["pkg/select.py"]})
    assert _table(lint_project(files, NEVER_BUILT_CONFIG)) == [("pkg/reduce.py", 6, "GR201")]


def test_an_export_in_dunder_all_builds_nothing(lint_project):
    files = dict(NEVER_BUILT, **{"pkg/batched.py": NEVER_BUILT["pkg/batched.py"]
                                 + '\n__all__ = ["BatchedPrepareFinalize", "NaiveBatchedReduce"]\n'})
    assert _table(lint_project(files, NEVER_BUILT_CONFIG)) == []


def test_an_entry_class_nothing_names_is_built_from_the_checkpoint(lint_project):
    """A pattern-matched class (a model a server builds from the checkpoint's `architectures`) needs no use."""
    config = dict(NEVER_BUILT_CONFIG, **{"hot-paths": ["*:*.apply", "*:*.finalize"]})
    assert _table(lint_project(ORPHAN, config)) == [("pkg/reduce.py", 6, "GR201")]


def test_a_method_named_outright_is_a_root_even_if_never_built(lint_project):
    config = dict(NEVER_BUILT_CONFIG, **{"hot-paths": ["*:*.apply", "pkg.reduce:NaiveBatchedReduce.apply"]})
    assert _table(lint_project(NEVER_BUILT, config)) == [("pkg/reduce.py", 6, "GR201")]
