"""Run one GPU decode check in its own process (a failed CUDA capture poisons the process that tried it).

    python tests/dsv4/gpu_decode_worker.py --preset tiny --mode full --steps 320 --gpus 1

Decodes greedily with the eager step, then replays the same tokens through GraphDecoder without and with
CUDA graphs, and prints one JSON line: whether graph replay matched the no-graph run bit for bit at every
step, whether its greedy tokens equal the eager ones, and where the first mismatch was.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from dsv4.config import preset
from dsv4.graphs import GraphDecoder
from dsv4.model import DSV4Model
from dsv4.synth import synthetic_weights

PROMPT = (0, 5, 7)


def eager_tokens(model: DSV4Model, steps: int) -> tuple[list[int], list[int]]:
    """(token fed at each position, greedy token after each position) from the eager step."""
    fed, out, token = [], [], PROMPT[0]
    for pos in range(steps):
        nxt = int(model.step([token], pos)[0].argmax())
        fed.append(token)
        out.append(nxt)
        token = PROMPT[pos + 1] if pos + 1 < len(PROMPT) else nxt
    return fed, out


def decoder_logits(decoder: GraphDecoder, fed: list[int]) -> list[torch.Tensor]:
    decoder.capture()
    return [decoder.step([token], pos)[0].to("cpu", copy=True) for pos, token in enumerate(fed)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="tiny")
    p.add_argument("--mode", default="full")
    p.add_argument("--steps", type=int, default=320)
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--max-len", type=int, default=512)
    args = p.parse_args(argv)
    config = preset(args.preset)
    devices = [torch.device("cuda", i) for i in range(args.gpus)]
    weights = synthetic_weights(config, "nvfp4", device=devices[0], seed=1)
    model = DSV4Model(config, weights, devices, max_len=args.max_len)
    del weights
    fed, greedy = eager_tokens(model, args.steps)
    plain = decoder_logits(GraphDecoder(model, args.mode, use_graphs=False), fed)
    graphed_decoder = GraphDecoder(model, args.mode)
    graphed = decoder_logits(graphed_decoder, fed)
    mismatch = next((i for i, (a, b) in enumerate(zip(plain, graphed)) if not torch.equal(a, b)), None)
    replay_tokens = [int(x.argmax()) for x in graphed]
    token_mismatch = next((i for i, (a, b) in enumerate(zip(greedy, replay_tokens)) if a != b), None)
    print(json.dumps({
        "preset": args.preset, "mode": args.mode, "gpus": args.gpus, "steps": args.steps,
        "graphs": graphed_decoder.capture_count, "bitwise": mismatch is None, "first_mismatch": mismatch,
        "tokens_match": token_mismatch is None, "first_token_mismatch": token_mismatch,
        "devices": sorted({str(d) for d in model.layer_devices}),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
