"""Why an application waits, in plain words with the fix, from the scheduler's own diagnostics:
the master's backend (:mod:`gpuspark.schedulers`) reads them and classifies (standalone: shape,
team ceiling, full cluster; YARN: the Capacity Scheduler's diagnostics; Kueue: a Workload's
conditions)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gpuspark.quota.status import target
from gpuspark.schedulers import Reason, backend_for
from gpuspark.schedulers.kubernetes.api import classify_kueue
from gpuspark.schedulers.standalone.why import SHAPE_LOG, why_standalone
from gpuspark.schedulers.yarn.api import YARN_MESSAGES, classify_yarn

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "SHAPE_LOG",
    "YARN_MESSAGES",
    "Reason",
    "classify_kueue",
    "classify_yarn",
    "explain",
    "why_standalone",
]


def explain(
    spec: ClusterSpec,
    app: str,
    *,
    master: str | None = None,
    url: str | None = None,
    namespace: str = "default",
    state_dir: str | os.PathLike[str] | None = None,
) -> Reason:
    """Why ``app`` waits on the live scheduler of ``master`` (see
    :func:`gpuspark.quota.status.target`): a standalone application id or name, a YARN
    application id, or a Kueue Workload name in ``namespace``."""
    where = target(spec, master, url, state_dir)
    backend = backend_for(master or spec.spark.master)
    return backend.why(spec, where, app, namespace=namespace)
