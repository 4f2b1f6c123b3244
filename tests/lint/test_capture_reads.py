"""Host reads of what a capture body's layer returns (GR102): the code's own evidence types the result of a call
the lint cannot see into, never a blanket guess."""

from __future__ import annotations

import textwrap

# A hand-written decode-graph capture, as in the README of torch.cuda.graph users: warm up, capture, log.
CAPTURE = """
    import torch


    class DecodeGraph:
        def __init__(self, layer, x_in: torch.Tensor, out: torch.Tensor):
            self.layer, self.x_in, self.out = layer, x_in, out
            self.graph = torch.cuda.CUDAGraph()

        def capture(self, log) -> None:
            with torch.cuda.graph(self.graph):
                y = self.layer(self.x_in)
                {body}
    """


def _findings(lint_project, body: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(CAPTURE).replace("{body}", body.replace("\n", "\n" + " " * 12))
    return [(f.rule, f.line) for f in lint_project({"pkg/graph.py": source}, select=["GR1"]).findings]


def test_reads_of_a_captured_layer_output_fail_the_capture(lint_project):
    body = """self.out.copy_(y)
print("captured", y.sum())
scale = float(y.sum())
log.write("max %s" % y.max())
log.write("max {}".format(y.max()))
log.write(f"{y.max()}")
if bool(y.max()):
    log.write(str(int(y.argmax())))"""
    assert _findings(lint_project, body) == [("GR102", 14), ("GR102", 15), ("GR102", 16), ("GR102", 17),
                                             ("GR102", 18), ("GR102", 19), ("GR102", 20)]


def test_a_reduction_inside_a_capture_body_is_evidence_enough(lint_project):
    """No `copy_` at all: `y.sum()` on what the captured layer returns says it is a tensor."""
    assert _findings(lint_project, "total = float(y.sum())") == [("GR102", 13)]


def test_a_result_nothing_uses_as_a_tensor_is_not_guessed(lint_project):
    """A helper's result the code only logs (a string, a dict of stats) says nothing: quiet."""
    assert _findings(lint_project, 'log.write("built %s" % y)\nprint(y)') == []


# Hot code outside a capture: a `.sum()` may be numpy's, so only tensor-only uses count (`copy_`, torch ops, `@`).
STEP = """
    import torch
    from graphready import hot_path


    @hot_path
    def step(model, sampler, x: torch.Tensor, out: torch.Tensor):
        logits = model(x)
        stats = sampler.stats(x)
        {body}
    """


def _step(lint_project, body: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(STEP).replace("{body}", body.replace("\n", "\n" + " " * 4))
    return [(f.rule, f.line) for f in lint_project({"pkg/step.py": source}, select=["GR1"]).findings]


def test_in_hot_code_a_result_handed_to_torch_is_a_tensor(lint_project):
    body = """out.copy_(torch.argmax(logits, dim=-1))
print("top logit", float(logits.max()))"""
    assert _step(lint_project, body) == [("GR102", 11)]


def test_in_hot_code_a_reduction_alone_is_no_evidence(lint_project):
    """`stats.mean()` could be numpy's: the sampler's statistics stay untyped outside a capture body."""
    assert _step(lint_project, 'print("acceptance", float(stats.mean()))') == []


def test_keeping_the_captured_output_on_the_object_is_no_re_bind(lint_project):
    """PyTorch's documented idiom: what the capture body computes is kept as the graph's static output. Knowing that
    `logits` is a tensor must not turn `self.static_logits = logits` into a state re-bind (GR306)."""
    source = textwrap.dedent("""
        import torch


        class Runner:
            def __init__(self, model, input_ids: torch.Tensor):
                self.model, self.input_ids = model, input_ids
                self.graph = torch.cuda.CUDAGraph()

            def capture(self, stream: torch.cuda.Stream) -> None:
                with torch.cuda.graph(self.graph, stream=stream):
                    logits = self.model(self.input_ids)
                    self.static_next = torch.argmax(logits, dim=-1)
                    self.static_logits = logits
        """)
    assert lint_project({"pkg/runner.py": source}).findings == []


def test_sizes_handed_to_factories_and_later_arguments_are_numbers(lint_project):
    """SGLang 0.5.23 idioms: a helper's token count used as a size (`torch.arange(n)`, `torch.empty((rows, d))`)
    or as a later argument (`torch.narrow(x, 0, 0, n)`) says nothing about a tensor; the branch on it stays quiet."""
    body = """n = self.count_tokens(self.x_in)
rows = self.buffer_len()
positions = torch.arange(n, device=self.x_in.device)
scratch = torch.empty((rows, 16), device=self.x_in.device)
head = torch.narrow(self.x_in, 0, 0, n)
if n % 8 != 0 or rows == 0:
    self.out.copy_(head + positions.sum() + scratch.sum())"""
    assert _findings(lint_project, body) == []
