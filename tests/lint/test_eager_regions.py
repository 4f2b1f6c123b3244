"""Code that only runs eagerly, as engines write it: each idiom (taken from SGLang/vLLM code) stays
quiet, and its twin, where the same hazard is on the captured path, is reported."""

from __future__ import annotations

import textwrap

import pytest

GUARDS = {
    "hot-paths": ["*:*.forward"],
    "eager-if": ["is_extend", "EXTEND", "visual_token_mask", "SGLANG_*VERIFY*", "prefill_metadata"],
    "captured-if": ["get_is_capture_mode", "is_cuda", "DECODE", "seqlen_agnostic_capture_inputs"],
    "gpu-capability": 90,
}

HEADER = """\
import torch
from engine import envs, get_is_capture_mode, ForwardMode

"""

CASES = {  # name: (eager-only source, (text, replacement) that puts the hazard on the captured path, rules)
    # ernie45_moe_vl: a capture-mode flag held in a variable, and a flag forced to False while capturing
    "capture flag in a variable": ("""
        class MoE:
            def forward(self, h: torch.Tensor, mask: torch.Tensor):
                capturing = get_is_capture_mode()
                if mask is not None and not capturing:
                    any_visual = mask.any()
                else:
                    any_visual = False
                if any_visual:
                    return h[mask]
                return h
        """, ("and not capturing", "and capturing"), {"GR103"}),
    # SGLang 0.5.23 lora_moe_runners: buffers only while capturing, and a host-built path chosen only without them
    "buffers only while capturing": ("""
        class LoraMoE:
            def forward(self, topk_ids: torch.Tensor, info, small: bool):
                cg = info.cg_buffers if get_is_capture_mode() else None
                use_naive = cg is None and small
                if use_naive:
                    return topk_ids.cpu()
                return topk_ids
        """, ("if use_naive:", "if not use_naive:"), {"GR101"}),
    # gdn_backend: a module-level debug switch read once from the environment, matched by a glob
    "env switch in a global": ("""
        _VERIFY = envs.SGLANG_GDN_VERIFY_REAL_TENSORS.get()

        class Backend:
            def forward(self, idx: torch.Tensor):
                check = _VERIFY and idx.numel() > 0
                if check:
                    assert bool(torch.any(idx < 0).item()) is False
                return idx
        """, ("SGLANG_GDN_VERIFY_REAL_TENSORS", "SGLANG_GDN_LOG_LAYER_HITS"), {"GR101"}),
    # gemma3_mm: a prefill-only helper called under `forward_mode == ForwardMode.EXTEND`
    "enum member compared": ("""
        class Model:
            def forward(self, ids: torch.Tensor, batch):
                if batch.forward_mode == ForwardMode.EXTEND and batch.has_images():
                    self.prepare_masks(ids)
                return ids

            def prepare_masks(self, ids: torch.Tensor):
                return ids[: int(ids.max())]
        """, ("ForwardMode.EXTEND and", "ForwardMode.DECODE and"), {"GR102"}),
    # deepseek_v4: a prefill-only gate method built from the engine's predicates, then held in a variable
    "predicate method of the module": ("""
        class Model:
            def _can_run_tbo(self, batch) -> bool:
                return self.enable_tbo and batch.forward_mode.is_extend() and batch.tbo_children is not None

            def forward(self, h: torch.Tensor, batch, seq_lens: torch.Tensor):
                run_tbo = self._can_run_tbo(batch) and not self.drafting
                if run_tbo:
                    return h[: int(seq_lens.max().item())]
                return h
        """, ("batch.forward_mode.is_extend() and", "batch.tbo_ready() and"), {"GR101"}),
    # dsa_indexer: an early return taken while capturing leaves the rest eager
    "early return when capturing": ("""
        class Indexer:
            def forward(self, seq_lens: torch.Tensor, logits: torch.Tensor):
                if get_is_capture_mode():
                    return logits
                return logits[: int(seq_lens.max().item())]
        """, ("if get_is_capture_mode():", "if not get_is_capture_mode():"), {"GR101"}),
    # qsa kernel: the CUDA branch always exits, the loop after it is the CPU reference path
    "early exit on CUDA tensors": ("""
        def select(logits: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
            if logits.is_cuda:
                return logits.topk(8).indices
            return logits[int(starts[0]):]

        class Indexer:
            def forward(self, logits: torch.Tensor, starts: torch.Tensor):
                return select(logits, starts)
        """, ("if logits.is_cuda:", "if not logits.is_cuda:"), {"GR102"}),
    # muse_spark: `torch.cuda.is_available() and is_current_stream_capturing()` early return
    "capturing check with is_available": ("""
        class Experts:
            def forward(self, topk_ids: torch.Tensor, x: torch.Tensor):
                if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                    return self.capturable(x)
                return topk_ids.nonzero()

            def capturable(self, x: torch.Tensor):
                return x
        """, ("and torch.cuda", "and not torch.cuda"), {"GR201"}),
    # ernie45_vl_moe (vLLM): the device read is short-circuited by an eager-only operand
    "short-circuited operand": ("""
        class MoE:
            def forward(self, h: torch.Tensor, visual_token_mask: torch.Tensor | None):
                if visual_token_mask is not None and visual_token_mask.all():
                    return h * 2
                return h
        """, ("visual_token_mask is not None and ", ""), {"GR103"}),
    # moondream3-style fallback: a handler only runs after an exception, which fails a capture anyway
    "except handler": ("""
        class MoE:
            def forward(self, ids: torch.Tensor, x: torch.Tensor):
                try:
                    return self.fused(x)
                except RuntimeError:
                    return x[: int(ids.sum())]

            def fused(self, x: torch.Tensor):
                return x
        """, ("except RuntimeError:", "finally:"), {"GR102"}),
    # qsa_indexer / vLLM rotary: a cache-hit return before one-time work stored on self
    "cache hit before one-time work": ("""
        class Rotary:
            def forward(self, q: torch.Tensor):
                cache = self._axis_map
                if cache is not None and cache.device == q.device:
                    return cache
                self._axis_map = torch.tensor([0, 1, 2], device=q.device)
                return self._axis_map
        """, ("self._axis_map = torch", "axis_map = torch"), {"GR302"}),
    # ernie45_vl: a list filled only for multimodal batches, then copied to the GPU (empty in decode)
    "list filled only on eager lines": ("""
        class Model:
            def forward(self, ids: torch.Tensor, batch):
                pad_values = []
                if batch.visual_token_mask is not None:
                    for item in batch.items:
                        pad_values.extend(item.padding_values())
                placeholder = torch.as_tensor(pad_values, device=ids.device)
                return torch.cat([ids, placeholder])
        """, ("if batch.visual_token_mask is not None:", "if batch.items:"), {"GR302"}),
    # moss_vl: a helper that returns Nones for decode batches; what its results guard is prefill work
    "helper returns None when captured": ("""
        class Model:
            def collect(self, batch):
                if batch.forward_mode == ForwardMode.DECODE:
                    return None, None
                return batch.pixels, batch.grid

            def forward(self, h: torch.Tensor, batch):
                pixels, grid = self.collect(batch)
                if pixels is not None:
                    frames = int(grid[0].item())
                    h = h[:frames]
                return h
        """, ("return None, None", "return batch.pixels, None"), {"GR101"}),
    # vLLM batched_deep_gemm_moe: a Triton fallback for GPUs without the C++ kernel (ROCm, XPU, pre-Ampere)
    "fallback behind a capability test": ("""
        class Experts:
            def forward(self, counts: torch.Tensor, platform):
                if platform.is_cuda() and platform.has_device_capability(80):
                    return torch.ops.fused(counts)
                for e in range(counts.shape[0]):
                    n = counts[e].item()
                return counts
        """, ("has_device_capability(80)", "has_device_capability(100)"), {"GR101"}),
    # vLLM deep_gemm_mega_moe: a device sync before the first launch per group, remembered in a set
    "first-launch work remembered in a set": ("""
        class Experts:
            def forward(self, h: torch.Tensor, group):
                self._synchronize_first_launch(group)
                return h

            def _synchronize_first_launch(self, group):
                if group in self._synchronized:
                    return
                torch.cuda.synchronize()
                self._synchronized.add(group)
        """, ("self._synchronized.add(group)", "print(group)"), {"GR101"}),
    # muse_spark_fp4_moe: a setter called only when the norm module handed in changes (once, at the first step)
    "set-up when the handed-in module changes": ("""
        class Experts:
            def __init__(self):
                self._norm = None
                self._norm_weight = torch.ones(8)

            def forward(self, h: torch.Tensor, norm):
                if self._norm is not norm:
                    self.set_norm(norm)
                return h * self._norm_weight

            def set_norm(self, norm):
                self._norm = norm
                self._norm_weight = self._norm_weight * norm.weight.to(torch.bfloat16)
        """, ("if self._norm is not norm:", "if norm is not None:"), {"GR306"}),
    # muse_spark_fp4_moe (deferred finalize): the same test held in a flag, re-set inside the branch
    "set-up behind a flag holding the identity test": ("""
        class Experts:
            def __init__(self):
                self._norm = None
                self._norm_weight = torch.ones(8)

            def forward(self, h: torch.Tensor, norm):
                fused = self._norm is not None and self._norm is norm
                if not fused and norm is not None:
                    self.set_norm(norm)
                    fused = True
                return h * self._norm_weight

            def set_norm(self, norm):
                self._norm = norm
                self._norm_weight = self._norm_weight * norm.weight.to(torch.bfloat16)
        """, ("self._norm is not None and self._norm is norm", "self._norm is not None"), {"GR306"}),
    # SGLang FusedMoE: the expert map copied to the device on the first expert-parallel step
    "one-time copy under an `and`": ("""
        class Experts:
            def forward(self, h: torch.Tensor):
                if self.ep_size > 1 and self.map_gpu is None:
                    self.map_gpu = self.map_cpu.to("cuda")
                    self.top = int(self.map_gpu.max().item())
                return h
        """, ("and self.map_gpu is None", "and h.shape[0] > 1"), {"GR101"}),
    # vLLM GemmaRMSNorm: compiled on the first call, remembered in an attribute read through getattr
    "one-time set-up behind a getattr flag": ("""
        class Norm:
            def forward(self, x: torch.Tensor):
                if not getattr(self, "_is_compiled", False):
                    self.scale = float(x.abs().max().item())
                    self._is_compiled = True
                return x * self.scale
        """, ('not getattr(self, "_is_compiled", False)', "x.shape[0] > 1"), {"GR101"}),
    # vLLM attention: kv scales calibrated by a method that clears the flag, so the block runs once
    "calibration behind a flag its method clears": ("""
        class Attention:
            def __init__(self, calculate_kv_scales: bool):
                self.calculate_kv_scales = calculate_kv_scales
                self._k_scale = torch.ones(1)

            def forward(self, q: torch.Tensor, k: torch.Tensor, meta):
                if self.calculate_kv_scales and meta.enable_kv_scales_calculation:
                    self.calc_kv_scales(k)
                return q * self._k_scale_float

            def calc_kv_scales(self, k: torch.Tensor):
                self._k_scale.copy_(torch.abs(k).max())
                self._k_scale_float = self._k_scale.item()
                self.calculate_kv_scales = False
        """, ("self.calculate_kv_scales = False", "self.calculate_kv_scales = k.numel() > 0"), {"GR101"}),
    # vLLM marlin_utils: a module-global quantiser built on the first call (its constructor compiles; vLLM's
    # uses torch.compile, a JIT that must not run per step stands in here)
    "module global built once": ("""
        from cutlass import cute

        class QuantFP8:
            def __init__(self, group: int):
                self.fn = cute.compile(self.forward_native, group)

            def forward_native(self, x: torch.Tensor):
                return x

        _quant_fp8_method = None

        def get_quant_fp8_method():
            global _quant_fp8_method
            if _quant_fp8_method is None:
                _quant_fp8_method = QuantFP8(128)
            return _quant_fp8_method

        class Experts:
            def forward(self, x: torch.Tensor):
                return get_quant_fp8_method().fn(x)
        """, ("if _quant_fp8_method is None:", "if x is not None:"), {"GR501"}),
    # SGLang nvfp4 GEMM: a compiled kernel looked up in a module-level dict, compiled and stored on a miss
    "cache hit in a module-level dict": ("""
        _compiled_kernel_cache = {}

        def _get_compiled(fn, n: int, k: int):
            cache_key = (n, k)
            cached = _compiled_kernel_cache.get(cache_key)
            if cached is not None:
                return cached
            compiled = torch.utils.cpp_extension.load_inline(f"gemm_{n}_{k}", fn)
            _compiled_kernel_cache[cache_key] = compiled
            return compiled

        class Gemm:
            def forward(self, x: torch.Tensor):
                return _get_compiled(torch.mm, x.shape[0], x.shape[1])(x, x)
        """, ("_compiled_kernel_cache[cache_key] = compiled", "pass"), {"GR501"}),
    # SGLang LTX-2 perturbation masks: a cache made in the call (the twin) misses on every call, so its
    # miss branch is hot; a module-level cache fills once
    "cache that outlives the call": ("""
        _mask_cache = {}

        def build_masks(values: torch.Tensor, keys: list):
            for key in keys:
                mask = _mask_cache.get(key)
                if mask is None:
                    mask = values.new_ones(len(key))
                    mask[values.argmax().item()] = 0
                    _mask_cache[key] = mask
            return mask

        class Dit:
            def forward(self, values: torch.Tensor):
                return build_masks(values, [(0, 1)])
        """, ("keys: list):\n", "keys: list):\n            _mask_cache = {}\n"), {"GR101"}),
    # vLLM V0 attention backends: the prefill metadata taken with a walrus in the test
    "prefill metadata bound in the test": ("""
        class BlocksparseImpl:
            def forward(self, q: torch.Tensor, attn_metadata):
                if prefill_meta := attn_metadata.prefill_metadata:
                    q_lens = (prefill_meta.cu_seqlens[1:] - prefill_meta.cu_seqlens[:-1]).cpu()
                    return q[: q_lens.sum()]
                return q
        """, ("prefill_meta := attn_metadata.prefill_metadata", "prefill_meta := attn_metadata.decode_metadata"),
        {"GR101"}),
    # vLLM V0 mamba cache: the runner passes this kwargs key only to graph runs; without it, eager prep
    "kwargs key present only when capturing": ("""
        class MambaCache:
            def current_run_tensors(self, ids: torch.Tensor, **kwargs):
                if "seqlen_agnostic_capture_inputs" not in kwargs:
                    slots = torch.as_tensor(kwargs["state_indices"], dtype=torch.int32, device="cuda")
                else:
                    slots = kwargs["seqlen_agnostic_capture_inputs"]
                return slots

        class Model:
            def forward(self, ids: torch.Tensor, cache: MambaCache, **kwargs):
                return cache.current_run_tensors(ids, **kwargs)
        """, ('"seqlen_agnostic_capture_inputs" not in kwargs', '"state_indices" in kwargs'), {"GR302"}),
    # LMDeploy's DeepSeek-V2 micro-batch split: a metadata field only prefill fills, tested in an if-expression
    "eager-only field in a conditional expression": ("""
        class Model:
            def forward(self, x: torch.Tensor, attn_metadata):
                lens = attn_metadata.kv_seqlens
                attn_metadata.size = sum(lens.tolist()) if attn_metadata.prefill_metadata is not None else None
                return x
        """, ("if attn_metadata.prefill_metadata is not None", "if attn_metadata.decode_metadata is not None"),
        {"GR101"}),
    # vLLM triton_decode_attention: a default for an optional scale, which every captured caller passes
    "optional argument every hot caller passes": ("""
        def decode_attention(q: torch.Tensor, k_buffer: torch.Tensor, k_scale=None):
            if k_scale is None:
                k_scale = torch.tensor(1.0, dtype=torch.float32, device=q.device)
            return q * k_scale

        class TritonMLAImpl:
            def forward(self, q: torch.Tensor, kv: torch.Tensor, layer):
                return decode_attention(q, kv, k_scale=layer._k_scale)
        """, ("kv, k_scale=layer._k_scale)", "kv)"), {"GR302"}),
    # the same fallback written as an early return, the argument passed by position
    "optional argument passed by position": ("""
        def segment_len(lens: torch.Tensor, max_len=None) -> int:
            if max_len is not None:
                return max_len
            return int(lens.max().item())

        class LoRA:
            def forward(self, x: torch.Tensor, lens: torch.Tensor):
                return x[:, : segment_len(lens, x.shape[1])]
        """, ("segment_len(lens, x.shape[1])", "segment_len(lens, None)"), {"GR101"}),
    # SGLang 0.5.23 MiniMax MSA decode: indices and plan are built once per forward by the backend and
    # handed in; a harness that passes neither (or only one) builds both here, with a host read
    "fallback for either of two optional arguments": ("""
        def build_meta(lens: torch.Tensor):
            total = int(lens.sum().item())
            return torch.arange(total, device=lens.device), total

        def sparse_decode(q: torch.Tensor, lens: torch.Tensor, kv_indices=None, plan=None):
            if kv_indices is None or plan is None:
                kv_indices, plan = build_meta(lens)
            return q[kv_indices]

        class SparseBackend:
            def forward(self, q: torch.Tensor, lens: torch.Tensor, meta):
                return sparse_decode(q, lens, kv_indices=meta.kv_indices, plan=meta.plan)
        """, (", plan=meta.plan)", ")"), {"GR101"}),
    "early return when both optional arguments are given": ("""
        def sparse_decode(q: torch.Tensor, lens: torch.Tensor, kv_indices=None, plan=None):
            if kv_indices is not None and plan is not None:
                return q[kv_indices]
            total = int(lens.sum().item())
            return q[:total]

        class SparseBackend:
            def forward(self, q: torch.Tensor, lens: torch.Tensor, meta):
                return sparse_decode(q, lens, meta.kv_indices, meta.plan)
        """, ("meta.kv_indices, meta.plan)", "meta.kv_indices)"), {"GR101"}),
}


