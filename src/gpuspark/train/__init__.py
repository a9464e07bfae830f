"""Distributed training: DDP toolkit, training loop, checkpoints and recipes.

``run`` and ``restart_count`` are the launcher's (:mod:`gpuspark.launch`), kept here for
training code. Public names are loaded lazily so ``import gpuspark.train`` does not import
torch or pyspark.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "run": "gpuspark.launch",
    "restart_count": "gpuspark.launch",
    "prepare": "gpuspark.train.ddp",
    "comm_meter": "gpuspark.train.ddp",
    "memory_accounting": "gpuspark.train.fsdp",
    "export_consolidated": "gpuspark.train.sharded",
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
