from pathlib import Path

import pytest

from graphready.findings import Finding, Severity

SOURCE = """import torch
from graphready import hot_path


@hot_path
def post_block(x):
    peak = x.abs().max().item()
    return x * 0.5
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text(SOURCE)
    return tmp_path


@pytest.fixture
def host_sync():
    """Builds the `.item()` finding on line 7 of SOURCE, columns 11..31 (0-based, end exclusive)."""
    return make_host_sync


def make_host_sync(**overrides) -> Finding:
    fields = dict(
        path="pkg/model.py", line=7, column=11, end_column=31, rule="GR101", name="host-sync",
        severity=Severity.ERROR, message="`.item()` copies a device value to the host",
        hot_chain=["pkg.model:step", "pkg.model:post_block"], fingerprint="f00d",
    )
    fields.update(overrides)
    return Finding(**fields)
