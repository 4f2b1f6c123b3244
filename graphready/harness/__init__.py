"""`graphready check`: the dynamic harness that captures, replays and explains units on a GPU.

Importing this package never imports torch; the checks import it when they run.
"""

from graphready.harness.unit import Unit

__all__ = ["Unit"]
