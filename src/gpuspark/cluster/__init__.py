"""The embedded Spark standalone cluster and the SparkSession builder."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "LocalCluster": "gpuspark.cluster.local",
    "session": "gpuspark.cluster.builder",
    "session_plan": "gpuspark.cluster.builder",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuspark.cluster' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
