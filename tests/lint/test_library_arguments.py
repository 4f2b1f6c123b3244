"""Tensors handed to a kernel library where its documentation asks for a Python float (GR102): FlashInfer's
attention wrappers read `k_scale` on the host (SGLang 0.5.1.post3's flashinfer_backend.py, fixed in 0.5.2)."""

from __future__ import annotations

import textwrap

# sglang/srt/layers/quantization/kv_cache.py, cut down: the quantization method makes the scales Parameters
KV_CACHE = """
    import torch


    class BaseKVCacheMethod:
        def create_weights(self, layer: torch.nn.Module):
            layer.k_scale = torch.nn.Parameter(torch.tensor(-1.0), requires_grad=False)
            layer.v_scale = torch.nn.Parameter(torch.tensor(-1.0), requires_grad=False)

        def process_weights_after_loading(self, layer: torch.nn.Module):
            layer.k_scale_float = layer.k_scale.to("cpu").tolist()
            layer.v_scale_float = layer.v_scale.to("cpu").tolist()
    """
# sglang/srt/layers/attention/flashinfer_backend.py, cut down: wrappers built at init, picked per layer in decode
BACKEND = """
    import torch
    from flashinfer import BatchDecodeWithPagedKVCacheWrapper


    class FlashInferAttnBackend:
        def __init__(self, workspace: torch.Tensor):
            self.decode_wrappers = []
            self.decode_wrappers.append(BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD"))

        def forward_decode(self, q: torch.Tensor, layer, forward_batch):
            decode_wrapper = self.forward_metadata.decode_wrappers[0]
            return decode_wrapper.forward(
                q,
                forward_batch.token_to_kv_pool.get_kv_buffer(layer.layer_id),
                sm_scale=layer.scaling,
                k_scale=layer.k_scale,
                v_scale=layer.v_scale,
            )
    """
SETTINGS = {"hot-paths": ["pkg.backend:*.forward_decode"]}


def _lint(lint_project, backend: str = BACKEND):
    files = {"pkg/__init__.py": "", "pkg/kv_cache.py": KV_CACHE, "pkg/backend.py": backend}
    return lint_project({path: textwrap.dedent(text) for path, text in files.items()}, SETTINGS)


def _found(result) -> list[tuple[str, int]]:
    return [(f.rule, f.line) for f in result.findings]


def test_scale_parameters_handed_to_a_flashinfer_wrapper_are_read_on_the_host(lint_project):
    """The wrapper comes from a list the backend fills with FlashInfer wrappers; `k_scale` is a Parameter
    wherever the quantization method (another file) sets it."""
    assert _found(_lint(lint_project)) == [("GR102", 17), ("GR102", 18)]


def test_the_floats_the_layer_keeps_are_what_flashinfer_asks_for(lint_project):
    """Clean twin: SGLang 0.5.2 passes `layer.k_scale_float`, a Python float set at load."""
    backend = BACKEND.replace("layer.k_scale,", "layer.k_scale_float,")
    backend = backend.replace("layer.v_scale,", "layer.v_scale_float,")
    assert _lint(lint_project, backend).findings == []


def test_a_wrapper_of_another_library_may_take_tensor_scales(lint_project):
    """Clean twin: the same call on an object that is no FlashInfer wrapper says nothing about its arguments
    (SGLang's own kernels take the scale tensors)."""
    backend = BACKEND.replace("from flashinfer import", "from pkg.kernels import")
    kernels = textwrap.dedent("""
        class BatchDecodeWithPagedKVCacheWrapper:
            def forward(self, *args, **kwargs):
                return args[0]
        """)
    files = {"pkg/__init__.py": "", "pkg/kv_cache.py": textwrap.dedent(KV_CACHE), "pkg/kernels.py": kernels,
             "pkg/backend.py": textwrap.dedent(backend)}
    assert lint_project(files, SETTINGS).findings == []


def test_a_device_tensor_given_to_a_single_request_function(lint_project):
    """`flashinfer.single_decode_with_kv_cache` documents the same float scales; a tensor computed in the step
    is read on the host, a Python float is not."""
    source = textwrap.dedent("""
        import flashinfer
        import torch


        class Decoder:
            def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head_dim: int):
                scale = k.abs().amax() / 448.0
                out = flashinfer.single_decode_with_kv_cache(q, k, v, k_scale=scale)
                return flashinfer.single_decode_with_kv_cache(out, k, v, sm_scale=head_dim ** -0.5)
        """)
    result = lint_project({"pkg/__init__.py": "", "pkg/decoder.py": source}, {"hot-paths": ["pkg.decoder:*.forward"]})
    assert _found(result) == [("GR102", 9)]
