"""`graphready check`: the dynamic harness that captures, replays and explains units on a GPU.

    from graphready.harness import Unit, assert_graph_ready

Importing this package never imports torch (or pytest); the checks import torch when they run.
"""

from graphready.harness.unit import Unit

__all__ = ["Unit", "assert_graph_ready", "check_graph_unit"]


def __getattr__(name: str):
    if name in ("assert_graph_ready", "check_graph_unit"):
        from graphready.harness import pytest_plugin

        return getattr(pytest_plugin, name)
    raise AttributeError(f"module 'graphready.harness' has no attribute {name!r}")
