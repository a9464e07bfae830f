"""Checks of the cluster, on values read from it: the master and its workers (the master's
``/json/`` page), the executors' Python, GPU discovery and slots, barrier capacity, dynamic
allocation. :mod:`gpuspark.doctor.live` reads the values; everything here is pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpuspark.cluster.session import check_slots
from gpuspark.doctor.report import Check, failure, info, ok, warning
from gpuspark.errors import GpusparkError
from gpuspark.launch import check_capacity

__all__ = [
    "CAPACITY_CHECK",
    "FACT_KEYS",
    "capacity_check",
    "discovery_output_check",
    "disjoint_check",
    "dynamic_allocation_check",
    "executor_gpu_checks",
    "executor_job_failure",
    "python_check",
    "slot_check",
    "workers_check",
]

FACT_KEYS = ("python", "executable", "gpuspark", "torch")
"""What must be the same on the driver and every executor."""
CAPACITY_CHECK = "training capacity"
"""The name of :func:`capacity_check`'s check (the probe is skipped when it fails)."""
_TASK_HOST = re.compile(r"\((\S+) executor (\S+)\)")
_PYTHON_FIX = (
    "point spark.pyspark.python / PYSPARK_PYTHON at the driver's Python (the same path on every "
    "node), or install the same Python, gpuspark and torch there"
)


def workers_check(workers: Sequence[Mapping[str, Any]]) -> Check:
    """Workers the master lists (its ``/json/`` page): all ALIVE, at least one."""
    alive = [w for w in workers if w.get("state") == "ALIVE"]
    if not alive:
        return failure(
            "workers registered",
            "the master lists no ALIVE worker",
            "start workers (gpuspark cluster up, or start-worker.sh spark://…) and see their logs",
        )
    cores = sum(int(w.get("cores", 0)) for w in alive)
    evidence = f"{len(alive)} ALIVE worker(s), {cores} cores"
    dead = [f"{w.get('host')}:{w.get('port')}" for w in workers if w.get("state") != "ALIVE"]
    if dead:
        return warning(
            "workers registered",
            f"{evidence}; not alive: {', '.join(dead)}",
            "see those workers' logs; restart them",
        )
    return ok("workers registered", evidence)


def _differences(driver: Mapping[str, Any], facts: Mapping[str, Any]) -> list[str]:
    return [
        f"{key} {facts.get(key)} (driver: {driver.get(key)})"
        for key in FACT_KEYS
        if facts.get(key) != driver.get(key)
    ]


def python_check(driver: Mapping[str, Any], executors: Sequence[Mapping[str, Any]]) -> Check:
    """Every executor runs the driver's Python, gpuspark and torch; a failure names the hosts."""
    name = "executors' Python"
    if not executors:
        return failure(name, "no executor answered", "see `workers registered` and the app's log")
    by_host: dict[str, list[str]] = {}
    for facts in executors:
        diff = _differences(driver, facts)
        if diff:
            by_host.setdefault(str(facts.get("host")), diff)
    if by_host:
        shown = "; ".join(f"executor on {host}: {', '.join(d)}" for host, d in by_host.items())
        return failure(name, shown, _PYTHON_FIX)
    hosts = sorted({str(f.get("host")) for f in executors})
    return ok(
        name,
        f"{len(executors)} task(s) on {', '.join(hosts)} run {driver.get('executable')} "
        f"(Python {driver.get('python')}, gpuspark {driver.get('gpuspark')}, "
        f"torch {driver.get('torch')}) like the driver",
    )


def executor_job_failure(message: str) -> Check:
    """The tiny Python job itself failed: the error's telling line and the executor's host."""
    host = _TASK_HOST.search(message)
    where = f"executor on {host.group(1)}" if host else "an executor"
    telling = next(
        (
            ln.strip()
            for ln in message.splitlines()
            if "PYTHON_VERSION_MISMATCH" in ln or "ModuleNotFoundError" in ln or "Error:" in ln
        ),
        message.strip().splitlines()[0] if message.strip() else "no message",
    )
    return failure(
        "executors' Python", f"{where} could not run a Python task: {telling[:300]}", _PYTHON_FIX
    )


def executor_gpu_checks(executors: Sequence[Mapping[str, Any]]) -> list[Check]:
    """On executors with ``nvidia-smi``: torch sees GPUs and was built for a CUDA the driver
    supports. Executors without NVIDIA tools give one information line."""
    with_gpu = [f for f in executors if f.get("nvidia_smi")]
    if not with_gpu:
        return [info("GPUs in executors", "no nvidia-smi on the executors: no real GPU to check")]
    checks: list[Check] = []
    for host in sorted({str(f.get("host")) for f in with_gpu}):
        seen = [f for f in with_gpu if str(f.get("host")) == host]
        worst = min(int(f.get("torch_gpus") or 0) for f in seen)
        cuda = seen[0].get("torch_cuda")
        name = f"GPUs in executors ({host})"
        if worst == 0:
            why = seen[0].get("error") or f"torch CUDA {cuda}"
            checks.append(
                failure(
                    name,
                    f"torch sees no GPU in a task on {host} ({why})",
                    "install a CUDA build of torch there; check CUDA_VISIBLE_DEVICES "
                    "and the discovery script",
                )
            )
        else:
            checks.append(ok(name, f"torch (CUDA {cuda}) sees {worst}+ GPU(s) in each task"))
    return checks