def _source(body: str) -> str:
    return HEADER + textwrap.dedent(body)


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_only_idiom_is_quiet_and_its_captured_twin_is_reported(lint_project, name):
    eager, (text, replacement), rules = CASES[name]
    assert text in eager
    captured = eager.replace(text, replacement)
    quiet = lint_project({"pkg/eager.py": _source(eager)}, GUARDS)
    assert [f for f in quiet.findings if f.severity.name in ("ERROR", "WARNING")] == []
    loud = lint_project({"pkg/captured.py": _source(captured)}, GUARDS)
    assert {f.rule for f in loud.findings if f.severity.name in ("ERROR", "WARNING")} == rules


def test_one_time_work_after_a_cache_hit_is_lazy_init(lint_project):
    """The cold rest of the function is not silence: GR603 says the first call does the work."""
    result = lint_project({"pkg/eager.py": _source(CASES["cache hit before one-time work"][0])}, GUARDS)
    assert [(f.rule, f.severity.name) for f in result.findings] == [("GR603", "INFO")]
    assert "`cache` is initialised on the step's first call" in result.findings[0].message


@pytest.mark.parametrize(("test", "sets", "state"), [
    ('not hasattr(self, "_w")', "self._w = torch.ones(x.shape[-1], device=x.device)", "self._w"),  # SGLang qwen2_moe, vLLM turboquant
    ('not getattr(self, "_w", None)', "self._w = torch.ones(x.shape[-1], device=x.device)", "self._w"),
    ("self._w is None", "self._w, self._s = torch.ones(x.shape[-1], device=x.device), 1.0", "self._w"),
    ("x.device not in self._seen", "self._seen.add(x.device); self._w = torch.ones(x.shape[-1], device=x.device)", "self._seen"),
    ("self._table.get(x.device) is None", "self._table[x.device] = self._w = torch.ones(x.shape[-1], device=x.device)", "self._table.get(x.device)"),
])
def test_lazy_init_names_the_state_its_block_sets(lint_project, test, sets, state):
    """Each way a block sets what its test reads makes it one-time work: the note names that state."""
    result = lint_project({"pkg/moe.py": _source(f"""
        class Experts:
            def forward(self, x: torch.Tensor):
                if {test}:
                    {sets}
                return x * self._w
        """)}, GUARDS)
    assert [(f.rule, f.severity.name) for f in result.findings] == [("GR603", "INFO")]
    assert f"`{state}` is initialised on the step's first call" in result.findings[0].message


