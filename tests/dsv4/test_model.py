"""dsv4.model on CPU: the graph-ready step against the eager step, batching, state reset, bad input."""

from __future__ import annotations

import pytest
import torch

from dsv4.config import preset
from dsv4.graphs import GraphDecoder
from dsv4.model import DSV4Model
from dsv4.synth import synthetic_weights
from dsv4_decode_helpers import eager_run, graphable_run, one_thread, relative_errors  # noqa: F401

STEPS = 140  # crosses the HCA boundary at position 127 and 35 CSA boundaries


@pytest.fixture(scope="module")
def tiny_weights():
    return synthetic_weights(preset("tiny"), "nvfp4", seed=1)


@pytest.fixture(scope="module")
def tiny_model(tiny_weights):
    return DSV4Model(preset("tiny"), tiny_weights, max_len=256)


@pytest.fixture(scope="module")
def eager_trace(tiny_model):
    tiny_model.reset()
    return eager_run(tiny_model, STEPS)


def test_graph_ready_step_produces_the_eager_tokens(tiny_model, eager_trace):
    fed, eager = eager_trace
    tiny_model.reset()
    graphable = graphable_run(tiny_model, fed)
    assert [int(x.argmax()) for x in graphable] == [int(x.argmax()) for x in eager]
    assert relative_errors(graphable, eager).max() < 0.02


@pytest.mark.parametrize("mode", ["layer", "split", "full"])
def test_graph_decoder_without_graphs_matches_the_graph_ready_step(tiny_model, eager_trace, mode):
    fed, _ = eager_trace
    tiny_model.reset()
    direct = graphable_run(tiny_model, fed[:40])
    decoder = GraphDecoder(tiny_model, mode)
    decoder.capture()
    replayed = [decoder.step([token], pos)[0].clone() for pos, token in enumerate(fed[:40])]
    assert all(torch.equal(a, b) for a, b in zip(direct, replayed))


def test_greedy_stepping_reads_the_token_on_the_device(tiny_model, eager_trace):
    fed, eager = eager_trace
    decoder = GraphDecoder(tiny_model, "full")
    decoder.capture()
    decoder.step([fed[0]], 0)
    tokens = [int(tiny_model.next_token_buf[0])]
    for pos in range(1, 30):
        decoder.step_greedy(pos)
        tokens.append(int(tiny_model.next_token_buf[0]))
    # greedy from token fed[0]: the eager trace's prompt forces 5, 7 at positions 1, 2, so compare from a fresh run
    tiny_model.reset()
    expected, token = [], fed[0]
    for pos in range(30):
        token = int(tiny_model.step([token], pos)[0].argmax())
        expected.append(token)
    assert tokens == expected


def test_reset_replays_the_same_sequence(tiny_model, eager_trace):
    fed, eager = eager_trace
    tiny_model.reset()
    again = [tiny_model.step([t], p)[0] for p, t in enumerate(fed[:8])]
    assert all(torch.equal(a, b) for a, b in zip(again, eager[:8]))


def test_batch_of_two_decodes_each_sequence_independently(tiny_weights, tiny_model, eager_trace):
    fed, eager = eager_trace
    other = [(t * 7 + 3) % 512 for t in fed[:20]]
    tiny_model.reset()
    solo_other = [tiny_model.step([t], p)[0] for p, t in enumerate(other)]
    pair = DSV4Model(preset("tiny"), tiny_weights, max_len=256, batch=2)
    for pos in range(20):
        logits = pair.step([fed[pos], other[pos]], pos)
        assert torch.equal(logits[0].argmax(), eager[pos].argmax())
        assert torch.equal(logits[1].argmax(), solo_other[pos].argmax())
        assert (logits[0] - eager[pos]).abs().max() < 0.02 * eager[pos].abs().max()


def test_dequantizing_per_call_matches_resident_weights(tiny_weights, tiny_model):
    streaming = DSV4Model(preset("tiny"), tiny_weights, max_len=256, resident=False)
    tiny_model.reset()
    for pos, token in enumerate([0, 5, 7, 9, 11]):
        assert torch.equal(streaming.step([token], pos), tiny_model.step([token], pos))


def test_weight_bytes_count_only_the_selected_experts(tiny_weights):
    cfg = preset("tiny")
    model = DSV4Model(cfg, tiny_weights, max_len=128)
    experts = tiny_weights["layers.3.ffn.experts.w1"]
    per_expert = experts.nbytes // cfg.n_routed_experts
    assert model.layers[3].moe.bytes_read >= 3 * cfg.num_experts_per_tok * per_expert
    assert model.layers[3].moe.bytes_read < 3 * experts.nbytes


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_len=100), "multiple of 128"),
    (dict(max_len=1 << 20), "up to"),
    (dict(batch=0), "batch"),
])
def test_bad_model_arguments_are_rejected(tiny_weights, kwargs, message):
    with pytest.raises(ValueError, match=message):
        DSV4Model(preset("tiny"), tiny_weights, **kwargs)


def test_bad_step_inputs_are_rejected(tiny_model):
    with pytest.raises(ValueError, match="position"):
        tiny_model.step([1], 256)
    with pytest.raises(ValueError, match="token id"):
        tiny_model.step([1, 2], 0)
    with pytest.raises(ValueError, match="mode"):
        GraphDecoder(tiny_model, "whole")
    with pytest.raises(ValueError, match="CUDA"):
        GraphDecoder(tiny_model, "full", use_graphs=True)
