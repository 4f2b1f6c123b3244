"""GR605: graph inputs a replay preparation refreshes only on the real rows of a padded batch
(scope/padding.py), shaped like the SGLang runners that shipped them: the EAGLE draft runner (0.5.2
`positions`, PR #10892; 0.5.10 `req_pool_indices`, PR #23037), the decode runner's SWA slots (0.5.11,
PR #24743) and the hybrid backend's Mamba track buffer (0.5.16, PR #32555)."""

from __future__ import annotations

import ast
import textwrap

from graphready.lint.scope.astwalk import walk_body
from graphready.lint.scope.padding import stale_padded_rows

# SGLang 0.5.2 eagle_draft_cuda_graph_runner.replay, cut down; {reset} goes in the pad branch
DRAFT_RUNNER = """
    import torch


    class EagleDraftGraphRunner:
        def replay(self, forward_batch):
            raw_bs = forward_batch.batch_size
            raw_num_token = raw_bs * self.num_tokens_per_bs
            bs = self.capture_bs[self.index_for(raw_bs)]
            if bs != raw_bs:
                self.seq_lens.fill_(self.seq_len_fill_value)
                self.out_cache_loc.zero_()
                {reset}
            num_tokens = bs * self.num_tokens_per_bs
            self.seq_lens[:raw_bs].copy_(forward_batch.seq_lens)
            self.out_cache_loc[: raw_num_token * self.steps].copy_(forward_batch.out_cache_loc)
            self.positions[:raw_num_token].copy_(forward_batch.positions)
            self.hidden_states[:raw_bs].copy_(forward_batch.hidden_states)
            if bs != raw_bs:
                forward_batch.batch_size = bs
                forward_batch.seq_lens = self.seq_lens[:bs]
                forward_batch.positions = self.positions[:num_tokens]
            self.graphs[bs].replay()
    """

# SGLang 0.5.11 DecodeInputBuffers.populate_from_forward_batch, cut down
POPULATE = """
    import torch


    def _grouped_foreach_copy_(dsts, srcs):
        torch._foreach_copy_(dsts, srcs)


    class DecodeInputBuffers:
        def populate_from_forward_batch(self, forward_batch, raw_bs, raw_num_token, bs, fill_value):
            if bs != raw_bs:
                self.seq_lens.fill_(fill_value)
                self.out_cache_loc.zero_()
                {reset}
            dsts = [
                self.input_ids[:raw_num_token],
                self.seq_lens[:raw_bs],
                self.out_cache_loc[:raw_num_token],
            ]
            srcs = [forward_batch.input_ids, forward_batch.seq_lens, forward_batch.out_cache_loc]
            if forward_batch.mrope_positions is not None:
                dsts.append(self.mrope_positions[:, :raw_num_token])
                srcs.append(forward_batch.mrope_positions)
            if self.out_cache_loc_swa is not None and forward_batch.out_cache_loc_swa is not None:
                dsts.append(self.out_cache_loc_swa[:raw_num_token])
                srcs.append(forward_batch.out_cache_loc_swa)
            _grouped_foreach_copy_(dsts, srcs)
    """

# SGLang 0.5.16 HybridLinearAttnBackend._replay_metadata, cut down; {bind} binds the track buffer
TRACK = """
    from dataclasses import dataclass

    import torch


    @dataclass
    class ForwardMetadata:
        mamba_track_indices: torch.Tensor | None = None


    class HybridLinearAttnBackend:
        def _replay_metadata(self, bs, req_pool_indices, mamba_track_indices=None):
            track_buf = None
            if mamba_track_indices is not None:
                {bind}
                track_buf[: len(mamba_track_indices)].copy_(mamba_track_indices)
            return ForwardMetadata(mamba_track_indices=track_buf)
    """


def _found(lint_project, template: str, **fill: str) -> list[tuple[int, str, str]]:
    source = textwrap.dedent(template)
    for key, value in fill.items():
        source = source.replace("{" + key + "}", value)
    result = lint_project({"pkg/runner.py": source})
    return [(f.line, f.severity.label, f.message) for f in result.findings if f.rule == "GR605"]


def _rows(source: str) -> list[tuple[int, str, str]]:
    """GR605 rows the index records for the one function in `source`."""
    function = next(n for n in ast.walk(ast.parse(textwrap.dedent(source))) if isinstance(n, ast.FunctionDef))
    return stale_padded_rows(walk_body(function.body))


def test_padded_positions_handed_on_but_not_reset_are_flagged_at_their_refresh(lint_project):
    found = _found(lint_project, DRAFT_RUNNER, reset="pass")
    assert [(line, severity) for line, severity, _ in found] == [(17, "warning")]
    message = found[0][2]
    assert "`positions`" in message and "pad branch at line 10" in message
    assert "resets `seq_lens`, `out_cache_loc`" in message and "line 22 hands its padded extent on" in message


def test_the_fix_resets_them_in_the_pad_branch(lint_project):  # SGLang 0.5.3
    assert _found(lint_project, DRAFT_RUNNER, reset="self.positions.zero_()") == []


