"""Write and load speed of sharded dsv4 checkpoints: synthetic weights drawn on a GPU, streamed to disk,
then loaded lazily shard by shard onto the GPUs the layers are placed on.

    python benchmarks/checkpoint_io.py --preset pro-2L --out /tmp/ckpt [--gpus 2] [--shard-mb 2048] [--keep]

Prints bytes, seconds and GB/s for the write (`dsv4.synth.write_checkpoint`, drawing on cuda:0) and the
load (`dsv4.placement.load_placed_weights`, the path `graphready check dsv4 --checkpoint` takes), and
the peak host memory (max RSS) of this process. Before the load it drops the page cache when it may
(root); otherwise the load reads from a warm cache and says so.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import time
from pathlib import Path

import torch

from dsv4.config import preset
from dsv4.placement import load_placed_weights
from dsv4.synth import write_checkpoint


def _drop_page_cache() -> bool:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="pro-2L")
    parser.add_argument("--out", type=Path, required=True, help="a new or empty directory")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs the load places the layers over")
    parser.add_argument("--shard-mb", type=int, default=2048)
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint afterwards")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    config = preset(args.preset)

    started = time.perf_counter()
    write_checkpoint(config, args.out, "nvfp4", seed=0, shard_bytes=args.shard_mb << 20, device="cuda:0")
    write_s = time.perf_counter() - started
    files = sorted(args.out.glob("model-*.safetensors"))
    size = sum(f.stat().st_size for f in files)
    print(f"write: {args.preset} {size / 1e9:.2f} GB in {len(files)} shards, {write_s:.1f} s, "
          f"{size / 1e9 / write_s:.2f} GB/s (drawn on cuda:0), host peak RSS {_rss_gb():.1f} GB", flush=True)

    cold = _drop_page_cache()
    devices = [torch.device("cuda", i) for i in range(args.gpus)]
    started = time.perf_counter()
    weights = load_placed_weights(config, devices, checkpoint=str(args.out))
    for device in devices:
        torch.cuda.synchronize(device)
    load_s = time.perf_counter() - started
    print(f"load: {size / 1e9:.2f} GB onto {args.gpus} GPU(s), {load_s:.1f} s, {size / 1e9 / load_s:.2f} GB/s "
          f"({'page cache dropped' if cold else 'page cache warm'}), {len(weights)} entries, "
          f"host peak RSS {_rss_gb():.1f} GB", flush=True)
    if not args.keep:
        shutil.rmtree(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
