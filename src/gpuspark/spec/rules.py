"""Cross-field rules of a cluster spec: quotas against GPUs, teams' dataset roots apart,
executors against nodes, and Spark's GPU/CPU task-slot agreement. Each problem is a complete
``path=value what-is-wrong`` line."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpuspark import storage
from gpuspark.spec.values import format_number, show_value

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec, SparkSettings

__all__ = ["gpu_slots_per_executor", "rule_violations", "slot_rule"]


def gpu_slots_per_executor(executor_gpus: int, task_gpu_amount: float) -> int:
    """Tasks one executor can run at once by GPU (Spark: ``floor(1/amount)`` per address)."""
    if task_gpu_amount <= 1:
        return executor_gpus * math.floor(1 / task_gpu_amount + 1e-9)
    return executor_gpus // int(task_gpu_amount)


def rule_violations(spec: ClusterSpec) -> list[str]:
    """Every cross-field problem of ``spec`` (empty when it is consistent)."""
    return [
        *_unique_names(spec),
        *_team_rules(spec),
        *_team_roots(spec),
        *_executor_fits_node(spec),
        *slot_rule(spec.spark),
        *_managed_conf(spec.spark),
    ]


def _managed_conf(s: SparkSettings) -> list[str]:
    from gpuspark.spec.models import MANAGED_CONF

    return [
        f'spark.conf."{key}"={show_value(value)} is set by spark.{MANAGED_CONF[key]};'
        " set that instead"
        for key, value in sorted(s.conf.items())
        if key in MANAGED_CONF
    ]


def _unique_names(spec: ClusterSpec) -> list[str]:
    problems = []
    seen: dict[str, str] = {}
    for i, group in enumerate(spec.nodes):
        for j, host in enumerate(group.hosts):
            if host in seen:
                problems.append(f'nodes[{i}].hosts[{j}]="{host}" is already listed in {seen[host]}')
            seen.setdefault(host, f"nodes[{i}].hosts")
    for label, names in (
        ("nodes", [g.name for g in spec.nodes]),
        ("teams", [t.name for t in spec.teams]),
    ):
        first: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in first:
                problems.append(
                    f'{label}[{i}].name="{name}" repeats {label}[{first[name]}].name;'
                    " names must be unique"
                )
            first.setdefault(name, i)
    return problems


def _team_rules(spec: ClusterSpec) -> list[str]:
    problems = []
    total = spec.total_gpus
    for i, team in enumerate(spec.teams):
        if team.max_gpus < team.guaranteed_gpus:
            problems.append(
                f"teams[{i}].max_gpus={team.max_gpus}"
                f" is below guaranteed_gpus={team.guaranteed_gpus}"
            )
        if team.max_gpus > total:
            problems.append(
                f"teams[{i}].max_gpus={team.max_gpus} is above the {total} GPUs in the cluster"
            )
    guaranteed = sum(team.guaranteed_gpus for team in spec.teams)
    if guaranteed > total:
        problems.append(
            f"teams[*].guaranteed_gpus add up to {guaranteed}, more than the {total} GPUs in the"
            " cluster; lower the guarantees to a total of at most"
            f" {total}"
        )
    return problems


def _team_roots(spec: ClusterSpec) -> list[str]:
    """No two teams share a dataset root, and no team's root lies inside another's."""
    from gpuspark.spec.teams import team_root

    roots = [team_root(spec, team) for team in spec.teams]
    problems = []
    for j, later in enumerate(roots):
        for i, earlier in enumerate(roots[:j]):
            if spec.teams[i].name == spec.teams[j].name:
                continue  # a repeated name: _unique_names says so
            if storage.location(later) == storage.location(earlier):
                problems.append(
                    f"{_root_field(spec, j)} is the same as {_root_field(spec, i)};"
                    " each team needs a root of its own"
                )
            elif storage.is_within(later, earlier) or storage.is_within(earlier, later):
                inner, outer = (j, i) if storage.is_within(later, earlier) else (i, j)
                problems.append(
                    f"{_root_field(spec, inner)} lies inside {_root_field(spec, outer)};"
                    " team roots must not nest"
                )
    return problems


def _root_field(spec: ClusterSpec, i: int) -> str:
    """``teams[i].root="..."``, or ``teams[i].root (default "...")`` when not set."""
    from gpuspark.spec.teams import team_root

    team = spec.teams[i]
    if team.root is not None:
        return f'teams[{i}].root="{team.root}"'
    return f'teams[{i}].root (default "{team_root(spec, team)}")'


def _executor_fits_node(spec: ClusterSpec) -> list[str]:
    problems = []
    s = spec.spark
    for i, group in enumerate(spec.nodes):
        if s.executor_gpus > group.gpus_per_node:
            problems.append(
                f"spark.executor_gpus={s.executor_gpus} is above nodes[{i}].gpus_per_node="
                f"{group.gpus_per_node}; an executor runs on one node"
            )
        if s.executor_cores > group.cpu_cores:
            problems.append(
                f"spark.executor_cores={s.executor_cores} is above nodes[{i}].cpu_cores="
                f"{group.cpu_cores}; an executor runs on one node"
            )
    return problems


def slot_rule(s: SparkSettings) -> list[str]:
    """GPU task slots per executor must equal CPU task slots, else Spark idles one of them."""
    if s.task_gpu_amount > s.executor_gpus:
        return [
            f"spark.task_gpu_amount={format_number(s.task_gpu_amount)} is above executor_gpus="
            f"{s.executor_gpus}; a task cannot use more GPUs than its executor has"
        ]
    if s.task_cpus > s.executor_cores:
        return [f"spark.task_cpus={s.task_cpus} is above executor_cores={s.executor_cores}"]
    gpu_slots = gpu_slots_per_executor(s.executor_gpus, s.task_gpu_amount)
    cpu_slots = s.executor_cores // s.task_cpus
    if gpu_slots == cpu_slots:
        return []
    fix = f"set executor_cores={gpu_slots * s.task_cpus}"
    if s.executor_cores % gpu_slots == 0:
        fix += f" or task_cpus={s.executor_cores // gpu_slots}"
    idle = "cores" if cpu_slots > gpu_slots else "GPU shares"
    return [
        f"spark.executor_cores={s.executor_cores} gives {cpu_slots} task slots per executor"
        f" (executor_cores / task_cpus = {s.executor_cores} / {s.task_cpus}) but the GPUs give"
        f" {gpu_slots} (executor_gpus / task_gpu_amount = {s.executor_gpus} /"
        f" {format_number(s.task_gpu_amount)}); Spark would leave {idle} idle: {fix}"
    ]
