"""Headline figures of a spec (what ``gpuspark validate`` prints)."""

from __future__ import annotations

from typing import Any

from gpuspark.spec.models import ClusterSpec
from gpuspark.spec.rules import gpu_slots_per_executor

__all__ = ["summary"]


def summary(spec: ClusterSpec) -> dict[str, Any]:
    """Headline figures of a spec (what ``gpuspark validate`` prints)."""
    return {
        "name": spec.name,
        "hosts": spec.total_hosts,
        "gpus": spec.total_gpus,
        "node_groups": [
            {
                "name": g.name,
                "hosts": len(g.hosts),
                "gpus_per_node": g.gpus_per_node,
                "gpu_model": g.gpu_model,
                "gpus": g.gpus,
            }
            for g in spec.nodes
        ],
        "master": spec.spark.master,
        "task_slots_per_executor": gpu_slots_per_executor(
            spec.spark.executor_gpus, spec.spark.task_gpu_amount
        ),
        "teams": [
            {
                "name": t.name,
                "guaranteed_gpus": t.guaranteed_gpus,
                "max_gpus": t.max_gpus,
                "priority": t.priority,
                "members": len(t.members),
            }
            for t in spec.teams
        ],
        "guaranteed_gpus": sum(t.guaranteed_gpus for t in spec.teams),
    }
