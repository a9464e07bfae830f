"""Shared fixtures of the training tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuspark.data.write import ShardWriter


@pytest.fixture
def ct_data(tmp_path: Path) -> str:
    """A tiny CT-like dataset: 8 uint8 volumes of 8^3, labels 0/1, a train and a val split."""
    rng = np.random.default_rng(0)
    with ShardWriter(tmp_path / "ct") as w:
        for i in range(8):
            vol = rng.integers(0, 255, (8, 8, 8), dtype=np.uint8)
            w.write({"volume": vol, "label": i % 2}, split="train" if i % 4 else "val")
    return str(tmp_path / "ct")
