"""Spark settings the user gave that a session would not apply: refused, with the reason.

The user's settings are the spec's ``[spark.conf]`` and the job's ``--conf`` (folded into
it, see :func:`gpuspark.cli._common.spec_with_conf`). gpuspark replaces some of them on
purpose: the embedded cluster's executors have the shape ``cluster up`` gave them, training
turns dynamic allocation off and asks whole GPUs through its barrier stage's task resource
profile. A value replaced so used to be dropped without a word (``launch --conf
spark.executor.memory=…`` ran with the old memory); now the session is refused before Spark
starts, naming what to change instead. Settings a spec keeps for the real cluster (its event
log, discovery script, memory overhead, driver memory) are left out on the embedded cluster
with a note, not refused: the same spec serves both.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuspark.errors import ClusterError
from gpuspark.spec.models import MANAGED_CONF

__all__ = ["REAL_CLUSTER_ONLY", "check_given"]

REAL_CLUSTER_ONLY = ("discoveryScript", "eventLog", "memoryOverhead", "spark.driver.memory")
"""Parts of Spark keys that describe the real cluster; the embedded one leaves them out."""

_RESTART = (
    "change it in the spec's [spark] section and restart the cluster (`gpuspark cluster down`, "
    "then `gpuspark cluster up --spec FILE`), or run on another cluster with --master"
)


def real_cluster_only(key: str) -> bool:
    """Whether ``key`` describes the real cluster (left out on the embedded one)."""
    return any(part in key for part in REAL_CLUSTER_ONLY)


def check_given(
    given: Mapping[str, str],
    merged: Mapping[str, str],
    *,
    training: bool,
    embedded: bool,
) -> list[str]:
    """Notes for the spec's real-cluster settings the embedded cluster leaves out; raises
    :class:`ClusterError` listing every other setting of ``given`` whose value does not reach
    the session's ``merged`` conf (or, for training, its barrier stage)."""
    notes: list[str] = []
    refused: list[str] = []
    for key, value in sorted(given.items()):
        note = _left_out(key, value, merged, training=training, embedded=embedded)
        if note is not None:
            notes.append(note)
            continue
        reason = _reason(key, value, merged, training=training, embedded=embedded)
        if reason is not None:
            refused.append(f"{key}={value}: {reason}")
    if refused:
        raise ClusterError(
            f"{len(refused)} Spark setting{'s' if len(refused) > 1 else ''} would not apply: "
            + "; ".join(refused),
            remedy="leave out those --conf settings (or [spark.conf] keys), or change what "
            "the reason names",
        )
    return notes


def _left_out(
    key: str, value: str, merged: Mapping[str, str], *, training: bool, embedded: bool
) -> str | None:
    """A note when ``key`` is left out on purpose: the spec's real-cluster settings on the
    embedded cluster; GPU scheduling and dynamic allocation on a single-machine master."""
    if training:
        return None
    if embedded and real_cluster_only(key) and merged.get(key) != value:
        return f"{key}={value} describes the real cluster; the embedded one leaves it out"
    if key in merged:
        return None
    if not embedded:
        return f"{key}={value} does not apply to this master; left out"
    return None


def _reason(
    key: str, value: str, merged: Mapping[str, str], *, training: bool, embedded: bool
) -> str | None:
    """Why ``key=value`` would not apply, or ``None`` when it reaches the session."""
    if training and key == "spark.task.resource.gpu.amount":
        return (
            "a training job's tasks ask whole GPUs through its barrier stage's task resource "
            "profile (launch --gpus-per-process); this setting is the share a data job's tasks take"
        )
    if training and key.startswith("spark.dynamicAllocation."):
        return (
            "training runs barrier stages, which Spark refuses under dynamic allocation "
            "(SPARK-24942), so gpuspark turns it off for training jobs"
        )
    if _reaches(key, value, merged):
        return None
    if embedded and key in MANAGED_CONF:
        now = merged.get(key)
        has = f"have {key}={now}" if now is not None else "have no GPU slots"
        return (
            f"the embedded cluster's executors {has}, as `gpuspark cluster up` sized them "
            f"from the spec's spark.{MANAGED_CONF[key]} and this machine; {_RESTART}"
        )
    if embedded:
        now = merged.get(key)
        return (
            f"the embedded cluster sets {key}={now} itself (its driver and executors run on "
            "this machine); run on another cluster with --master to choose it"
            if now is not None
            else "the embedded cluster does not use it; run on another cluster with --master"
        )
    return f"gpuspark sets it to {merged.get(key)!r} for this job"


def _reaches(key: str, value: str, merged: Mapping[str, str]) -> bool:
    """Whether the session's conf holds ``value`` for ``key`` (Java options: as a part)."""
    now = merged.get(key)
    if now is None:
        return False
    if key.endswith("JavaOptions"):
        return value.strip() in now
    return now == value
