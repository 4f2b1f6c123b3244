"""Lazy growth of a workspace that outlives the call (GR307): FlashInfer's cuDNN GEMM paths grew the shared
workspace with `resize_` and rebuilt the cached one bigger, freeing storage earlier captures point at
(flashinfer-ai/flashinfer#4398, PRs #4399 and #4553)."""

from __future__ import annotations

import textwrap

# flashinfer/gemm/gemm_base.py and utils.py, cut down
GEMM = """
    import torch
    from graphready import hot_path

    _cache_buf = {}
    _retired_cache_buf = []


    def _get_cache_buf(name: str, nbytes: int, device: torch.device) -> torch.Tensor:
        key = (name, device)
        buf = _cache_buf.get(key)
        CACHE
        return buf


    @hot_path
    def execute_cudnn_gemm(graph, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, workspace_buffer: torch.Tensor):
        workspace_size = graph.get_workspace_size()
        GROWTH
        graph.execute(a, b, out, workspace_buffer)
        return out


    @hot_path
    def bmm_fp8(graph, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        workspace_buffer = _get_cache_buf("cudnn_gemm_workspace", 32 * 1024 * 1024, a.device)
        return execute_cudnn_gemm(graph, a, b, out, workspace_buffer)
    """

FILL_ONCE = """if buf is None:
            buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
            _cache_buf[key] = buf"""
REBUILD = """if buf is None or buf.size(0) < nbytes:
            buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
            _cache_buf[key] = buf"""
RETIRE = """if buf is None or buf.size(0) < nbytes:
            if buf is not None:
                _retired_cache_buf.append(buf)
            buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
            _cache_buf[key] = buf"""
RESIZE = """if workspace_buffer.numel() < workspace_size:
            workspace_buffer.resize_(workspace_size)"""
REFUSE = """if workspace_buffer.numel() < workspace_size:
            raise ValueError("the cuDNN plan needs more workspace than was allocated")"""
SCRATCH = """scratch = torch.empty(0, dtype=torch.uint8, device=a.device)
        if scratch.numel() < workspace_size:
            scratch.resize_(workspace_size)"""


def _findings(lint_project, cache: str, growth: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(GEMM).replace("CACHE", cache).replace("GROWTH", growth)
    return [(f.rule, f.line) for f in lint_project({"pkg/gemm.py": source}, select=["GR3"]).findings]


def test_growing_a_handed_in_workspace_in_place_frees_what_graphs_point_at(lint_project):
    assert _findings(lint_project, FILL_ONCE, RESIZE) == [("GR307", 22)]


def test_rebuilding_the_cached_workspace_bigger_drops_the_old_one(lint_project):
    """`if buf is None or buf.size(0) < nbytes:` is growth, not one-time init: the block is hot and runs again."""
    assert _findings(lint_project, REBUILD, REFUSE) == [("GR307", 14)]


def test_a_workspace_filled_once_and_never_grown_is_quiet(lint_project):
    """Clean twin: `if buf is None:` builds it once (one-time init, GR603's business), and a plan needing more
    is refused."""
    assert _findings(lint_project, FILL_ONCE, REFUSE) == []


def test_retiring_the_old_workspace_before_replacing_it_is_quiet(lint_project):
    """PR #4399's fix: the grown-over buffer is kept alive in a registry, so captured graphs keep valid memory."""
    assert _findings(lint_project, RETIRE, REFUSE) == []


def test_a_tensor_the_step_makes_itself_may_grow(lint_project):
    assert _findings(lint_project, FILL_ONCE, SCRATCH) == []