def test_a_per_call_flag_guards_no_one_time_work(lint_project):
    """lmdeploy 0.18's agent: `if return_ce_loss and ... not inputs.is_dummy:` stores a result on `self`, but
    `inputs` comes with each call, so the block runs on every such call: hot, not first-call init (it was
    taken for GR603 and left cold, hiding the sync inside). A cache passed in whose field the block sets is
    one-time work."""
    per_call = lint_project({"pkg/agent.py": _source("""
        class Agent:
            def forward(self, logits: torch.Tensor, inputs, return_loss: bool):
                if return_loss and not inputs.is_dummy and not inputs.is_decoding:
                    self.last_logit = logits[-1:].clone()
                    self.loss = float(logits.sum())
                return logits
        """)}, GUARDS)
    assert [(f.rule, f.line) for f in per_call.findings] == [("GR102", 9)]
    cache_passed_in = lint_project({"pkg/agent.py": _source("""
        class Agent:
            def forward(self, logits: torch.Tensor, cache):
                if cache.last is None:
                    cache.last = torch.zeros_like(logits)
                return logits + cache.last
        """)}, GUARDS)
    assert [(f.rule, f.severity.name) for f in cache_passed_in.findings] == [("GR603", "INFO")]
    assert "`cache.last` is initialised on the step's first call" in cache_passed_in.findings[0].message


