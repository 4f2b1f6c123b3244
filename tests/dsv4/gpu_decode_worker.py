"""Run one GPU decode check in its own process (a failed CUDA capture poisons the process that tried it).

    python tests/dsv4/gpu_decode_worker.py --preset tiny --mode full --steps 320 --gpus 1 [--mtp]

Decodes greedily with the eager step, then replays the same tokens through GraphDecoder without and with
CUDA graphs, and prints one JSON line: whether graph replay matched the no-graph run bit for bit at every
step, whether its greedy tokens equal the eager ones, and where the first mismatch was. With `--mtp` it
decodes speculatively (MTP drafts, two-token verification) through GraphDecoder without and with graphs and
compares every step's main and MTP logits and next inputs bit for bit.
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


def speculative_trace(decoder: GraphDecoder, steps: int) -> tuple[list[torch.Tensor], list[int], float]:
    """(per step: main logits, MTP logits, next token/draft/position; decided tokens; acceptance rate)."""
    decoder.capture()
    model, spec = decoder.model, decoder.model.spec
    decoder.step(PROMPT[:2], 0, overrides=[PROMPT[1], PROMPT[2]])
    decoder.step([PROMPT[2], 0], 2)
    trace = []
    for _ in range(steps):
        decoder.step_speculative()
        state = torch.cat([spec.tokens, spec.pos]).float()
        trace.append(torch.cat([model.logits_buf.flatten(), model.mtp.logits_buf.flatten(), state]).cpu())
    decoder.synchronize()
    end = int(spec.pos)
    return trace, spec.emitted[len(PROMPT) : end + 1].tolist(), int(spec.accepted) / (steps + 1)


def speculative_check(args, config, devices) -> dict:
    weights = synthetic_weights(config, "nvfp4", device=devices[0], seed=1, mtp=True)
    model = DSV4Model(config, weights, devices, max_len=args.max_len, speculative=True)
    del weights
    plain, tokens, _ = speculative_trace(GraphDecoder(model, args.mode, use_graphs=False), args.steps)
    graphed_decoder = GraphDecoder(model, args.mode)
    graphed, replay_tokens, acceptance = speculative_trace(graphed_decoder, args.steps)
    mismatch = next((i for i, (a, b) in enumerate(zip(plain, graphed)) if not torch.equal(a, b)), None)
    return {"preset": args.preset, "mode": args.mode, "gpus": args.gpus, "steps": args.steps, "mtp": True,
            "graphs": graphed_decoder.capture_count, "bitwise": mismatch is None, "first_mismatch": mismatch,
            "tokens_match": tokens == replay_tokens, "tokens": len(tokens), "acceptance": acceptance,
            "devices": sorted({str(d) for d in model.layer_devices})}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="tiny")
    p.add_argument("--mode", default="full")
    p.add_argument("--steps", type=int, default=320)
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--mtp", action="store_true")
    args = p.parse_args(argv)
    config = preset(args.preset)
    devices = [torch.device("cuda", i) for i in range(args.gpus)]
    if args.mtp:
        print(json.dumps(speculative_check(args, config, devices)))
        return 0
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
