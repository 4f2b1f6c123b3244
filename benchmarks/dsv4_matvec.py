"""Bandwidth of dsv4's matrix-vector kernels at the Pro and Flash shapes, next to a plain read of the same bytes.

    python benchmarks/dsv4_matvec.py [--rows 1] [--sweep] [--presets pro,flash]

- FP8 (`dsv4/layers/fp8_matvec.py`), each dense linear: microseconds per call and GB/s of the bytes read (e4m3
  weight + fp32 scales), next to cuBLAS on a bf16 copy. `--sweep` times every tile choice (output rows per
  program, columns per step, warps, stages) instead of the one `fp8_matvec` picks, so a new GPU's choice is one run.
- NVFP4 (`dsv4/layers/expert_matvec.py`), the experts' gate+up and down launches for one token (6 routed
  experts and the shared one, drawn at random from the stack).
- The vocab head (`dsv4/layers/fp32_matvec.py`): the kernel reading it in bf16 next to cuBLAS's fp32 GEMV over
  an fp32 copy (the official form); `--sweep` times its tiles too.

Each kernel is also timed against `_read_words`, which reads the same weight bytes as 32-bit words and does
nothing else: the gap between the two says whether a kernel is bound by memory or by its instructions. Weights
are copied or drawn from a stack large enough to defeat the L2 cache.
"""

from __future__ import annotations

import argparse
import itertools

import torch
import triton
import triton.language as tl

from dsv4.formats import NVFP4Weight, quantize_fp8_block
from dsv4.layers import expert_matvec as em
from dsv4.layers import fp8_matvec as fm
from dsv4.layers import fp32_matvec as f32
from dsv4.layers.kernels import pdl_options, wait_for_previous_kernel

SHAPES = {  # (name, out, in, groups)
    "pro": [("wq_a+wkv", 2048, 7168, 1), ("wq_b", 65536, 1536, 1), ("wo_a", 16384, 4096, 16),
            ("wo_b", 7168, 16384, 1), ("indexer.wq_b", 8192, 1536, 1)],
    "flash": [("wq_a+wkv", 1536, 4096, 1), ("wq_b", 32768, 1024, 1), ("wo_a", 8192, 4096, 8),
              ("wo_b", 4096, 8192, 1), ("indexer.wq_b", 8192, 1024, 1)],
}
COPIES_BYTES = 512 << 20  # enough distinct weights that each call reads from HBM
EXPERTS = {"pro": (384, 3072, 7168), "flash": (256, 2048, 4096)}  # routed experts, intermediate, hidden
VOCAB = 129280
HIDDEN = {"pro": 7168, "flash": 4096}
TOKEN_ROWS = 7  # 6 routed experts and the shared one


@triton.jit
def _read_words(words, out, n_words, READ: tl.constexpr, PDL: tl.constexpr):
    """Reads READ 32-bit words per program and stores one word of their xor: a matrix-vector kernel's bytes
    without its arithmetic."""
    wait_for_previous_kernel(PDL)
    start = tl.program_id(0) * READ
    offsets = start + tl.arange(0, READ)
    tl.store(out + tl.program_id(0), tl.xor_sum(tl.load(words + offsets, mask=offsets < n_words, other=0), axis=0))


def read_only(tensors: list[torch.Tensor]) -> float:
    """Microseconds per plain read of one of `tensors` (each read as 32-bit words)."""
    words = [t.view(torch.int32).flatten() for t in tensors]
    read = 4096
    out = torch.empty(triton.cdiv(words[0].numel(), read), dtype=torch.int32, device="cuda")
    return timed(lambda i: _read_words[(out.numel(),)](words[i % len(words)], out, words[0].numel(), READ=read,
                                                       **pdl_options()), 200)


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
    total: dict[str, float] = {}
    for preset in args.presets.split(","):
        head(preset, args.rows, args.sweep)
        experts(preset, args.rows, total)
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
            plain = read_only([w.weight for w in weights])
            total[preset] = total.get(preset, 0.0) + kernel
            print(f"{preset:5} {name:13} {n_out:6}x{k:<6} cuBLAS bf16 {cublas:7.1f} us {2 * n_out * k / cublas / 1e3:6.0f} GB/s"
                  f"   fp8 kernel {kernel:7.1f} us {fp8_bytes / kernel / 1e3:6.0f} GB/s   plain read "
                  f"{fp8_bytes / plain / 1e3:6.0f} GB/s", flush=True)
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

    print("one layer's matrix-vector kernels:", ", ".join(f"{p} {t:.1f} us" for p, t in total.items()))


