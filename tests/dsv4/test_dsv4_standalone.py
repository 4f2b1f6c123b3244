"""dsv4 is graphready's first target, not a part of it: it runs without graphready installed."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import dsv4

REPO = Path(__file__).resolve().parents[2]


def test_dsv4_imports_nothing_of_graphready():
    """Its hot-path roots are `# graphready: hot` comments, which the linter reads and Python ignores."""
    modules = [m.name for m in pkgutil.walk_packages(dsv4.__path__, "dsv4.")]
    code = (f"import importlib, sys\nfor name in {modules!r}:\n    importlib.import_module(name)\n"
            "assert 'graphready' not in sys.modules, sorted(m for m in sys.modules if m.startswith('graphready'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(modules) > 20
