"""Prometheus alert rules rendered from a cluster spec's ``[monitoring]`` thresholds.

Every alert has ``for:``, ``labels.severity`` (critical, warning or info) and the annotations
``summary``, ``description`` and ``runbook_url`` (``<[monitoring] runbook_url>#<alert name in
lower case>``, a section of ``docs/runbook.md``). Thresholds come only from the spec; the
expressions use the exporters' real names (:mod:`gpuspark.monitor.names`):

- dcgm-exporter labels the host ``Hostname`` (releases) or ``hostname`` (newer code); every GPU
  rule normalises both, and the target's ``instance`` host as a fallback, into ``host``
  (:func:`with_host`), the label the training ranks' targets carry.
- ``DCGM_FI_DEV_XID_ERRORS`` holds the *last* XID code, not a count: the XID rule fires when it
  changes to a non-zero code, or when ``DCGM_EXP_XID_ERRORS_COUNT`` (a per-window count, off in
  dcgm-exporter's default counters) is above zero.
- There is no ``DCGM_FI_DEV_FB_TOTAL`` by default: memory share is
  ``FB_USED / (FB_USED + FB_FREE + FB_RESERVED)``, reserved counted as 0 where not exported.
- Lost Spark executors: with dynamic allocation, the driver's
  ``ExecutorAllocationManager`` counter ``numberExecutorsExitedUnexpectedly``; without it
  (no such counter on the driver), executors that left ``/metrics/executors/prometheus`` in
  the last hour while their application's driver is still there.
- Exporter guards (``DcgmExporterMissing``, ``NodeExporterMissing``, ``TrainingMetricsDown``)
  fire when the targets that other rules read are down, absent or empty, so those rules are
  never silently blind.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuspark._util.yamltext import dump_yaml
from gpuspark.monitor import names

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec, Monitoring

__all__ = [
    "ALERTS",
    "DCGM_XID_COUNT",
    "EXECUTOR_SERIES",
    "EXITED_UNEXPECTEDLY",
    "IB_ACTIVE",
    "IB_ERROR_COUNTERS",
    "NVME_SELECTOR",
    "RULES_FILE",
    "AlertInfo",
    "alert_rules",
    "duration",
    "number",
    "rule_expressions",
    "rule_groups",
    "runbook_anchor",
    "with_host",
]

RULES_FILE = "gpuspark-alerts.yml"
"""File name of the rendered rules (under ``rules/``)."""

DCGM_XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
"""dcgm-exporter's own gauge: XID errors in its ``--xid-count-window-size`` (label ``xid``)."""
EXITED_UNEXPECTEDLY = (
    f"metrics_{names.SPARK_NAMESPACE}_driver_ExecutorAllocationManager_executors_"
    "numberExecutorsExitedUnexpectedly_Count"
)
"""The driver's PrometheusServlet name of Spark's ``ExecutorAllocationManager`` counter
``executors.numberExecutorsExitedUnexpectedly`` (dynamic allocation only)."""
EXECUTOR_SERIES = "metrics_executor_totalCores"
"""One series per live executor (and ``executor_id="driver"``) on the driver's
``/metrics/executors/prometheus``; labels ``application_id``, ``application_name``,
``executor_id``."""
IB_ACTIVE = 4
"""``node_infiniband_state_id`` of an ACTIVE port (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE)."""
IB_ERROR_COUNTERS = {
    "link_downed": names.NODE["ib_link_downed"],
    "symbol_error": names.NODE["ib_symbol_errors"],
    "port_errors_received": names.NODE["ib_rcv_errors"],
}
"""Value of the ``counter`` label of ``InfinibandErrorsRising`` -> node_exporter counter."""
NVME_SELECTOR = 'device=~"/dev/nvme.+", fstype!~"tmpfs|ramfs|overlay|squashfs"'
"""The file systems ``NvmeFreeSpaceLow`` watches: those on NVMe block devices."""

_XID_WINDOW = "10m"
_PHASE_WINDOW = "10m"
_IB_WINDOW = "10m"


