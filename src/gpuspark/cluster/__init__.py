"""The embedded Spark standalone cluster and the one session path.

``session``/``job_session`` turn (spec or the built-in spec) + the kind of job into a
SparkSession; ``LocalCluster`` is the embedded cluster; ``embedded_shape`` sizes it from a spec.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "EmbeddedShape": "gpuspark.cluster.shape",
    "JobKind": "gpuspark.cluster.session",
    "LocalCluster": "gpuspark.cluster.local",
    "SessionPlan": "gpuspark.cluster.session",
    "embedded_shape": "gpuspark.cluster.shape",
    "job_session": "gpuspark.cluster.session",
    "session": "gpuspark.cluster.session",
    "session_plan": "gpuspark.cluster.session",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuspark.cluster' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
