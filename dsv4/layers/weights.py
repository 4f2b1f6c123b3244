"""Turn checkpoint entries (QuantizedWeight objects or plain tensors) into what the decode step reads."""

from __future__ import annotations

import torch

from dsv4.layers.fp8_matvec import fp8_matvec, kernel_weight, stack
from dsv4.layers.primitives import act_quant, linear


def is_quantized(w) -> bool:
    return hasattr(w, "dequantize") and not isinstance(w, torch.Tensor)


def stores_quantized(w) -> bool:
    """FP8 or FP4 storage: the official `linear()` quantizes the input of such a GEMM (a BF16 weight's it does not)."""
    return is_quantized(w) and w.format != "bf16"


def dense_tensor(w, device, dtype=torch.bfloat16) -> torch.Tensor:
    """A plain tensor on `device`: quantized weights are dequantized once, tensors are cast."""
    if is_quantized(w):
        return w.to(device).dequantize(dtype=torch.bfloat16).to(dtype)
    return w.to(device=device, dtype=dtype)


def fp32_gemm_weight(w, device) -> torch.Tensor:
    """A weight of one of the official fp32 GEMMs (head, router, compressors) on `device` as `fp32_matvec` reads
    it: in bf16 where it is stored so (the fp32 GEMM multiplies exactly these values), an fp32 one as it is
    (rounding it would change the results)."""
    return dense_tensor(w, device, torch.float32 if getattr(w, "dtype", None) == torch.float32 else torch.bfloat16)


class Dense:
    """A linear layer's weight: an FP8 one read as stored by `fp8_matvec` where its kernel runs, else kept
    resident in bf16 or stored quantized and dequantized per call.

    Resident bf16 reads 2 bytes/parameter per call; per-call dequantization reads the stored bytes but also
    writes and re-reads a bf16 temporary, so which is faster is a measurement (see benchmarks/dsv4_decode.py);
    the FP8 kernel reads 1 byte/parameter. Batches it does not serve (more rows than `fp8_matvec.MAX_ROWS`)
    dequantize per call.
    `quantize_input`: this GEMM is one the official model feeds FP8 activations (`act_quant`) when its weight
    is stored FP8/FP4; the stored format decides, so a BF16 checkpoint keeps bf16 activations as it would there.
    """

    def __init__(self, w, device, resident: bool = True, quantize_input: bool = False):
        self.quantize_input = quantize_input and stores_quantized(w)
        self.fp8 = kernel_weight(w, device)
        self.resident = self.fp8 is None and (resident or not is_quantized(w))
        if self.fp8 is not None:
            self.weight, self.stored = None, self.fp8
        elif self.resident:
            self.weight = dense_tensor(w, device)
            self.stored = None
        else:
            self.weight = None
            self.stored = w.to(device)

    @property
    def bytes_read(self) -> int:
        """Weight bytes one call reads from memory (the stored format)."""
        if self.resident:
            return self.weight.numel() * self.weight.element_size()
        return int(self.stored.nbytes)

    def matrix(self) -> torch.Tensor:
        """The [out, in] bf16 weight (a fresh dequantization when not resident)."""
        return self.weight if self.resident else self.stored.dequantize(dtype=torch.bfloat16)

    def __call__(self, x: torch.Tensor, groups: int = 1, xq: torch.Tensor | None = None) -> torch.Tensor:
        """x [rows, in] @ W^T; with `groups`, W's rows form that many groups, group g reading slice g of x's
        columns (x [rows, groups * in]). `xq`: `act_quant(x)` where the caller has it already (a fused norm)."""
        if self.quantize_input:
            x = act_quant(x) if xq is None else xq
        if self.fp8 is not None:  # leading dims flattened: MTP's h_proj reads [rows, hc, D]
            y = fp8_matvec(x.reshape(-1, x.shape[-1]), self.fp8, groups)
            if y is not None:
                return y.view(*x.shape[:-1], y.shape[-1])
        if groups == 1:
            return linear(x, self.matrix())
        w = self.matrix().unflatten(0, (groups, -1))  # [G, out/G, in]
        z = torch.bmm(x.unflatten(-1, (groups, -1)).transpose(0, 1), w.transpose(1, 2)).transpose(0, 1)  # views
        return z.flatten(1)


class StackedDense:
    """Linear layers that read the same input. Kept resident in bf16 they are one GEMV over their stacked rows
    (the input quantised once, one launch, better bandwidth than several small GEMVs at batch 1), the output
    split back per layer; otherwise each is called on its own."""

    def __init__(self, entries: list, device, resident: bool = True, quantize_input: bool = False):
        parts = [Dense(w, device, resident, quantize_input) for w in entries]
        self.joint = None
        same_input = len({p.quantize_input for p in parts}) == 1
        fp8 = stack([p.fp8 for p in parts]) if same_input and all(p.fp8 is not None for p in parts) else None
        if fp8 is not None:
            self.widths = [p.fp8.shape[0] for p in parts]
            self.joint = parts[0]
            self.joint.fp8 = self.joint.stored = fp8
            parts = []
        elif all(p.resident for p in parts) and same_input:
            self.widths = [p.weight.shape[0] for p in parts]
            self.joint = parts[0]
            self.joint.weight = torch.cat([p.weight for p in parts])
            parts = []
        self.parts = parts

    @property
    def bytes_read(self) -> int:
        return sum(d.bytes_read for d in (self.parts or [self.joint]))

    def __call__(self, x: torch.Tensor, xq: torch.Tensor | None = None) -> list[torch.Tensor]:
        if self.joint is None:
            return [d(x, xq=xq) for d in self.parts]
        return [y.contiguous() for y in self.joint(x, xq=xq).split(self.widths, dim=-1)]  # no copy at batch 1
