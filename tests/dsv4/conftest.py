"""Shared fixtures for the dsv4 tests: the tiny preset and synthetic checkpoints written once per session."""

from pathlib import Path

import pytest
import torch

from dsv4.config import preset
from dsv4.formats import QuantizedWeight
from dsv4.synth import write_checkpoint


@pytest.fixture(scope="session")
def tiny():
    return preset("tiny")


@pytest.fixture(scope="session")
def nvfp4_ckpt(tmp_path_factory, tiny) -> Path:
    """tiny, NVFP4 release layout with HF names, in many small shards (about one per layer part)."""
    return write_checkpoint(tiny, tmp_path_factory.mktemp("ckpt") / "nvfp4", "nvfp4", seed=1, shard_bytes=60_000)


@pytest.fixture(scope="session")
def official_ckpt(tmp_path_factory, tiny) -> Path:
    """tiny, official release layout (FP8 + MXFP4) with official names."""
    return write_checkpoint(tiny, tmp_path_factory.mktemp("ckpt") / "official", "official", seed=1,
                            shard_bytes=60_000)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Bit pattern of a tensor, so NaNs and float8 dtypes compare exactly."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def _assert_same_entry(name, a, b):
    """Two loaded entries are the same weight: same class, same stored tensors bit for bit."""
    assert type(a) is type(b), f"{name}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, QuantizedWeight):
        pa, pb = a.parts(), b.parts()
        assert pa.keys() == pb.keys(), name
        for k in pa:
            assert pa[k].dtype == pb[k].dtype and pa[k].shape == pb[k].shape, f"{name}.{k}"
            assert torch.equal(_bits(pa[k]), _bits(pb[k])), f"{name}.{k} differs"
    else:
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(_bits(a), _bits(b)), f"{name} differs"


def _assert_same_weights(a: dict, b: dict):
    assert list(a) == list(b)
    for name in a:
        _assert_same_entry(name, a[name], b[name])


@pytest.fixture(scope="session")
def assert_same_weights():
    """Assert two loaded weight dicts hold the same entries, in order, bit for bit."""
    return _assert_same_weights