def discovery_output_check(worker: str, output: str | None) -> Check:
    """A GPU discovery script's output: JSON ``{"name": "gpu", "addresses": [...]}``."""
    name = f"GPU discovery ({worker})"
    if output is None:
        return failure(
            name,
            "discovery script missing or failing",
            "install getGpusResources.sh where spark.worker.resource.gpu."
            "discoveryScript points, executable",
        )
    try:
        data = json.loads(output)
        addresses = [str(a) for a in data["addresses"]]
        if data["name"] != "gpu":
            raise ValueError(data["name"])
    except (ValueError, KeyError, TypeError):
        return failure(
            name,
            f"not Spark's resource JSON: {output.strip()[:120]!r}",
            'the script must print {"name": "gpu", "addresses": ["0", ...]}',
        )
    return ok(name, f"prints valid JSON: addresses {', '.join(addresses) or 'none'}")


def disjoint_check(workers: Sequence[Mapping[str, Any]], simulated: bool) -> Check:
    """GPU addresses the master's workers advertise: no address twice on one host."""
    seen: dict[tuple[str, str], str] = {}
    clashes: list[str] = []
    total = 0
    for w in workers:
        wid = f"{w.get('host')}:{w.get('port')}"
        for address in (w.get("resources") or {}).get("gpu", {}).get("addresses", []):
            total += 1
            key = (str(w.get("host")), str(address))
            if key in seen:
                clashes.append(f"GPU {address} on {key[0]} ({seen[key]} and {wid})")
            seen[key] = wid
    if clashes:
        return failure(
            "GPU addresses disjoint",
            "; ".join(clashes),
            "give each worker on a host its own GPUs (one discovery script per worker, "
            "or one worker per node)",
        )
    kind = "simulated (no NVIDIA GPU: gloo on CPU)" if simulated else "real"
    return ok(
        "GPU addresses disjoint",
        f"{total} GPU address(es) on {len(workers)} worker(s), none shared; {kind}",
    )


def slot_check(conf: Mapping[str, str], simulated: bool) -> Check:
    """Executor GPUs, task GPU amount and cores agree (the spec validator's slot rule)."""

    name = "GPU slots"
    gpus = conf.get("spark.executor.resource.gpu.amount")
    amount = conf.get("spark.task.resource.gpu.amount")
    if not gpus:
        return info(name, "no spark.executor.resource.gpu.amount: the session schedules no GPU")
    try:
        check_slots(dict(conf))
    except GpusparkError as exc:
        return failure(name, str(exc).splitlines()[0], exc.remedy or "")
    cores = conf.get("spark.executor.cores", "?")
    kind = "SIMULATED slots (no NVIDIA GPU here)" if simulated else "real GPUs"
    return ok(name, f"executors: {gpus} GPU(s), {cores} cores, {amount} GPU per task: {kind}")


def capacity_check(cap: Any, world_size: int | None) -> Check:
    """Whole-GPU barrier slots vs the world size asked for (``None``: just report them)."""

    name = CAPACITY_CHECK
    gpus_per_task = 1.0 if cap.gpus_per_executor > 0 else 0.0
    slots = cap.slots(gpus_per_task)
    unit = "whole-GPU" if gpus_per_task else "CPU"
    evidence = f"{slots} {unit} barrier slot(s) on {cap.executors} executor(s)"
    if world_size is None:
        return (
            ok(name, evidence)
            if slots
            else failure(name, evidence, "add workers or GPUs to the executors")
        )
    try:
        check_capacity(world_size, gpus_per_task, cap)
    except GpusparkError as exc:
        return failure(
            name, f"world size {world_size}: {str(exc).splitlines()[0]}", exc.remedy or ""
        )
    return ok(name, f"world size {world_size} fits: {evidence}")


def dynamic_allocation_check(conf: Mapping[str, str], training: bool) -> Check:
    """Dynamic allocation is fine for data jobs and a failure for training (SPARK-24942)."""
    on = str(conf.get("spark.dynamicAllocation.enabled", "false")).lower() == "true"
    name = f"dynamic allocation ({'training' if training else 'data'} session)"
    if on and training:
        return failure(
            name,
            "spark.dynamicAllocation.enabled=true: barrier stages refuse to run (SPARK-24942)",
            "build training sessions with spark.dynamicAllocation."
            "enabled=false (gpuspark's JobKind.TRAINING does)",
        )
    return ok(name, f"spark.dynamicAllocation.enabled={'true' if on else 'false'}")
