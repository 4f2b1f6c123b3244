"""Hot-path discovery: roots, chains through modules and objects, and what is deliberately cold."""

from __future__ import annotations

import textwrap

import pytest

from graphready.lint.scope.hotpath import _excluded


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def _hits(result) -> dict[tuple[str, int], list[str]]:
    return {(f.path, f.line): f.hot_chain for f in result.findings}


def test_config_roots_match_module_and_qualname_globs(lint_project):
    files = {
        "pkg/__init__.py": "",
        "pkg/layers/attn.py": _src("""
            class Attention:
                def forward(self, x):
                    return x.item()

                def load(self, x):
                    return x.item()
            """),
        "pkg/run.py": _src("""
            def step(x):
                return x.tolist()

            def warmup(x):
                return x.tolist()
            """),
    }
    result = lint_project(files, {"hot-paths": ["pkg.layers.*:*.forward", "pkg.run:step"]})
    assert _hits(result) == {
        ("pkg/layers/attn.py", 3): ["pkg.layers.attn:Attention.forward"],
        ("pkg/run.py", 2): ["pkg.run:step"],
    }


def test_decorator_and_comment_roots(lint_project):
    files = {"mod.py": _src("""
        from graphready import hot_path
        import graphready


        @hot_path
        def a(x):
            return x.item()


        @graphready.hot_path
        def b(x):
            return x.item()


        def c(x):  # graphready: hot
            return x.item()


        def cold(x):
            return x.item()
        """)}
    assert sorted(line for _, line in _hits(lint_project(files))) == [7, 12, 16]


def test_chain_through_imports_reexports_and_objects(lint_project):
    files = {
        "eng/__init__.py": "from eng.cache import KVCache\n",
        "eng/cache.py": _src("""
            import torch


            class KVCache:
                def append(self, kv: torch.Tensor) -> None:
                    n = kv.sum()
                    self.buf[:n] = kv

                def _helper(self, kv: torch.Tensor):
                    return kv.nonzero()
            """),
        "eng/mlp.py": _src("""
            import torch


            def gated(x: torch.Tensor) -> torch.Tensor:
                return torch.bincount(x)
            """),
        "eng/layer.py": _src("""
            from torch import nn

            from eng import KVCache
            from eng.mlp import gated


            class Base(nn.Module):
                def norm(self, x):
                    return x.cpu()


            class Layer(Base):
                def __init__(self):
                    super().__init__()
                    self.cache = KVCache()

                def forward(self, x):
                    self.cache.append(x)
                    return gated(self.norm(x))


            class Model(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.layers = nn.ModuleList([Layer() for _ in range(n)])

                def forward(self, x):
                    for layer in self.layers:
                        x = layer(x)
                    return x
            """),
        "eng/step.py": _src("""
            from graphready import hot_path

            from eng.layer import Model


            class Runner:
                def __init__(self):
                    self.model = Model(2).cuda().eval()

                @hot_path
                def step(self, x):
                    return self.model(x)
            """),
    }
    hits = _hits(lint_project(files))
    root = ["eng.step:Runner.step", "eng.layer:Model.forward", "eng.layer:Layer.forward"]
    assert hits[("eng/cache.py", 7)] == [*root, "eng.cache:KVCache.append"]
    assert hits[("eng/mlp.py", 5)] == [*root, "eng.mlp:gated"]
    assert hits[("eng/layer.py", 9)] == [*root, "eng.layer:Base.norm"]
    assert ("eng/cache.py", 10) not in hits  # _helper is never called from the step


def test_capture_body_and_make_graphed_callables_are_hot(lint_project):
    files = {"cap.py": _src("""
        import torch


        def layer(x):
            return x.item()


        def head(x):
            return x.tolist()


        def capture(g, s, x):
            with torch.cuda.graph(g, stream=s):
                y = layer(x)
            return y


        def graphed(x):
            return torch.cuda.make_graphed_callables(head, (x,))
        """)}
    hits = _hits(lint_project(files))
    assert hits[("cap.py", 5)] == ["cap:capture [graph capture]", "cap:layer"]
    assert hits[("cap.py", 9)] == ["cap:graphed [graph capture]", "cap:head"]


