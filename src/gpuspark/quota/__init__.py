"""Team GPU quotas: rendered for YARN (Capacity Scheduler), Kubernetes (Kueue, Volcano) and
Spark standalone (per-application caps); a job submitted under a team, kept out of other teams'
dataset roots, its directories owned by the team's group; usage vs quota and why an
application waits, from the schedulers' own APIs."""

from __future__ import annotations

from gpuspark.cluster.team_dirs import check_writes, team_output_dir
from gpuspark.quota.render import SCHEDULERS, quota_notes, render_quota, write_quota
from gpuspark.quota.status import TeamUsage, plot_usage, quota_status
from gpuspark.quota.team import (
    app_team,
    check_team_gpus,
    resolve_team,
    submit_under,
    team_app_name,
    team_conf,
)
from gpuspark.quota.why import Reason, explain
from gpuspark.schedulers.kubernetes.kueue import kueue_spark_conf
from gpuspark.schedulers.kubernetes.volcano import volcano_spark_conf
from gpuspark.schedulers.shares import kube_name, yarn_queue_name
from gpuspark.schedulers.standalone.caps import TeamCaps, team_caps
from gpuspark.spec.teams import find_team

__all__ = [
    "SCHEDULERS",
    "Reason",
    "TeamCaps",
    "TeamUsage",
    "app_team",
    "check_team_gpus",
    "check_writes",
    "explain",
    "find_team",
    "kube_name",
    "kueue_spark_conf",
    "plot_usage",
    "quota_notes",
    "quota_status",
    "render_quota",
    "resolve_team",
    "submit_under",
    "team_app_name",
    "team_caps",
    "team_conf",
    "team_output_dir",
    "volcano_spark_conf",
    "write_quota",
    "yarn_queue_name",
]