@dataclass(frozen=True)
class AlertInfo:
    """One alert: its name (also its runbook section), severity, and what sets it off."""

    name: str
    severity: str
    threshold: str
    """The ``[monitoring]`` setting (or fixed condition) that triggers it."""
    group: str
    """The rule group it is rendered in."""


ALERTS: list[AlertInfo] = [
    AlertInfo("GpuAllocatedIdle", "warning", "gpu_util_low_pct, idle_allocated_minutes", "gpu"),
    AlertInfo("GpuMemoryHigh", "warning", "gpu_memory_pct", "gpu"),
    AlertInfo("GpuTemperatureHigh", "warning", "gpu_temp_c", "gpu"),
    AlertInfo("GpuXidError", "critical", "a new XID code", "gpu"),
    AlertInfo("InfinibandPortNotActive", "critical", "port state not ACTIVE", "network"),
    AlertInfo("InfinibandErrorsRising", "warning", "any error counter rising", "network"),
    AlertInfo("TrainingStalled", "critical", "stall_minutes", "training"),
    AlertInfo("TrainingInputBound", "info", "data_wait_pct", "training"),
    AlertInfo("TrainingMetricsDown", "warning", "rank target down", "training"),
    AlertInfo("SparkExecutorsLost", "warning", "executor_lost_per_hour", "spark"),
    AlertInfo("NvmeFreeSpaceLow", "warning", "nvme_free_pct", "node"),
    AlertInfo("DcgmExporterMissing", "warning", "dcgm target down, absent or empty", "exporters"),
    AlertInfo("NodeExporterMissing", "warning", "node target down or absent", "exporters"),
]
"""Every alert :func:`alert_rules` renders, in order (README and runbook tables)."""