def test_a_refresh_of_the_padded_extent_elsewhere_resets_them(lint_project):
    runner = DRAFT_RUNNER.replace("forward_batch.positions = self.positions[:num_tokens]",
                                  "self.positions[:num_tokens].copy_(forward_batch.padded_positions)")
    assert _found(lint_project, runner, reset="pass") == []


def test_stale_activations_handed_on_only_spoil_padded_outputs(lint_project):
    # hidden_states, refreshed on the real rows and never reset, is left alone even when handed on
    runner = DRAFT_RUNNER.replace("forward_batch.positions = self.positions[:num_tokens]",
                                  "forward_batch.hidden_states = self.hidden_states[:bs]")
    assert _found(lint_project, runner, reset="self.positions.zero_()") == []


def test_a_pad_branch_that_resets_nothing_states_no_policy(lint_project):
    runner = DRAFT_RUNNER.replace("self.seq_lens.fill_(self.seq_len_fill_value)", "pass") \
                         .replace("self.out_cache_loc.zero_()", "pass")
    assert _found(lint_project, runner, reset="pass") == []


def test_a_sibling_the_pad_branch_resets_marks_the_swa_slots(lint_project):
    found = _found(lint_project, POPULATE, reset="pass")
    assert [(line, severity) for line, severity, _ in found] == [(25, "warning")]
    assert "`out_cache_loc_swa`" in found[0][2] and "rows of `out_cache_loc`" in found[0][2]


def test_the_swa_fix_is_quiet(lint_project):  # SGLang 0.5.12
    assert _found(lint_project, POPULATE, reset="self.out_cache_loc_swa.zero_()") == []


def test_an_input_only_some_batches_carry_is_a_note():
    rows = _rows(DRAFT_RUNNER.replace("self.positions[:raw_num_token].copy_(forward_batch.positions)",
                                      "if forward_batch.positions is not None:\n"
                                      "                self.positions[:raw_num_token].copy_(forward_batch.positions)")
                 .replace("{reset}", "pass"))
    assert [(line, severity) for line, _, severity in rows] == [(18, "info")]


def test_pad_tests_in_other_spellings():
    for test in ("bs > raw_bs", "raw_bs < bs", "raw_bs != bs", "bs != raw_bs or forward_batch.positions is None"):
        source = DRAFT_RUNNER.replace("if bs != raw_bs:\n            self.seq_lens", f"if {test}:\n            self.seq_lens")
        assert [line for line, _, _ in _rows(source.replace("{reset}", "pass"))] == [17], test
    unnamed = DRAFT_RUNNER.replace("raw_bs", "count").replace("raw_num_token", "ntok").replace("{reset}", "pass")
    assert _rows(unnamed) == []  # no name says which size is the real one


def test_buffers_reached_through_a_local_and_copied_as_a_list():
    rows = _rows("""
        def replay(self, forward_batch):
            buffers = self.buffers
            raw_bs = forward_batch.batch_size
            bs = self.pad(raw_bs)
            if bs != raw_bs:
                buffers.seq_lens.fill_(1)
            copy_dsts = [buffers.seq_lens[:raw_bs], buffers.req_pool_indices[:raw_bs]]
            torch._foreach_copy_(copy_dsts, [forward_batch.seq_lens, forward_batch.req_pool_indices])
            forward_batch.req_pool_indices = buffers.req_pool_indices[:bs]
    """)
    assert [(line, message.split(" is ")[0]) for line, message, _ in rows] == [(8, "`buffers.req_pool_indices`")]


def test_a_track_buffer_handed_on_whole_is_flagged_where_it_is_bound(lint_project):
    found = _found(lint_project, TRACK, bind="track_buf = self.mamba_track_indices_buf")
    assert [(line, severity) for line, severity, _ in found] == [(16, "warning")]
    assert "line 17" in found[0][2] and "line 18 hands the whole buffer on" in found[0][2]


def test_handing_on_only_the_refreshed_rows_is_quiet(lint_project):  # SGLang 0.5.17
    assert _found(lint_project, TRACK, bind="track_buf = self.mamba_track_indices_buf[:bs]") == []


def test_a_buffer_given_to_a_call_that_may_reset_it_is_not_judged():
    source = TRACK.replace("{bind}", "track_buf = self.mamba_track_indices_buf") \
                  .replace("            return ForwardMetadata", "            pad_rest(track_buf, bs)\n"
                                                                   "            return ForwardMetadata")
    assert _rows(source) == []


def test_odd_code_is_judged_without_failing():
    assert _rows("""
        def f(self, x, raw_bs, bs):
            if bs != raw_bs:
                self.a.b.c.zero_()
                (p, *q), self.r[0] = x, 1
                del x
            self[:raw_bs].copy_(x)
            self.a()[:raw_bs].copy_(x)
            y = self.d
            y += 1
            y[...][:raw_bs] = 3
            self.e[raw_bs::2].fill_(0)
            self.f[:, :, :raw_bs].copy_(x)
            self.g[:len()].copy_(x)
            with open(x) as self.h, open(x) as (i, j):
                self.k[:raw_bs] += 1
            return lambda: self.k[:bs]
    """) == []
