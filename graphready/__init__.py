"""graphready: find what breaks CUDA-graph capture and replay, statically and on the GPU.

Importing this package never imports torch, so `graphready lint` can run in pre-commit.
"""

from graphready.markers import hot_path

__all__ = ["hot_path", "__version__"]
__version__ = "0.1.0"
