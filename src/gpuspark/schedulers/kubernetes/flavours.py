"""The queueing flavours of Spark on Kubernetes and what puts a team's job in its queue.

The spec's ``spark.kubernetes.scheduler.name`` picks the flavour: ``volcano``, ``yunikorn``,
anything else Kueue (the default scheduler, with Kueue's admission). Per flavour, a team's
job gets (Spark's own settings for each):

- Kueue: the ``kueue.x-k8s.io/queue-name`` label (the team's LocalQueue) and the team's
  ``kueue.x-k8s.io/priority-class`` on driver and executor pods;
- Volcano: ``spark.kubernetes.scheduler.name=volcano``, its feature step, and the team's
  PodGroup template (``spark.kubernetes.scheduler.volcano.podGroupTemplateFile``);
- YuniKorn: the ``queue=root.<team>`` label and the app-id annotation that groups the pods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuspark.schedulers.kubernetes import kueue, volcano
from gpuspark.schedulers.shares import kube_name

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec

__all__ = ["FLAVOURS", "SCHEDULER", "flavour", "team_settings", "yunikorn_queue"]

SCHEDULER = "spark.kubernetes.scheduler.name"
FLAVOURS = ("kueue", "volcano", "yunikorn")


def flavour(spec: ClusterSpec) -> str:
    """``kueue``, ``volcano`` or ``yunikorn``, from the spec's ``[spark.conf]``."""
    name = spec.spark.conf.get(SCHEDULER, "")
    return name if name in FLAVOURS else "kueue"


def yunikorn_queue(team: str) -> str:
    """A team's YuniKorn queue: ``root.<team>``."""
    return f"root.{team}"


def team_settings(
    spec: ClusterSpec, team: str, *, podgroup_template: str, priority: bool = False
) -> dict[str, str]:
    """The Spark settings that put a job of ``team`` in its queue (pod labels, scheduler);
    ``podgroup_template``: where Spark reads the team's Volcano PodGroup template;
    ``priority``: Kueue's priority-class label too (its WorkloadPriorityClass must exist:
    ``render kueue`` and ``render k8s`` write one per team)."""
    kind = flavour(spec)
    if kind == "volcano":
        return {
            SCHEDULER: "volcano",
            "spark.kubernetes.driver.pod.featureSteps": volcano.FEATURE_STEP,
            "spark.kubernetes.executor.pod.featureSteps": volcano.FEATURE_STEP,
            "spark.kubernetes.scheduler.volcano.podGroupTemplateFile": podgroup_template,
        }
    if kind == "yunikorn":
        # Spark's "Using Apache YuniKorn as Customized Scheduler": the queue label and the
        # app-id annotation that groups the driver and executor pods.
        return {
            SCHEDULER: "yunikorn",
            "spark.kubernetes.driver.label.queue": yunikorn_queue(team),
            "spark.kubernetes.executor.label.queue": yunikorn_queue(team),
            "spark.kubernetes.driver.annotation.yunikorn.apache.org/app-id": "{{APP_ID}}",
            "spark.kubernetes.executor.annotation.yunikorn.apache.org/app-id": "{{APP_ID}}",
        }
    name = kube_name(team)  # the team's LocalQueue (render kueue names it so)
    labels = {kueue.QUEUE_LABEL: name}
    if priority:
        labels[kueue.PRIORITY_LABEL] = f"{name}-priority"
    return {
        f"spark.kubernetes.{role}.label.{label}": value
        for role in ("driver", "executor")
        for label, value in labels.items()
    }
