"""GR403 on capture: the implicit side stream is an error where the code drives several GPUs, and a note
where one process drives one GPU (vLLM's piecewise backend, SGLang's runners)."""

from __future__ import annotations

import textwrap

# vLLM 0.7.2 compilation/backends.py: one worker process per GPU, pieces captured on the default side stream
ONE_DEVICE = """
    import torch


    class PiecewiseBackend:
        def __init__(self, runnable, pool):
            self.runnable = runnable
            self.graph_pool = pool

        def capture(self, *args):
            cudagraph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cudagraph, pool=self.graph_pool):
                output = self.runnable(*args)
            return cudagraph, output
    """


def _severities(result) -> list[tuple[str, str]]:
    return [(f.rule, f.severity.name) for f in result.findings]


def test_capture_without_stream_on_one_device_is_a_note(lint_project):
    result = lint_project({"pkg/backend.py": textwrap.dedent(ONE_DEVICE)})
    assert _severities(result) == [("GR403", "INFO")]
    assert "fine while this process drives one GPU" in result.findings[0].message


def test_capture_without_stream_in_code_that_switches_devices_is_an_error(lint_project):
    several = ONE_DEVICE.replace("self.graph_pool = pool", "self.graph_pool = pool\n            self.devices = "
                                 "[torch.device('cuda', i) for i in range(torch.cuda.device_count())]")
    result = lint_project({"pkg/backend.py": textwrap.dedent(several)})
    assert _severities(result) == [("GR403", "ERROR")]


def test_capture_on_an_explicit_stream_is_quiet(lint_project):
    explicit = ONE_DEVICE.replace("pool=self.graph_pool)", "pool=self.graph_pool, stream=torch.cuda.Stream())")
    assert lint_project({"pkg/backend.py": textwrap.dedent(explicit)}).findings == []


def test_one_named_device_is_not_several(lint_project):
    """SGLang's kernel benchmark names the current device, a test pins `cuda:0`, a worker process takes the
    GPU of its rank: each drives one GPU."""
    for device in ('torch.device("cuda:0")', 'torch.device(f"cuda:{torch.cuda.current_device()}")',
                   'torch.cuda.set_device(rank) or torch.device(f"cuda:{rank}")',
                   'torch.device("cuda") if torch.cuda.device_count() >= 2 else None'):
        named = ONE_DEVICE.replace("self.graph_pool = pool", f"self.graph_pool = pool\n            self.device = {device}")
        assert _severities(lint_project({"pkg/backend.py": textwrap.dedent(named)})) == [("GR403", "INFO")]
    several = ONE_DEVICE.replace("self.graph_pool = pool", 'self.graph_pool = pool\n            self.devices = ["cuda:0", "cuda:1"]')
    assert _severities(lint_project({"pkg/backend.py": textwrap.dedent(several)})) == [("GR403", "ERROR")]


def test_an_engine_with_one_gpu_per_process_gets_no_note_but_still_the_error(lint_project):
    """The engine profiles say each worker process drives one GPU: the note is dropped there; code that
    visibly switches devices is still an error."""
    config = {"one-gpu-per-process": True}
    assert lint_project({"pkg/backend.py": textwrap.dedent(ONE_DEVICE)}, config).findings == []
    several = ONE_DEVICE.replace("self.graph_pool = pool", 'self.graph_pool = pool\n            self.devices = ["cuda:0", "cuda:1"]')
    assert _severities(lint_project({"pkg/backend.py": textwrap.dedent(several)}, config)) == [("GR403", "ERROR")]