@pytest.mark.parametrize("read", ["_INV_FREQS.get(key)", "_INV_FREQS.pop(key, None)"])
def test_a_one_time_test_through_a_local_names_what_the_block_fills(lint_project, read):
    """DeepSpeed's `entry = InferenceContext._inv_freqs.get(key)` / `if entry is None:` filling the class table, and
    its Muon all-gather buffers popped from and put back into an LRU: one-time work per key."""
    result = lint_project({"pkg/rope.py": _source(f"""
        _INV_FREQS = {{}}

        class Rope:
            def forward(self, x: torch.Tensor, dim: int):
                key = (dim, x.device)
                entry = {read}
                if entry is None:
                    freqs = 1.0 / torch.pow(10000.0, torch.arange(0, dim, 2, device=x.device) / dim)
                    _INV_FREQS[key] = freqs
                return x * _INV_FREQS[key]
        """)}, GUARDS)
    assert [(f.rule, f.severity.name) for f in result.findings] == [("GR603", "INFO")]


def test_a_cache_held_by_a_weak_reference_is_one_time_work(lint_project):
    """FlashInfer's PLE geometry: `cached = None if self._storage is None else self._storage()`, returned when it is
    on the device asked for; the rest builds the tensors and keeps a weak reference to them."""
    result = lint_project({"pkg/geometry.py": _source("""
        import weakref

        class Geometry:
            def forward(self, device: torch.device):
                cached = None if self._storage is None else self._storage()
                if cached is not None and cached.device == device:
                    return cached
                tensors = torch.tensor(self.sizes, dtype=torch.int64, device=device)
                self._storage = weakref.ref(tensors)
                return tensors
        """)}, GUARDS)
    assert [(f.rule, f.severity.name) for f in result.findings] == [("GR603", "INFO")]