def number(value: float) -> str:
    """``95.0`` -> ``"95"``, ``92.5`` -> ``"92.5"``: thresholds as PromQL and prose show them."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def duration(seconds: float) -> str:
    """A Prometheus duration for ``seconds`` (rounded up to whole seconds): ``"30m"``."""
    secs = max(0, math.ceil(seconds))
    for unit, size in (("h", 3600), ("m", 60)):
        if secs and secs % size == 0:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def runbook_anchor(alert: str) -> str:
    """The runbook section of ``alert``: its name in lower case (GitHub's heading anchor)."""
    return alert.lower()


def with_host(expr: str) -> str:
    """``expr`` with a ``host`` label from dcgm-exporter's ``Hostname`` or ``hostname`` label,
    falling back to the host part of ``instance``."""
    out = f'label_replace({expr}, "host", "$1", "instance", "([^:]+)(?::[0-9]+)?")'
    for label in names.DCGM_HOST_LABELS:
        out = f'label_replace({out}, "host", "$1", "{label}", "(.+)")'
    return out


def _lbl(name: str) -> str:
    return "{{ $labels." + name + " }}"


_VALUE = '{{ printf "%.0f" $value }}'


def _up(job: str, value: int) -> str:
    return f'up{{job="{job}"}} == {value}'


def _has_infiniband(spec: ClusterSpec) -> bool:
    return "infiniband" in (spec.networks.compute.kind, spec.networks.storage.kind)


# -- expressions -----------------------------------------------------------------------------


def _gpu_idle(m: Monitoring, _: ClusterSpec) -> str:
    held = f"group by (host, run_id, team) ({_up(names.JOB_RUNS, 1)})"
    idle = with_host(names.DCGM["util"]) + f" < {number(m.gpu_util_low_pct)}"
    return f"{held}\n* on (host) group_left ()\ncount by (host) (\n  {idle}\n)"


def _gpu_memory(m: Monitoring, _: ClusterSpec) -> str:
    used, free, res = (names.DCGM[k] for k in ("fb_used", "fb_free", "fb_reserved"))
    share = f"100 * {used} / ({used} + {free} + ({res} or {used} * 0))"
    return f"{with_host(share)}\n> {number(m.gpu_memory_pct)}"


def _gpu_temp(m: Monitoring, _: ClusterSpec) -> str:
    return f"{with_host(names.DCGM['temp'])} > {number(m.gpu_temp_c)}"


def _xid(_m: Monitoring, _: ClusterSpec) -> str:
    xid = names.DCGM["xid"]
    changed = with_host(f"{xid} != 0 and changes({xid}[{_XID_WINDOW}]) > 0")
    return f"{changed}\nor\n{with_host(f'{DCGM_XID_COUNT} > 0')}"


def _ib_state(_m: Monitoring, _: ClusterSpec) -> str:
    return f"{names.NODE['ib_state']} != {IB_ACTIVE}"


def _ib_errors(_m: Monitoring, _: ClusterSpec) -> str:
    parts = [
        f'label_replace(increase({metric}[{_IB_WINDOW}]) > 0, "counter", "{key}", "", "")'
        for key, metric in IB_ERROR_COUNTERS.items()
    ]
    return "\nor\n".join(parts)


def _stalled(m: Monitoring, _: ClusterSpec) -> str:
    return (
        f"(time() - ({names.LAST_STEP} > 0)) > {number(m.stall_minutes * 60)}\n"
        f"and on (job, instance) ({_up(names.JOB_RUNS, 1)})"
    )


def _input_bound(m: Monitoring, _: ClusterSpec) -> str:
    phase = f"rate({names.STEP_PHASE}%s[{_PHASE_WINDOW}])"
    waiting = phase % '{phase="data_wait"}'
    return (
        f"100 * sum by (run_id, team) ({waiting})\n"
        f"/ sum by (run_id, team) ({phase % ''})\n"
        f"> {number(m.data_wait_pct)}"
    )


def _metrics_down(_m: Monitoring, _: ClusterSpec) -> str:
    return _up(names.JOB_RUNS, 0)


def _executors_lost(m: Monitoring, _: ClusterSpec) -> str:
    limit = m.executor_lost_per_hour
    exited = f"floor(sum by (instance, team) (increase({EXITED_UNEXPECTEDLY}[1h]))) > {limit}"
    gone = (
        f'last_over_time({EXECUTOR_SERIES}{{executor_id!="driver"}}[1h])\n'
        f"  unless on (instance, application_id, executor_id) {EXECUTOR_SERIES}"
    )
    vanished = (
        f"(\n  count by (instance, application_id, application_name, team) (\n  {gone}\n  )\n"
        f'  and on (instance, application_id) {EXECUTOR_SERIES}{{executor_id="driver"}}\n'
        f"  unless on (instance) {EXITED_UNEXPECTEDLY}\n) > {limit}"
    )
    return f"{exited}\nor\n{vanished}"


def _nvme(m: Monitoring, _: ClusterSpec) -> str:
    avail, size = names.NODE["fs_avail"], names.NODE["fs_size"]
    return (
        f"100 * {avail}{{{NVME_SELECTOR}}}\n/ {size}{{{NVME_SELECTOR}}}\n"
        f"< {number(m.nvme_free_pct)}"
    )


def _dcgm_missing(_m: Monitoring, _: ClusterSpec) -> str:
    job = names.JOB_DCGM
    empty = f"({_up(job, 1)} unless on (instance) count by (instance) ({names.DCGM['util']}))"
    return f'{_up(job, 0)}\nor\n{empty}\nor\nabsent(up{{job="{job}"}})'


def _node_missing(_m: Monitoring, spec: ClusterSpec) -> str:
    job = names.JOB_NODE
    expr = f'{_up(job, 0)}\nor\nabsent(up{{job="{job}"}})'
    if _has_infiniband(spec):
        state = names.NODE["ib_state"]
        expr += f"\nor\n({_up(job, 1)} unless on (instance) count by (instance) ({state}))"
    return expr


# -- annotations -----------------------------------------------------------------------------


def _texts(m: Monitoring, spec: ClusterSpec) -> dict[str, tuple[str, str]]:
    host, gpu, inst = _lbl("host"), _lbl("gpu"), _lbl("instance")
    run, team = _lbl("run_id"), _lbl("team")
    port = f"{_lbl('device')} port {_lbl('port')} on {inst}"
    gpu_blind = "GpuAllocatedIdle, GpuMemoryHigh, GpuTemperatureHigh and GpuXidError"
    node_blind = "NvmeFreeSpaceLow, InfinibandPortNotActive and InfinibandErrorsRising"
    ib_note = ", or it exports no InfiniBand port" if _has_infiniband(spec) else ""
    idle_for = duration(m.idle_allocated_minutes * 60)
    return {
        "GpuAllocatedIdle": (
            f"Idle GPUs on {host} while run {run} holds the node",
            f"{_VALUE} GPU(s) on {host} have stayed below {number(m.gpu_util_low_pct)}% "
            f"utilisation for {idle_for} while gpuspark run {run} (team '{team}') has ranks "
            "on that node.",
        ),
        "GpuMemoryHigh": (
            f"GPU {gpu} on {host} memory above {number(m.gpu_memory_pct)}%",
            f"GPU {gpu} on {host} has used {_VALUE}% of its framebuffer "
            f"(FB_USED / (FB_USED + FB_FREE + FB_RESERVED)) for 5m; the next allocation may "
            "fail with CUDA out of memory.",
        ),
        "GpuTemperatureHigh": (
            f"GPU {gpu} on {host} hotter than {number(m.gpu_temp_c)} C",
            f"GPU {gpu} on {host} has been at {_VALUE} C for 5m (limit "
            f"{number(m.gpu_temp_c)} C); it will throttle its clocks.",
        ),
        "GpuXidError": (
            f"XID error on GPU {gpu} of {host}",
            f"GPU {gpu} on {host} reported XID error(s) in the last {_XID_WINDOW} (value "
            f"{_VALUE}: the XID code from DCGM_FI_DEV_XID_ERRORS, or the count from "
            f"{DCGM_XID_COUNT} for XID '{_lbl('xid')}').",
        ),
        "InfinibandPortNotActive": (
            f"InfiniBand {port} is not ACTIVE",
            f"InfiniBand {port} has been in state {_VALUE} (4 is ACTIVE) for 2m; NCCL "
            "traffic over it fails or falls back to a slower path.",
        ),
        "InfinibandErrorsRising": (
            f"InfiniBand errors rising on {port}",
            f"node_infiniband_{_lbl('counter')}_total rose by {_VALUE} in the last "
            f"{_IB_WINDOW} on {port}: a cable, transceiver or switch port is failing.",
        ),
        "TrainingStalled": (
            f"Run {run} rank {_lbl('rank')} finished no step for {number(m.stall_minutes)} minutes",
            f"Rank {_lbl('rank')} of run {run} (team '{team}') on {host} has finished no "
            f"optimizer step for {_VALUE} s (limit {duration(m.stall_minutes * 60)}) while "
            "its metrics target is up: a hang in a collective, the data loader or the driver.",
        ),
        "TrainingInputBound": (
            f"Run {run} waits for data {_VALUE}% of its step time",
            f"Run {run} (team '{team}') spent {_VALUE}% of its step time waiting for input "
            f"over the last {_PHASE_WINDOW} (limit {number(m.data_wait_pct)}%): the GPUs "
            "are starved by the loader.",
        ),
        "TrainingMetricsDown": (
            f"Metrics of run {run} rank {_lbl('rank')} unreachable",
            f"Prometheus cannot scrape rank {_lbl('rank')} of run {run} at {inst} (team "
            f"'{team}'): the rank died or its port is blocked. TrainingStalled, "
            "TrainingInputBound and GpuAllocatedIdle are blind for this rank.",
        ),
        "SparkExecutorsLost": (
            f"Spark application at {inst} lost {_VALUE} executors in an hour",
            f"The Spark application at {inst} {_lbl('application_id')} lost {_VALUE} "
            f"executors in the last hour (limit {m.executor_lost_per_hour}): executors are "
            "crashing (OOM, lost node, preemption).",
        ),
        "NvmeFreeSpaceLow": (
            f"NVMe {_lbl('mountpoint')} on {inst} below {number(m.nvme_free_pct)}% free",
            f"{_lbl('mountpoint')} ({_lbl('device')}) on {inst} has {_VALUE}% free space "
            f"(limit {number(m.nvme_free_pct)}%); shuffle, spill and the shard cache will fail "
            "when it is full.",
        ),
        "DcgmExporterMissing": (
            f"dcgm-exporter missing '{inst}'",
            f"The dcgm target '{inst}' is down, answers without GPU metrics, or no dcgm "
            f"target exists (instance empty): {gpu_blind} cannot fire for it.",
        ),
        "NodeExporterMissing": (
            f"node_exporter missing '{inst}'",
            f"The node target '{inst}' is down or no node target exists (instance "
            f"empty){ib_note}: {node_blind} cannot fire for it.",
        ),
    }


_FOR: dict[str, Callable[[Monitoring], float]] = {
    "GpuAllocatedIdle": lambda m: m.idle_allocated_minutes * 60,
    "GpuMemoryHigh": lambda m: 300,
    "GpuTemperatureHigh": lambda m: 300,
    "GpuXidError": lambda m: 60,
    "InfinibandPortNotActive": lambda m: 120,
    "InfinibandErrorsRising": lambda m: 300,
    "TrainingStalled": lambda m: 60,
    "TrainingInputBound": lambda m: 900,
    "TrainingMetricsDown": lambda m: 300,
    "SparkExecutorsLost": lambda m: 60,
    "NvmeFreeSpaceLow": lambda m: 600,
    "DcgmExporterMissing": lambda m: 600,
    "NodeExporterMissing": lambda m: 600,
}
"""Seconds each alert's condition must hold before it fires."""

_EXPR: dict[str, Callable[[Monitoring, ClusterSpec], str]] = {
    "GpuAllocatedIdle": _gpu_idle,
    "GpuMemoryHigh": _gpu_memory,
    "GpuTemperatureHigh": _gpu_temp,
    "GpuXidError": _xid,
    "InfinibandPortNotActive": _ib_state,
    "InfinibandErrorsRising": _ib_errors,
    "TrainingStalled": _stalled,
    "TrainingInputBound": _input_bound,
    "TrainingMetricsDown": _metrics_down,
    "SparkExecutorsLost": _executors_lost,
    "NvmeFreeSpaceLow": _nvme,
    "DcgmExporterMissing": _dcgm_missing,
    "NodeExporterMissing": _node_missing,
}


def _rule(spec: ClusterSpec, alert: AlertInfo, texts: dict[str, tuple[str, str]]) -> dict:
    m = spec.monitoring
    summary, description = texts[alert.name]
    url = f"{m.runbook_url}#{runbook_anchor(alert.name)}"
    return {
        "alert": alert.name,
        "expr": _EXPR[alert.name](m, spec),
        "for": duration(_FOR[alert.name](m)),
        "labels": {"severity": alert.severity},
        "annotations": {"summary": summary, "description": description, "runbook_url": url},
    }


def rule_groups(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The rule groups as data (``{"name": ..., "rules": [...]}``), in :data:`ALERTS` order."""
    texts = _texts(spec.monitoring, spec)
    groups: dict[str, list[dict[str, Any]]] = {}
    for alert in ALERTS:
        groups.setdefault(alert.group, []).append(_rule(spec, alert, texts))
    return [{"name": f"gpuspark-{name}", "rules": rules} for name, rules in groups.items()]


def rule_expressions(spec: ClusterSpec) -> list[str]:
    """Every PromQL expression of the rendered rules, in :data:`ALERTS` order."""
    return [rule["expr"] for group in rule_groups(spec) for rule in group["rules"]]


def alert_rules(spec: ClusterSpec) -> str:
    """Content of ``rules/gpuspark-alerts.yml`` (check it: ``promtool check rules``)."""

    header = (
        f"# gpuspark alert rules for cluster '{spec.name}', rendered from its [monitoring]\n"
        "# thresholds. Edit the spec and render again rather than editing this file.\n"
    )
    return header + dump_yaml({"groups": rule_groups(spec)})
