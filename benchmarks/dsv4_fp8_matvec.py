"""Bandwidth of the FP8 matrix-vector kernel (`dsv4/layers/fp8_matvec.py`) next to cuBLAS on a bf16 copy.

    python benchmarks/dsv4_fp8_matvec.py [--rows 1] [--sweep]

For each dense linear shape of the Pro and Flash presets: microseconds per call and GB/s of the bytes read
(e4m3 weight + fp32 scales for the kernel, the bf16 copy for cuBLAS), over enough copies of the weight to
defeat the L2 cache. `--sweep` times every tile choice (output rows per program, columns per step, warps,
stages) instead of the one `fp8_matvec` picks, so a new GPU's choice is one run.
"""

from __future__ import annotations

import argparse
import itertools

import torch

from dsv4.formats import quantize_fp8_block
from dsv4.layers import fp8_matvec as fm

SHAPES = {  # (name, out, in, groups)
    "pro": [("wq_a+wkv", 2048, 7168, 1), ("wq_b", 65536, 1536, 1), ("wo_a", 16384, 4096, 16),
            ("wo_b", 7168, 16384, 1), ("indexer.wq_b", 8192, 1536, 1)],
    "flash": [("wq_a+wkv", 1536, 4096, 1), ("wq_b", 32768, 1024, 1), ("wo_a", 8192, 4096, 8),
              ("wo_b", 4096, 8192, 1), ("indexer.wq_b", 8192, 1024, 1)],
}
COPIES_BYTES = 512 << 20  # enough distinct weights that each call reads from HBM


def timed(fn, calls: int) -> float:
    """Microseconds per call of `fn(i)`, `calls` of them captured in one CUDA graph and replayed: GPU time and
    the gaps between kernels, without Python's launch overhead (which exceeds these kernels' run time)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn(0)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                fn(i)
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        graph.replay()
        end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--presets", default="pro,flash")
    args = p.parse_args()
    print(torch.cuda.get_device_name(0))
    for preset in args.presets.split(","):
        shapes = SHAPES[preset]
        for name, n_out, k, groups in shapes:
            copies = max(2, COPIES_BYTES // (n_out * k))
            weights = [fm.kernel_weight(quantize_fp8_block(torch.randn(n_out, k, device="cuda") * 0.05, "f32"), "cuda")
                       for _ in range(copies)]
            x = torch.randn(args.rows, groups * k, device="cuda").to(torch.bfloat16)
            out = torch.empty(args.rows, n_out, dtype=torch.bfloat16, device="cuda")
            fp8_bytes = weights[0].nbytes
            bf16 = [w.dequantize() for w in weights[: max(2, COPIES_BYTES // (2 * n_out * k))]]
            xg = x.unflatten(-1, (groups, -1)).transpose(0, 1)
            if groups == 1:
                cublas = timed(lambda i: torch.nn.functional.linear(x, bf16[i % len(bf16)]), 200)
            else:
                cublas = timed(lambda i: torch.bmm(xg, bf16[i % len(bf16)].unflatten(0, (groups, -1)).transpose(1, 2)), 200)
            kernel = timed(lambda i: fm.fp8_matvec(x, weights[i % copies], groups), 200)
            print(f"{preset:5} {name:13} {n_out:6}x{k:<6} cuBLAS bf16 {cublas:7.1f} us {2 * n_out * k / cublas / 1e3:6.0f} GB/s"
                  f"   fp8 kernel {kernel:7.1f} us {fp8_bytes / kernel / 1e3:6.0f} GB/s", flush=True)
            if not args.sweep:
                continue
            results = []
            for bn, bk, warps, stages in itertools.product((8, 16, 32), (256, 512, 1024, 2048), (4, 8), (3, 4)):
                if k % bk or (n_out // groups) % bn or bn * bk > 16 * 1024:
                    continue
                try:
                    t = timed(lambda i: fm.launch(x, weights[i % copies], out, groups, bn, bk, warps, stages), 100)
                except Exception as exc:  # a tile the compiler rejects (shared memory, registers)
                    print(f"    {bn}x{bk} w{warps} s{stages}: {type(exc).__name__}")
                    continue
                results.append((t, bn, bk, warps, stages))
            for t, bn, bk, warps, stages in sorted(results)[:4]:
                print(f"    best: BLOCK_N {bn:3} BLOCK_K {bk:5} warps {warps} stages {stages}: {t:7.1f} us "
                      f"{fp8_bytes / t / 1e3:6.0f} GB/s", flush=True)


if __name__ == "__main__":
    main()
