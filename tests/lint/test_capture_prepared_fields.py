"""What a graph's capture preparation sets, as the captured code sees it (scope/graphprep.py).

A metadata field the capture preparation fills with a device tensor is a device tensor in the captured
code, whatever its annotation says (vLLM 0.6.6: `encoder_seq_lens: Optional[List[int]]`, a CUDA tensor at
capture, read with Python's `max` by mllama: capture failed, issues #9341 #10416, PR #14917); fields the
capture preparation may have set positionally through another module's class are not judged (GR604)."""

from __future__ import annotations

import textwrap

METADATA = """
    from dataclasses import dataclass
    from typing import List, Optional

    import torch


    @dataclass
    class AttentionMetadata:
        num_decode_tokens: int
        encoder_seq_lens: Optional[List[int]] = None


    class CommonAttentionState:
        def graph_capture_get_metadata_for_batch(self, batch_size: int) -> AttentionMetadata:
            attn_metadata = AttentionMetadata(num_decode_tokens=batch_size)
            self._update_captured_metadata_for_enc_dec_model(batch_size, attn_metadata)
            return attn_metadata

        def _update_captured_metadata_for_enc_dec_model(self, batch_size: int, attn_metadata) -> None:
            attn_metadata.encoder_seq_lens = {value}
    """

MODEL = """
    import torch
    from torch import nn

    from pkg.metadata import AttentionMetadata


    class MllamaForConditionalGeneration(nn.Module):
        def forward(self, hidden: torch.Tensor, attn_metadata: AttentionMetadata) -> torch.Tensor:
            skip_cross_attention = max(attn_metadata.encoder_seq_lens) == 0
            return hidden if skip_cross_attention else hidden * 2
    """


def _lint(lint_project, value: str) -> list[tuple[str, int]]:
    files = {"pkg/metadata.py": textwrap.dedent(METADATA).replace("{value}", value),
             "pkg/mllama.py": textwrap.dedent(MODEL)}
    result = lint_project(files, {"hot-paths": ["pkg.mllama:*.forward"]})
    return [(f.rule, f.line) for f in result.findings if f.path.endswith("mllama.py")]


def test_a_field_made_a_cuda_tensor_at_capture_is_one_in_the_captured_forward(lint_project):
    assert _lint(lint_project, "torch.full((batch_size,), 1, dtype=torch.int).cuda()") == [("GR102", 10)]
    assert _lint(lint_project, "torch.ones(batch_size, dtype=torch.int, device=self.device)") == [("GR102", 10)]


def test_a_host_list_at_capture_stays_a_host_list(lint_project):
    assert _lint(lint_project, "[1] * batch_size") == []
    assert _lint(lint_project, "torch.ones(batch_size).to(torch.int32)") == []  # a dtype, not a device


def test_metadata_built_positionally_from_another_module_is_not_judged(lint_project):
    """GR604 cannot name the fields of `backends.Metadata(a, b)`: it stays silent rather than guess."""
    backend = textwrap.dedent("""
        import torch

        from pkg import backends


        class Backend:
            def init_forward_metadata_capture_cuda_graph(self, bs: int):
                self.forward_metadata = backends.Metadata(self.seqlens[:bs], self.splits[: bs + 1])

            def init_forward_metadata_replay_cuda_graph(self, bs: int):
                self.forward_metadata.num_splits = self.splits[: bs + 1]

            def forward_decode(self, q: torch.Tensor) -> torch.Tensor:
                return q * self.forward_metadata.num_splits[:-1].unsqueeze(-1)
        """)
    metadata = "class Metadata:\n    def __init__(self, seqlens, num_splits):\n        self.num_splits = num_splits\n"
    result = lint_project({"pkg/backend.py": backend, "pkg/backends.py": metadata},
                          {"hot-paths": ["pkg.backend:*.forward_decode"]})
    assert [f.rule for f in result.findings] == []
