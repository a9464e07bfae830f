"""Spark standalone's only quota: per-application caps. Standalone schedules applications FIFO
and knows no queues, so a team's ceiling becomes ``spark.cores.max`` and
``spark.dynamicAllocation.maxExecutors``, chosen so that executors x GPUs per executor can never
exceed the team's ``max_gpus``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from gpuspark.errors import LaunchError, SpecError
from gpuspark.spec.teams import find_team

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec, Team

__all__ = ["TeamCaps", "team_caps"]


@dataclass(frozen=True)
class TeamCaps:
    """The per-application caps that keep one application of a team within its ``max_gpus``."""

    cores_max: int
    """``spark.cores.max``: executor cores of all the team's executors together."""
    max_executors: int
    """``spark.dynamicAllocation.maxExecutors``: executors the application may hold at once."""
    executor_gpus: int
    """GPUs per executor (the spec's ``spark.executor_gpus``)."""
    max_gpus: int
    """The team's ceiling; ``max_executors * executor_gpus`` never exceeds it."""

    @property
    def gpus(self) -> int:
        """GPUs an application holds at most under these caps."""
        return self.max_executors * self.executor_gpus

    def conf(self) -> dict[str, str]:
        """The Spark properties that enforce the caps."""
        return {
            "spark.cores.max": str(self.cores_max),
            "spark.dynamicAllocation.maxExecutors": str(self.max_executors),
        }


def team_caps(
    spec: ClusterSpec,
    team: str | Team,
    *,
    executor_gpus: int | None = None,
    executor_cores: int | None = None,
) -> TeamCaps:
    """Caps for ``team`` on Spark standalone: as many whole executors as fit in its
    ``max_gpus``, with executors of ``executor_gpus`` GPUs and ``executor_cores`` cores (a
    running cluster's shape; default: the spec's ``[spark]``).

    Raises :class:`~gpuspark.errors.SpecError` when not even one executor of the spec's shape
    fits, :class:`~gpuspark.errors.LaunchError` naming the running cluster when one of the
    given shape does not.
    """
    found = find_team(spec, team)
    per_executor = int(executor_gpus or spec.spark.executor_gpus)
    cores = int(executor_cores or spec.spark.executor_cores)
    executors = found.max_gpus // per_executor if per_executor else 0
    if executors < 1:
        if executor_gpus:
            _refuse_running(found, per_executor, spec.spark.executor_gpus)
        _refuse(found, per_executor)
    return TeamCaps(
        cores_max=executors * cores,
        max_executors=executors,
        executor_gpus=per_executor,
        max_gpus=found.max_gpus,
    )


def _refuse_running(found: Team, per_executor: int, spec_gpus: int) -> NoReturn:
    """A job-time refusal: the running cluster's executors (``cluster up`` sized them, not
    the job's spec) are larger than the team's ceiling."""
    most = found.max_gpus
    raise LaunchError(
        f"team {found.name!r} may hold {_gpus(most)}, less than one executor's "
        f"{_gpus(per_executor)} on the running cluster (its executors as `gpuspark cluster "
        f"up` sized them; the spec's [spark] executor_gpus = {spec_gpus} does not size a "
        "running cluster)",
        remedy=f"restart the cluster with executors of at most {_gpus(most)} "
        f"(`gpuspark cluster down && gpuspark cluster up --gpus {most}`), or raise the "
        f"team's max_gpus to at least {per_executor}",
    )


def _gpus(count: int) -> str:
    return f"{count} GPU{'' if count == 1 else 's'}"


def _refuse(found: Team, per_executor: int) -> NoReturn:
    raise SpecError(
        f"team '{found.name}' has max_gpus={found.max_gpus}, below one executor's"
        f" spark.executor_gpus={per_executor}",
        remedy=f"raise teams.max_gpus to at least {per_executor}"
        f" or lower spark.executor_gpus to at most {found.max_gpus}",
    )
