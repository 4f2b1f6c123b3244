"""A function whose last line ends in a backslash continuation (found linting DeepSpeed 0.19.8 with every function
hot: `module_inject/containers/bert.py` returns a tuple written `return a, \\` before a blank line).

Python joins that line with the blank one after it, so the file is valid; ast ends the function at its last token,
and the function's own lines, parsed alone, ended in a continuation: lint reported GR001 ("libcst cannot parse this
function") on valid code, ran none of the function's rules, and the branch tests of chains through it were lost.
"""

from __future__ import annotations

import textwrap

RUNNER = textwrap.dedent("""
    import torch
    from graphready import hot_path


    class Runner:
        def sizes(self, x: torch.Tensor):
            return x.shape[0], \\
                   int(x.sum().item()), \\

        @hot_path
        def step(self, x: torch.Tensor):
            if self.dynamic:
                self.sizes(x)
            return x * 2, \\

        def other(self):
            return 1
    """).lstrip()


def test_a_function_ending_in_a_continuation_is_linted(lint_project):
    result = lint_project({"pkg/run.py": RUNNER})
    assert [(f.rule, f.line, f.hot_chain) for f in result.findings] == [
        ("GR101", 8, ["pkg.run:Runner.step", "pkg.run:Runner.sizes [if self.dynamic]"])]


def test_a_comment_ending_in_a_backslash_is_not_a_continuation(lint_project):
    source = RUNNER.replace("return x * 2, \\", "return x * 2  # C:\\")
    result = lint_project({"pkg/run.py": source})
    assert [(f.rule, f.line) for f in result.findings] == [("GR101", 8)]
