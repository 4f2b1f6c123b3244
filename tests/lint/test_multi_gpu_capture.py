"""A hand-written multi-GPU decoder: one graph per GPU captured in a device loop. The static input made for
each capture and then dropped is a freed graph input (GR601), and capturing for several GPUs on the implicit
side stream is an error (GR403), however the loop and the graph list are spelled."""

from __future__ import annotations

import textwrap

DECODER = """
    import torch


    class PipelineDecoder:
        def __init__(self, stages, hidden: int, batch: int):
            self.stages = stages
            self.devices = [torch.device("cuda", i) for i in range(len(stages))]
            self.hidden, self.batch = hidden, batch

        def capture(self):
            graphs, outs, statics = [], [], []
            for i, dev in enumerate(self.devices):
                torch.cuda.set_device(dev)
                g = torch.cuda.CUDAGraph()
                static = torch.zeros(self.batch, self.hidden, device=dev)
                with torch.cuda.graph(g{stream}):
                    out = self.stages[i](static)
                graphs.append(g)
                outs.append(out)
                statics.append(static)
            self.graphs, self.outs{kept} = graphs, outs{kept_value}

        def decode(self, x: torch.Tensor) -> torch.Tensor:
            for g in self.graphs:
                g.replay()
            return self.outs[-1]
    """


def _findings(lint_project, stream: str = "", keep: bool = False, profile: bool = False) -> list[tuple[str, int, str]]:
    source = textwrap.dedent(DECODER).replace("{stream}", stream) \
        .replace("{kept}", ", self.statics" if keep else "").replace("{kept_value}", ", statics" if keep else "")
    table = {"one-gpu-per-process": True} if profile else {}
    return [(f.rule, f.line, f.severity.name.lower()) for f in lint_project({"pkg/decoder.py": source}, table).findings
            if f.rule in ("GR403", "GR601")]


def test_a_static_input_dropped_after_a_per_gpu_capture_is_freed(lint_project):
    assert _findings(lint_project, stream=", stream=torch.cuda.Stream(device=dev)") == [("GR601", 18, "error")]


def test_static_inputs_kept_through_a_list_the_object_holds_are_alive(lint_project):
    """Clean twin: `statics` ends up on `self`, and so does every tensor appended to it."""
    assert _findings(lint_project, stream=", stream=torch.cuda.Stream(device=dev)", keep=True) == []


def test_capturing_for_each_gpu_of_an_enumerated_device_list_needs_a_stream(lint_project):
    """An error even under an engine profile that says each process drives one GPU: this one drives several."""
    assert _findings(lint_project, keep=True, profile=True) == [("GR403", 17, "error")]


def test_a_stream_per_device_is_quiet(lint_project):
    assert _findings(lint_project, stream=", stream=torch.cuda.Stream(device=dev)", keep=True, profile=True) == []