def test_a_lookup_that_returns_early_is_no_cache_hit(lint_project):
    """exllamav2's streaming generator: `if token in self.stop_tokens: return ...`, then the step's work, which
    stores other state. Only a rest that fills what the test read (`self.cache[key] = ...`) makes the test a cache
    hit and the rest one-time work; here the rest runs on every call and stays hot."""
    result = lint_project({"pkg/gen.py": _source("""
        class Generator:
            def forward(self, token: torch.Tensor, logits: torch.Tensor):
                if token in self.stop_tokens:
                    return None
                self.last = torch.cat([self.last, token])
                self.score = float(logits.max())
                return self.last
        """)}, GUARDS)
    assert [(f.rule, f.line) for f in result.findings] == [("GR306", 9), ("GR102", 10)]


def test_exclude_roots_last_matching_entry_decides(lint_project):
    files = {"pkg/mindspore.py": _source("""
        class MindSporeForCausalLM:
            def forward(self, x: torch.Tensor):
                return x[: int(x.sum())]
        """), "pkg/qwen_audio.py": _source("""
        class QwenAudioForCausalLM:
            def forward(self, x: torch.Tensor):
                return x[: int(x.sum())]
        """)}
    table = {"hot-paths": ["*:*.forward"], "exclude-roots": ["*mindspore*", "*audio*", "!*:*ForCausalLM", "*mindspore*"]}
    result = lint_project(files, table)
    assert {f.path for f in result.findings} == {"pkg/qwen_audio.py"}
