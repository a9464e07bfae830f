"""``local[N]``: Spark in the driver's JVM, no cluster manager. Nothing to queue and no
scheduler to ask; a standalone master's UI can still be named with ``--url``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuspark.errors import ClusterError
from gpuspark.schedulers.base import Backend, Embedded, Reason, Target, TeamUsage

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["LocalBackend"]

_NEEDS_EXECUTORS = (".resource.gpu.", "spark.executor.cores", "dynamicAllocation", "eventLog")
"""Spec settings that mean nothing without executors: no GPU resources to schedule."""


class LocalBackend(Backend):
    """``local``, ``local[N]``, ``local[*]``."""

    name = "local"
    example = "local[*]"
    in_process = True
    on_this_machine = True

    def __init__(self, standalone: Backend) -> None:
        self._standalone = standalone

    def matches(self, master: str) -> bool:
        return master == "local" or master.startswith("local[")

    def session_spec_conf(self, conf: dict[str, str], spec: ClusterSpec) -> dict[str, str]:
        return {k: v for k, v in conf.items() if not any(d in k for d in _NEEDS_EXECUTORS)}

    def target(
        self,
        spec: ClusterSpec,
        master: str,
        url: str | None = None,
        embedded: Embedded | None = None,
    ) -> Target:
        if url:  # a standalone master's UI named by hand
            return self._standalone.target(spec, master, url)
        raise ClusterError(
            f"master={master!r}: no running standalone master to ask",
            remedy="start it (gpuspark cluster up) or pass --master/--url",
        )

    def usage(self, spec: ClusterSpec, target: Target) -> list[TeamUsage]:
        return self._standalone.usage(spec, target)

    def why(
        self, spec: ClusterSpec, target: Target, app: str, *, namespace: str = "default"
    ) -> Reason:
        return self._standalone.why(spec, target, app, namespace=namespace)
