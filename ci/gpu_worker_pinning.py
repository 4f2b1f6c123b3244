"""pytest plugin: pin each pytest-xdist worker to its own GPU before torch initialises CUDA.

`ci/nightly_gpu.py` runs `pytest -n N -p gpu_worker_pinning` with `GRAPHREADY_GPU_POOL=0,1,...`;
worker `gwK` then sees only GPU `pool[K % len(pool)]` as `cuda:0`. The pinning happens when the
plugin is imported, which xdist does after naming the worker and before any test module (or
conftest) can touch CUDA, since CUDA reads `CUDA_VISIBLE_DEVICES` once, at initialisation.
"""

from __future__ import annotations

import os

POOL_VARIABLE = "GRAPHREADY_GPU_POOL"


def pinned_device(worker: str | None, pool: str | None) -> str | None:
    """The GPU id for xdist worker `gwK` from a comma-separated pool; None outside xdist or without a pool."""
    ids = [item.strip() for item in (pool or "").split(",") if item.strip()]
    if not worker or not worker.startswith("gw") or not worker[2:].isdigit() or not ids:
        return None
    return ids[int(worker[2:]) % len(ids)]


_DEVICE = pinned_device(os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(POOL_VARIABLE))
if _DEVICE is not None:
    os.environ["CUDA_VISIBLE_DEVICES"] = _DEVICE

