"""GraphDecoder grouping per mode and the `python -m dsv4.generate` command line, on CPU."""

from __future__ import annotations

import pytest

from dsv4.config import preset
from dsv4.generate import main
from dsv4.graphs import group_units
from dsv4.model import DSV4Model
from dsv4.synth import synthetic_weights
from dsv4_decode_helpers import one_thread  # noqa: F401


@pytest.fixture(scope="module")
def tiny_units():
    model = DSV4Model(preset("tiny"), synthetic_weights(preset("tiny"), "nvfp4", seed=1), max_len=128)
    (units,) = model.units().values()
    return units


def shape(segments):
    return [("graph" if s.capture else "eager", [u.name for u in s.units]) for s in segments]


def test_full_mode_is_one_graph_per_device(tiny_units):
    (segment,) = group_units(tiny_units, "full")
    assert segment.capture and segment.units == tiny_units


def test_layer_mode_is_one_graph_per_layer_plus_embed_and_head(tiny_units):
    segments = shape(group_units(tiny_units, "layer"))
    # the step's position values, computed once per device, ride in the device's first graph
    assert segments[0] == ("graph", ["positions", "embed"]) and segments[-1] == ("graph", ["head"])
    assert segments[1] == ("graph", ["layer0.pre", "layer0.attention", "layer0.post"])
    assert len(segments) == preset("tiny").num_hidden_layers + 2


def test_split_mode_runs_attention_eagerly_between_two_graphs(tiny_units):
    segments = shape(group_units(tiny_units, "split"))
    assert segments[1:4] == [("graph", ["layer0.pre"]), ("eager", ["layer0.attention"]), ("graph", ["layer0.post"])]
    assert sum(kind == "eager" for kind, _ in segments) == preset("tiny").num_hidden_layers


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def generated(out: str) -> list[int]:
    line = next(line for line in out.splitlines() if line.startswith("tokens:"))
    return [int(t) for t in line.split(":")[1].split(",")]


def test_generate_prints_the_greedy_tokens_and_the_time_per_token(capsys):
    code, out, _ = run_cli(capsys, "--synthetic", "tiny", "--prompt-ids", "0,5,7", "--max-new", "5", "--seed", "1")
    assert code == 0
    model = DSV4Model(preset("tiny"), synthetic_weights(preset("tiny"), "nvfp4", seed=1), max_len=128)
    token, expected = None, []
    for pos, prompt_token in enumerate([0, 5, 7]):
        token = int(model.step([prompt_token], pos)[0].argmax())
    for pos in range(3, 8):
        expected.append(token)
        token = int(model.step([token], pos)[0].argmax())
    assert generated(out) == expected
    assert "ms/token:" in out and "eager, CPU" in out


def test_generate_from_a_checkpoint_matches_the_same_synthetic_weights(capsys, official_ckpt):
    code, out, _ = run_cli(capsys, "--checkpoint", str(official_ckpt), "--prompt-ids", "3,4", "--max-new", "4")
    assert code == 0
    code, synthetic, _ = run_cli(capsys, "--synthetic", "tiny", "--format", "official", "--seed", "1",
                                 "--prompt-ids", "3,4", "--max-new", "4")
    assert code == 0 and generated(out) == generated(synthetic)


@pytest.mark.parametrize("args, message", [
    (["--synthetic", "tiny", "--graph", "full"], "no CUDA GPU"),
    (["--synthetic", "tiny", "--gpus", "2"], "no CUDA GPU"),
    (["--checkpoint", "/nonexistent/dsv4"], "no such config file"),
    (["--synthetic", "tiny", "--prompt-ids", "1,x"], "comma-separated integers"),
    (["--synthetic", "tiny", "--prompt-ids", "9999"], "outside the vocabulary"),
    (["--synthetic", "tiny", "--max-new", "300", "--max-len", "128"], "shorter than prompt"),
    (["--synthetic", "huge"], "unknown preset"),
])
def test_generate_rejects_bad_input_with_a_message(capsys, args, message):
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert message in err and "Traceback" not in err