def head(preset: str, rows: int, sweep: bool) -> None:
    """The vocab head once per step: not in the per-layer total."""
    hidden = HIDDEN[preset]
    heads = [torch.randn(VOCAB, hidden, device="cuda").to(torch.bfloat16) for _ in range(2)]
    x = torch.randn(rows, hidden, device="cuda").to(torch.bfloat16)
    out = torch.empty(rows, VOCAB, device="cuda")
    nbytes = heads[0].nbytes
    kernel = timed(lambda i: f32.fp32_matvec(x, heads[i % 2], out), 50)
    plain = read_only(heads)
    fp32 = [h.float() for h in heads]
    xf = x.float()
    cublas = timed(lambda i: torch.matmul(xf, fp32[i % 2].T, out=out), 50)
    print(f"{preset:5} {'head':13} {VOCAB}x{hidden}   cuBLAS fp32 {cublas:7.1f} us {2 * nbytes / cublas / 1e3:6.0f} GB/s"
          f"   bf16 kernel {kernel:7.1f} us {nbytes / kernel / 1e3:6.0f} GB/s   plain read "
          f"{nbytes / plain / 1e3:6.0f} GB/s", flush=True)
    del fp32
    if sweep:
        results = []
        rows_p2 = triton.next_power_of_2(rows)
        for bn, bk, warps, stages in itertools.product((2, 4, 8, 16, 32), (256, 512, 1024, 2048), (4, 8), (3, 4)):
            if rows_p2 * bn * bk > 16 * 1024:
                continue
            def launch(i):
                f32._fp32_matvec[(triton.cdiv(VOCAB, bn),)](
                    x, heads[i % 2], out, VOCAB, rows, x.stride(0), out.stride(0), hidden, K=hidden, ROWS=rows_p2,
                    BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages, **pdl_options())
            results.append((timed(launch, 50), bn, bk, warps, stages))
        for t, bn, bk, warps, stages in sorted(results)[:4]:
            print(f"    best: BLOCK_N {bn:3} BLOCK_K {bk:5} warps {warps} stages {stages}: {t:7.1f} us "
                  f"{nbytes / t / 1e3:6.0f} GB/s", flush=True)
    del heads
    torch.cuda.empty_cache()


def experts(preset: str, rows: int, total: dict[str, float]) -> None:
    """The NVFP4 gate+up and down launches for `rows` tokens, each with TOKEN_ROWS expert rows."""
    stack, inter, hidden = EXPERTS[preset]
    for name, n_out, k, matrices in (("gate+up", inter, hidden, 2), ("down", hidden, inter, 1)):
        weights = [NVFP4Weight(torch.randint(0, 256, (stack, n_out, k // 2), dtype=torch.uint8, device="cuda"),
                               (torch.rand(stack, n_out, k // 16, device="cuda") + 0.5).to(torch.float8_e4m3fn),
                               torch.ones(stack, device="cuda")) for _ in range(matrices)]
        ids = [torch.randperm(stack, device="cuda")[: TOKEN_ROWS * rows].int() for _ in range(64)]
        x = torch.randn(rows, k, device="cuda").to(torch.bfloat16)
        outs = [torch.empty(TOKEN_ROWS * rows, n_out, dtype=torch.bfloat16, device="cuda") for _ in weights]
        one = n_out * (k // 2 + k // 16)  # one expert matrix: packed nibbles and e4m3 block scales
        nbytes = matrices * TOKEN_ROWS * rows * one
        kernel = timed(lambda i: em.expert_matvecs(weights, ids[i % 64], x, outs), 200)
        flat = weights[0].packed.view(-1)
        plain = read_only([flat[i * nbytes:(i + 1) * nbytes] for i in range(min(16, flat.numel() // nbytes))])
        total[preset] = total.get(preset, 0.0) + kernel
        print(f"{preset:5} {'nvfp4 ' + name:13} {TOKEN_ROWS * rows}x{matrices}x{n_out}x{k}   nvfp4 kernel {kernel:7.1f} us "
              f"{nbytes / kernel / 1e3:6.0f} GB/s   plain read {nbytes / plain / 1e3:6.0f} GB/s", flush=True)
        del weights
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
