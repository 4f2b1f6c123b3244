"""Property: lint never fails on valid Python, whatever its shape, with every function hot.

Two sources of code. hypothesmith writes arbitrary valid modules (linted as they are and again as the
body of a hot function), which reaches odd corners of the grammar but almost never the shapes engines
are made of; issue 26's crash was an ordinary device test with an `if` nested under it. So a corpus of
small real-engine idioms (device tests, walrus, `match`, decorators, comprehensions over tensors,
try/except*/finally, with, async, lambdas, star-args, global/nonlocal, 3.12 type aliases) is nested in
every compound statement kind, all at once and then as hypothesis draws them. Passing means no
exception out of lint and no GR002 (graphready failed) or GR001 (graphready could not parse valid code)
finding. Bounded to run in well under a minute.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")  # dev extras: a machine without them skips this module
hypothesmith = pytest.importorskip("hypothesmith")

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from graphready.config import parse_table  # noqa: E402
from graphready.lint.engine import lint  # noqa: E402

HOT_HEADER = "import torch\nfrom graphready import hot_path\n\n\n@hot_path\ndef step(x: torch.Tensor, y):\n"


def _compiles(source: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # `1()` and the like compile, with a warning
            compile(source, "probe.py", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _as_hot_body(source: str) -> str | None:
    body = HOT_HEADER + textwrap.indent(source, "    ") + "\n    pass\n"
    return body if _compiles(body) else None  # `from __future__` and the like only work at module level


def _lint_every_function_hot(files: dict[str, str]):
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory).resolve()
        for name, source in files.items():
            (root / name).write_text(source, encoding="utf-8")
        config = parse_table({}, root, None)
        config.hot_paths = ["*:*"]  # every function hot, as a profile root (a file may define none)
        return lint(config, [root], use_cache=False)


@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # hypothesmith compiles what it generates
@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(source=hypothesmith.from_grammar())
def test_lint_never_raises_on_generated_python(source):
    files = {"generated.py": source}
    body = _as_hot_body(source)
    if body is not None:
        files["hot.py"] = body
    result = _lint_every_function_hot(files)
    assert result.files == len(files)
    assert not result.failures, [f.one_line() for f in result.failures]


# -- real-engine idioms ----------------------------------------------------------------------------------
# Statement blocks that run inside a hot `forward(self, x, y, *args, **kwargs)` of a module with a buffer
# `w`, a cache, a graph and a lock; each compiles on its own at any depth (no bare `return`/`yield`, loops
# carry their own `break`).
IDIOMS = {
    "device-test-nested": """
        if self.w.device != x.device:
            if x.dim() == 2:
                self.w = self.w.to(x.device)
            elif x.dim() == 3:
                self.w: torch.Tensor = self.w.to(x.device, x.dtype)
            else:
                for _ in range(1):
                    self.w = self.w.to(x.device)
        if x.device != self.w.device: self.w = self.w.cuda(); x = x.to(self.w.device)
        """,
    "walrus": """
        if (n := x.shape[0]) > 1:
            x = x[: n - 1]
        while (k := int(x.sum())) > 0:
            break
        picked = [t for t in x.unbind(0) if (s := t.sum()).item() > 0]
        """,
    "comprehensions-over-tensors": """
        halves = [t * 2 for t in x.unbind(0) if t.sum() > 0]
        table = {i: t.item() for i, t in enumerate(x)}
        seen = {t.shape for t in y}
        total = sum(t.sum() for t in x.split(2))
        grid = [[a * b for a in x] for b in y if b.any()]
        """,
    "star-args": """
        out = torch.cat([*args, x], dim=0)
        first, *rest = x.split(1)
        self.proj(*args, **kwargs)
        merged = {**kwargs, "x": x}
        print(*x.tolist(), sep=",")
        """,
    "assignment-kinds": """
        self.t += 1
        self.cache[:, 0] = x
        a = b = x.clone()
        (c, d), e = (x, y), x
        self.cache = torch.cat([self.cache, x])
        self.graph_in.copy_(x)
        x.data = y
        del a, self.tmp
        """,
    "host-syncs-and-shapes": """
        flat = x.nonzero()
        masked = x[x > 0]
        z = x if x.sum() > 0 else y
        assert x.any(), f"{x.shape} {x.sum():.3f} {y!r}"
        idx = x[int(y.max()): x.numel():2, ..., None]
        torch.cuda.synchronize()
        if 0 < x.sum() < 1 and not y.all() or x.max():
            pass
        """,
    "lambdas": """
        act = lambda t, *a, k=1, **kw: t.relu() * k
        pick = (lambda: x.item())()
        keyed = sorted(args, key=lambda t: t.numel())
        self.fn = torch.compile(lambda t: t * 2)
        """,
    "scopes": """
        def tick():
            global STEP
            STEP += 1
            return STEP

        count = tick()

        def bump(t):
            nonlocal count
            count += 1
            return t + count

        x = bump(x)
        """,
    "capture": """
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.graph(g, stream=s):
            self.out = self.proj(self.graph_in)
        g.replay()
        torch.cuda.set_device(x.device)
        """,
    "raise-and-assert": """
        if x.dim() > 4:
            raise ValueError(f"bad rank {x.dim()}") from None
        assert isinstance(y, torch.Tensor) and y.is_cuda
        """,
    "match": """
        match x.dim():
            case 1 | 2:
                x = x.unsqueeze(0)
            case int(n) if n > 3:
                x = x.flatten(0, n - 3)
            case _:
                pass
        match kwargs:
            case {"mode": "bf16", **extra}:
                x = x.to(torch.bfloat16)
            case [first, *others]:
                x = first
            case torch.Size([b, s]):
                x = x.view(b, s)
        """,
}
if sys.version_info >= (3, 12):  # PEP 695: only a 3.12 parser reads it
    IDIOMS["type-aliases"] = """
        type Pair = tuple[torch.Tensor, torch.Tensor]

        def swap[T](pair: tuple[T, T]) -> tuple[T, T]:
            return pair[1], pair[0]

        x, y = swap((x, y))
        """

# Each wraps a block in one compound statement kind, so an idiom sits at any depth: `{b}` is the block one
# level below the line before it, `    {b}` two levels.
WRAPPERS = {
    "if-elif-else": "if self.w.device != x.device:\n{b}\nelif x.dim():\n{b}\nelse:\n{b}",
    "for-else": "for i, t in enumerate(x.unbind(0)):\n{b}\nelse:\n{b}",
    "while": "while x.numel() > 0:\n{b}\n    break",
    "with": "with torch.no_grad(), torch.cuda.stream(torch.cuda.Stream()) as s:\n{b}",
    "try-except-else-finally": "try:\n{b}\nexcept (RuntimeError, ValueError) as exc:\n{b}\nelse:\n{b}\nfinally:\n{b}",
    "try-except-star": "try:\n{b}\nexcept* RuntimeError:\n    pass",
    "match": "match x.dim():\n    case 2:\n    {b}\n    case _:\n    {b}",
    "nested-def": "def inner(x, y, *args, **kwargs):\n{b}\n    return x\nx = inner(x, y)",
    "decorated-def": ("@torch.no_grad()\n@functools.wraps(self.proj)\ndef inner(x, y=None, *args, **kwargs):\n{b}\n"
                      "    return x"),
    "async-def": ("async def inner(x, y, *args, **kwargs):\n    async with self.lock:\n    {b}\n"
                  "    async for t in self.stream:\n    {b}\n    await self.event.wait()"),
    "local-class": "class Local(torch.nn.Module):\n    def forward(self, x, y, *args, **kwargs):\n    {b}",
}

MODULE = '''\
import functools

import torch
from graphready import hot_path

STEP = 0
LOCK = None


class Engine(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("w", torch.zeros(dim), persistent=False)
        self.cache = torch.zeros(1, dim)
        self.graph_in = torch.zeros(dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.t = torch.zeros((), dtype=torch.long)

    @functools.lru_cache(maxsize=None)
    def describe(self) -> str:
        return "engine"

    @property
    def device(self) -> torch.device:
        return self.w.device

    @staticmethod
    @torch.compile(dynamic=False)
    def fused(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    async def serve(self, x: torch.Tensor):
        async with self.lock:
            yield await self.step_async(x)

    def forward(self, x, y, *args, **kwargs):
{body}
        return x
'''


def _block(source: str, depth: int) -> str:
    return textwrap.indent(textwrap.dedent(source).strip("\n"), "    " * depth)


def _wrapped(wrappers: list[str], idioms: list[str]) -> str:
    """The idioms' blocks nested in `wrappers`, outermost first, as statements at depth 0."""
    code = "\n".join(_block(IDIOMS[name], 0) for name in idioms)
    for name in reversed(wrappers):  # `{b}` after four spaces is two levels deeper than the line holding it
        code = WRAPPERS[name].replace("    {b}", _block(code, 2)).replace("{b}", _block(code, 1))
    return code


