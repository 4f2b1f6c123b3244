"""What a helper in another module returns: a freed graph input (GR601) only if the graph can read it, a
pageable upload (GR302) only if it is not pinned."""

from __future__ import annotations

import textwrap

# vLLM 0.15.1 v1/worker/gpu: dp_utils.make_num_tokens_across_dp and spec_decode/eagle_cudagraph.capture_graph
HELPERS = """
    import torch


    def make_num_tokens_across_dp(dp_size: int, num_tokens: int) -> torch.Tensor | None:
        if dp_size == 1:
            return None
        return torch.full((dp_size,), num_tokens, dtype=torch.int32, device="cpu")


    def make_positions(num_tokens: int, device: torch.device) -> torch.Tensor:
        return torch.arange(num_tokens, device=device)
    """

CAPTURE = """
    import torch

    from pkg.helpers import make_num_tokens_across_dp, make_positions


    class EagleCudaGraphManager:
        def __init__(self, dp_size: int, pool, device: torch.device):
            self.dp_size, self.pool, self.device = dp_size, pool, device
            self.graphs = {}

        def capture_graph(self, num_tokens: int, generate_fn) -> None:
            value = {value}
            generate_fn(num_tokens, value)  # warm-up
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, self.pool):
                generate_fn(num_tokens, value)
            self.graphs[num_tokens] = graph
    """


def _capture(lint_project, value: str):
    files = {"pkg/helpers.py": textwrap.dedent(HELPERS),
             "pkg/eagle.py": textwrap.dedent(CAPTURE).replace("{value}", value)}
    return [(f.rule, f.line) for f in lint_project(files, {"one-gpu-per-process": True}).findings]


def test_a_cpu_tensor_from_a_helper_is_not_a_freed_graph_input(lint_project):
    assert _capture(lint_project, "make_num_tokens_across_dp(self.dp_size, num_tokens)") == []


def test_a_device_tensor_from_a_helper_still_is(lint_project):
    assert _capture(lint_project, "make_positions(num_tokens, self.device)") == [("GR601", 17)]  # the read inside the capture


def test_a_pageable_tensor_from_a_helper_is_a_pageable_upload_and_a_pinned_one_is_not(lint_project):
    """GR302 sees through the helper too: vLLM's `np_to_pinned_tensor`-style helpers stay quiet."""
    helpers = textwrap.dedent("""
        import torch


        def host_lens(n: int) -> torch.Tensor:
            return torch.full((n,), 1, dtype=torch.int32, device="cpu")


        def pinned_lens(n: int) -> torch.Tensor:
            return torch.full((n,), 1, dtype=torch.int32, device="cpu", pin_memory=True)
        """)
    step = textwrap.dedent("""
        import torch
        from graphready import hot_path

        from pkg.helpers import {helper}


        @hot_path
        def step(x: torch.Tensor) -> torch.Tensor:
            return x + {helper}(x.shape[0]).to(x.device, non_blocking=True)
        """)
    for helper, want in (("host_lens", [("GR302", 10)]), ("pinned_lens", [])):
        files = {"pkg/helpers.py": helpers, "pkg/step.py": step.replace("{helper}", helper)}
        assert [(f.rule, f.line) for f in lint_project(files).findings] == want, helper