def test_debug_guards_capturing_branch_and_memoized_init_are_cold(lint_project):
    files = {"mod.py": _src("""
        import functools

        import torch
        from graphready import hot_path

        VERBOSE = 0
        _CACHE = {}


        @functools.lru_cache
        def compiled(n):
            return torch.zeros(n)


        def diagnostics(x):
            return x.item()


        class Layer:
            VERBOSE = False

            @hot_path
            def forward(self, x: torch.Tensor, key: int):
                if VERBOSE:
                    print(x.item())
                if self.VERBOSE:
                    diagnostics(x)
                if VERBOSE >= 2:
                    x.cpu()
                if torch.cuda.is_current_stream_capturing():
                    y = x * 2
                else:
                    y = x.tolist()
                if self._buf is None:
                    self._buf = torch.empty(16)
                if key not in _CACHE:
                    _CACHE[key] = torch.arange(key)
                return compiled(4) + y
        """)}
    result = lint_project(files, {"debug-guards": ["VERBOSE"]})
    # the one-time blocks are cold for every other rule; GR603 notes them (info: no capture reaches them)
    assert [(f.line, f.rule, f.severity.name.lower()) for f in result.findings] == [
        (30, "GR602", "info"), (34, "GR603", "info"), (36, "GR603", "info")]


def test_unreachable_load_code_is_not_checked(lint_project):
    files = {"load.py": _src("""
        import torch


        def load(path):
            state = torch.load(path)
            scale = state["scale"].item()
            torch.cuda.empty_cache()
            return torch.zeros(3) * scale
        """)}
    assert lint_project(files).findings == []


def test_parameters_every_hot_caller_fills_with_host_mirrors_are_host(lint_project):
    """vLLM's deep_gemm_utils: a helper `.item()`s a tensor that its only hot caller passes as
    `meta.expert_num_tokens_cpu`; torch ops on it stay on the host. One device caller makes it a sync."""
    helper = _src("""
        import torch

        def round_up_and_sum(counts: torch.Tensor, alignment: int) -> int:
            rounded = (counts.to(torch.int64) + (alignment - 1)) // alignment * alignment
            return torch.sum(rounded).item()
        """)
    host_caller = _src("""
        from pkg.util import round_up_and_sum

        class Experts:
            def apply(self, x, meta):
                return x[: round_up_and_sum(meta.expert_num_tokens_cpu, alignment=128)]
        """)
    device_caller = host_caller.replace("meta.expert_num_tokens_cpu", "meta.expert_num_tokens")
    table = {"hot-paths": ["pkg.moe:*.apply"]}
    quiet = lint_project({"pkg/__init__.py": "", "pkg/util.py": helper, "pkg/moe.py": host_caller}, table)
    assert quiet.findings == []
    loud = lint_project({"pkg/moe.py": device_caller}, table)
    assert [(f.path, f.line, f.rule) for f in loud.findings] == [("pkg/util.py", 5, "GR101")]


def test_what_only_an_untaken_fallback_calls_is_cold_and_chains_follow_calls_made(lint_project):
    """`if plan is None: plan = build_plan(...)` where every hot caller passes `plan`: build_plan is hot only
    through the calls that are made, and its chain shows one of those; `pages`, which one caller leaves
    out, keeps its fallback hot."""
    files = {"pkg/attn.py": _src("""
        import torch


        def build_plan(lens: torch.Tensor):
            return int(lens.sum().item())


        def page_count(lens: torch.Tensor):
            return int(lens.max().item())


        def decode(q: torch.Tensor, lens: torch.Tensor, plan=None, pages=None):
            if plan is None:
                plan = build_plan(lens)
            if pages is None:
                pages = page_count(lens)
            return q[:plan]


        class Backend:
            def forward(self, q: torch.Tensor, lens: torch.Tensor, meta):
                return decode(q, lens, plan=meta.plan, pages=meta.pages)


        def prepare(lens: torch.Tensor):
            return build_plan(lens)


        class Harness:
            def forward(self, q: torch.Tensor, lens: torch.Tensor, meta):
                return decode(q, lens, plan=prepare(lens))
        """)}
    hits = _hits(lint_project(files, {"hot-paths": ["pkg.attn:*.forward"]}))
    assert hits == {("pkg/attn.py", 5): ["pkg.attn:Harness.forward", "pkg.attn:prepare", "pkg.attn:build_plan"],
                    ("pkg/attn.py", 9): ["pkg.attn:Backend.forward", "pkg.attn:decode", "pkg.attn:page_count [if pages is None]"]}


