"""Property: lint never raises on valid Python, whatever its shape (hypothesmith writes the code).

Every generated module is linted with every function hot, and again with its code as the body of
a hot function, so the rules and the tensor inference see every kind of statement and expression.
Bounded to run in well under a minute.
"""

from __future__ import annotations

import tempfile
import textwrap
import warnings
from pathlib import Path

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings

from graphready.config import parse_table
from graphready.lint.engine import lint

HOT_HEADER = "import torch\nfrom graphready import hot_path\n\n\n@hot_path\ndef step(x: torch.Tensor, y):\n"


def _as_hot_body(source: str) -> str | None:
    body = HOT_HEADER + textwrap.indent(source, "    ") + "\n    pass\n"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # `1()` and the like compile, with a warning
            compile(body, "hot.py", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # `from __future__`, `__future__` placement and the like only work at module level
    return body


@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # hypothesmith compiles what it generates
@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(source=hypothesmith.from_grammar())
def test_lint_never_raises_on_generated_python(source):
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory).resolve()
        (root / "generated.py").write_text(source, encoding="utf-8")
        body = _as_hot_body(source)
        if body is not None:
            (root / "hot.py").write_text(body, encoding="utf-8")
        config = parse_table({}, root, None)
        config.hot_paths = ["*:*"]  # every function hot, as a profile root (a file may define none)
        result = lint(config, [root], use_cache=False)
        assert result.files == 1 + (body is not None)
