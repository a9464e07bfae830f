"""Distributed training: launcher, DDP toolkit, checkpoints and recipes.

Public names are loaded lazily so ``import gpuspark.train`` does not import torch or pyspark.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "run": "gpuspark.train.launch",
    "restart_count": "gpuspark.train.launch",
    "prepare": "gpuspark.train.ddp",
    "comm_meter": "gpuspark.train.ddp",
    "fit": "gpuspark.train.loop",
    "FitConfig": "gpuspark.train.loop",
    "RecipeConfig": "gpuspark.train.recipes",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuspark.train' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
