"""Team GPU quotas: rendered for YARN (Capacity Scheduler), Kubernetes (Kueue, Volcano) and
Spark standalone (per-application caps); a job submitted under a team; usage vs quota and why
an application waits, from the schedulers' own APIs."""

from __future__ import annotations

from gpuspark.quota.kueue import kueue_spark_conf
from gpuspark.quota.render import SCHEDULERS, quota_notes, render_quota, write_quota
from gpuspark.quota.shares import kube_name, yarn_queue_name
from gpuspark.quota.standalone import TeamCaps, find_team, team_caps
from gpuspark.quota.volcano import volcano_spark_conf

__all__ = [
    "SCHEDULERS",
    "TeamCaps",
    "find_team",
    "kube_name",
    "kueue_spark_conf",
    "quota_notes",
    "render_quota",
    "team_caps",
    "volcano_spark_conf",
    "write_quota",
    "yarn_queue_name",
]