def test_chains_show_the_branch_tests_their_calls_sit_under(lint_project):
    """A call made in a branch carries its test (the else of a comparison as the opposite comparison, an elif
    with the tests before it) and a call made on every step carries none, so a finding behind a configuration
    choice says which one."""
    files = {"pkg/rope.py": _src("""
        import torch


        class Rope(torch.nn.Module):
            def dynamic_update(self, positions: torch.Tensor):
                return int(positions.max().item())

            def default(self, positions: torch.Tensor):
                return positions.nonzero()

            def scaled(self, positions: torch.Tensor):
                return positions.tolist()

            def always(self, positions: torch.Tensor):
                torch.cuda.synchronize()

            @torch.no_grad()
            def forward(self, positions: torch.Tensor):
                self.always(positions)
                if "dynamic" in self.rope_type:
                    self.dynamic_update(positions)
                else:
                    self.default(positions)
                if self.mode == "a":
                    pass
                elif self.factor is not None:
                    if not self.cached:
                        self.scaled(positions)
                return positions
        """)}
    hits = _hits(lint_project(files, {"hot-paths": ["pkg.rope:Rope.forward"]}))
    root = "pkg.rope:Rope.forward"
    assert hits == {
        ("pkg/rope.py", 6): [root, "pkg.rope:Rope.dynamic_update [if 'dynamic' in self.rope_type]"],
        ("pkg/rope.py", 9): [root, "pkg.rope:Rope.default [if 'dynamic' not in self.rope_type]"],
        ("pkg/rope.py", 12): [root, "pkg.rope:Rope.scaled [if self.mode != 'a' and self.factor is not None"
                                    " and not self.cached]"],
        ("pkg/rope.py", 15): [root, "pkg.rope:Rope.always"],
    }


def test_a_capture_body_chain_shows_the_branch_its_call_sits_under(lint_project):
    files = {"pkg/run.py": _src("""
        import torch


        class Runner:
            def step(self, x: torch.Tensor):
                return x.nonzero()

            def capture(self, x: torch.Tensor):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    if self.use_step:
                        self.step(x)
                return graph
        """)}
    hits = _hits(lint_project(files, {}))
    assert hits[("pkg/run.py", 6)] == ["pkg.run:Runner.capture [graph capture]", "pkg.run:Runner.step [if self.use_step]"]


def test_a_long_branch_test_is_cut_in_the_chain(lint_project):
    files = {"pkg/run.py": _src("""
        import torch


        def helper(x: torch.Tensor):
            return x.nonzero()


        def step(x: torch.Tensor, config):
            if config.model_type in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3"):
                return helper(x)
            return x
        """)}
    step = _hits(lint_project(files, {"hot-paths": ["pkg.run:step"]}))[("pkg/run.py", 5)][1]
    assert step == "pkg.run:helper [if config.model_type in ('llama', 'mistral', 'qwen2', 'qwen3', 'gemma', 'g…]"
    assert len(step) - len("pkg.run:helper [if ]") == 72


@pytest.mark.parametrize(("patterns", "key", "dropped"), [
    (["pkg.models.*:Model", "!*:Model.forward"], "pkg.models.a:Model.forward", False),  # a later `!` entry keeps it
    (["!*:Model.forward", "pkg.models.*:Model"], "pkg.models.a:Model.forward", True),  # a later plain entry drops it
    (["pkg.models.*:Model", "!*:Model.forward"], "pkg.models.a:Model.load", True),
    (["pkg.models.*:Model"], "pkg.layers.a:Model.forward", False),  # another module: the entry does not apply
    (["*audio*", "!pkg.audio:Talker"], "pkg.audio:Talker.forward", False),  # a module-only entry covers all of it
    (["*audio*", "!pkg.audio:Talker"], "pkg.audio:Encoder.forward", True),
    (["pkg.*:*Vision*"], "pkg.m:Outer.VisionTower.forward", True),  # a class it is in, nested
    (["pkg.m"], "pkg.mx:Model.forward", False),  # a module glob matches the whole module name
])
def test_exclude_roots_entries_by_module_and_order(patterns, key, dropped):
    assert _excluded(patterns, key) is dropped
