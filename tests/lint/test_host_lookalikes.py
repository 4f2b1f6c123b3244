"""Host code that reads like device code (found linting CPython's standard library with every function hot).

A method named like a tensor's but called with another signature (`tree.item(iid, "values")`) or named for a
keyword (`flags.is_(key, FROZEN)` is not an in-place op like `state.add_(1)`), a buffer built
by a builtin (`memoryview(b).cast("I").tolist()`) and state that grows rather than counts (`self.data |= other`
on a dict, `self.log += f"..."`) are host work: no GR101 / GR303. Each has a twin that still fires.
"""

from __future__ import annotations

import textwrap

HEADER = "import array\n\nimport torch\nfrom graphready import hot_path\n\n\n"


def _found(lint_project, body: str, select: str) -> list[tuple[str, int]]:
    source = HEADER + textwrap.dedent(body).lstrip()
    return [(f.rule, f.line) for f in lint_project({"pkg/mod.py": source}, select=[select]).findings]


def test_item_with_arguments_is_not_the_tensor_method(lint_project):
    body = """
        @hot_path
        def step(tree, x: torch.Tensor, values):
            values.append(tree.item(0, "values"))  # a widget's or numpy array's item(i): host
            values.append(x.numpy(force=True))
            values.append(torch.Tensor.item(x))  # the tensor method called through its class
            return x.tolist()
        """
    assert _found(lint_project, body, "GR101") == [("GR101", 10), ("GR101", 11), ("GR101", 12)]


def test_builtin_buffers_and_the_array_module_are_host_data(lint_project):
    body = """
        @hot_path
        def step(b: bytes, x: torch.Tensor):
            codes = memoryview(b).cast("I").tolist()
            words = array.array("i", range(16)).tolist()
            return codes, words, x.tolist()
        """
    assert _found(lint_project, body, "GR101") == [("GR101", 11)]


STATE = """
    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.data = {}
            self.log = ""
            self.pos = 0
            self.buf = torch.zeros(16)

        @hot_path
        def forward(self, x: torch.Tensor, other: dict):
            self.data |= other
            self.log += f"step {self.pos}"
            self.pos += 1
            keys = sorted(self.data)
            words = bytes(self.log, "utf-8")
            return self.kernel(x, self.data, self.log, keys, words, self.pos)
    """


def test_growing_state_is_not_a_step_counter(lint_project):
    found = _found(lint_project, STATE, "GR303")
    assert found == [("GR303", 22)], found  # only `self.pos`, a number stepped every call


def test_builtins_are_not_kernels(lint_project):
    body = """
        class Step(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.pos = 0

            @hot_path
            def forward(self, x: torch.Tensor):
                self.pos += 1
                tag = repr(self.pos), format(self.pos, "d"), divmod(self.pos, 2), iter([self.pos])
                return x.narrow(0, self.pos, 1), tag
        """
    assert _found(lint_project, body, "GR303") == [("GR303", 16)]


def test_a_method_named_for_a_keyword_is_not_an_in_place_op(lint_project):
    body = """
        @hot_path
        def step(key, make):
            flags = make()
            state = make()
            state.add_(1)
            if flags.is_(key, 0):  # tomllib's Flags.is_: `is` is a keyword, the underscore no in-place mark
                return None
            if state:
                return state
        """
    assert _found(lint_project, body, "GR103") == [("GR103", 14)]