def _module(blocks: list[str]) -> str:
    body = "\n".join(_block(block, 2) for block in blocks)
    return MODULE.format(body=body)


def _assert_lints_cleanly(files: dict[str, str]) -> None:
    for name, source in files.items():
        assert _compiles(source), f"the test built invalid Python in {name}:\n{source}"
    result = _lint_every_function_hot(files)
    assert result.files == len(files)
    broken = [f"{f.path}:{f.line}: {f.rule} {f.message}" for f in result.findings if f.rule in ("GR001", "GR002")]
    assert not broken, "\n".join(broken)
    assert not result.failures


def test_every_idiom_in_every_compound_statement():
    """Each idiom alone, and inside each wrapper, and inside each wrapper nested in each other one."""
    files = {"flat.py": _module([_wrapped([], list(IDIOMS))])}
    for name in WRAPPERS:
        files[f"in_{name.replace('-', '_')}.py"] = _module([_wrapped([name], list(IDIOMS))])
    for outer in WRAPPERS:
        files[f"nest_{outer.replace('-', '_')}.py"] = _module(
            [_wrapped([outer, inner], [idiom]) for inner, idiom in zip(WRAPPERS, IDIOMS)])
    _assert_lints_cleanly(files)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(blocks=st.lists(st.tuples(st.lists(st.sampled_from(sorted(WRAPPERS)), max_size=3),
                                 st.lists(st.sampled_from(sorted(IDIOMS)), min_size=1, max_size=4)),
                       min_size=1, max_size=4))
def test_idioms_nested_as_hypothesis_draws_them(blocks):
    source = _module([_wrapped(wrappers, idioms) for wrappers, idioms in blocks])
    assume(_compiles(source))  # an idiom twice in one function may re-declare `global STEP` after a use
    _assert_lints_cleanly({"drawn.py": source})
