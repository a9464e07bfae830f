"""``promtool test rules`` unit tests for the rendered alert rules, built from the same spec.

For every alert there is a test group where input series cross the spec's threshold and the
alert fires (with its exact labels and annotations), and a near-miss group where series stay
just on the safe side and nothing fires. Series use the exporters' real names and labels:
dcgm-exporter's ``Hostname`` on one host and ``hostname`` on the other, node_exporter's
``device``/``port`` and file-system labels, Spark's PrometheusServlet and executor series, and
the training ranks' target labels. Render with :func:`alert_rule_tests`; the file sits in
``tests/`` next to ``rules/`` and names ``../rules/gpuspark-alerts.yml``.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuspark._util.yamltext import dump_yaml
from gpuspark.monitor import names
from gpuspark.monitor.rules import (
    ALERTS,
    DCGM_XID_COUNT,
    EXECUTOR_SERIES,
    EXITED_UNEXPECTEDLY,
    IB_ACTIVE,
    IB_ERROR_COUNTERS,
    RULES_FILE,
    number,
    rule_groups,
)

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["TESTS_FILE", "alert_rule_tests"]

TESTS_FILE = "gpuspark-alerts.test.yml"
"""File name of the rendered unit tests (under ``tests/``)."""

Labels = dict[str, str]
Expected = list[tuple[Labels, float]]


@dataclass
class _Group:
    """One promtool test group: input series, then alert checks at given minutes."""

    name: str
    series: list[tuple[str, Labels, str]] = field(default_factory=list)
    checks: list[tuple[str, int, Expected]] = field(default_factory=list)

    def add(self, metric: str, labels: Labels, values: str) -> None:
        self.series.append((metric, labels, values))


@dataclass(frozen=True)
class _Ctx:
    spec: ClusterSpec
    h1: str
    h2: str
    team: str

    @property
    def m(self) -> Any:
        return self.spec.monitoring

    def dcgm(self, host: str, gpu: int, host_label: str) -> Labels:
        """One GPU's dcgm-exporter labels; ``host_label`` is ``Hostname`` or ``hostname``."""
        model = self.spec.nodes[0].gpu_model
        return {
            "gpu": str(gpu),
            "UUID": f"GPU-{zlib.crc32(host.encode()):08x}-0000-0000-0000-{gpu:012d}",
            "device": f"nvidia{gpu}",
            "modelName": f"NVIDIA {model}",
            host_label: host,
            "instance": f"{host}:{names.DCGM_PORT}",
            "job": names.JOB_DCGM,
        }

    def node(self, host: str, **extra: str) -> Labels:
        return {"instance": f"{host}:{names.NODE_EXPORTER_PORT}", "job": names.JOB_NODE, **extra}

    def rank(self, host: str, rank: int, run: str = "run-1") -> Labels:
        port = (self.m.metrics_port or 9700) + rank
        labels = {"instance": f"{host}:{port}", "job": names.JOB_RUNS, "run_id": run}
        labels.update({"rank": str(rank), "host": host, "team": self.team})
        return {k: v for k, v in labels.items() if v}


def _with_host(labels: Labels, host: str) -> Labels:
    return {**labels, "host": host}


# -- one builder per alert: (firing group, near-miss group) --------------------------------


def _idle(c: _Ctx) -> list[_Group]:
    low, util = c.m.gpu_util_low_pct, names.DCGM["util"]
    wait = math.ceil(c.m.idle_allocated_minutes)
    end, n = wait + 5, wait + 10
    fire = _Group("GpuAllocatedIdle: idle GPUs on nodes a run holds fire, a node without a run not")
    for i, host in enumerate((c.h1, c.h2)):
        fire.add("up", c.rank(host, i), f"1x{n}")
    gpus = [
        c.dcgm(c.h1, 0, "Hostname"),
        c.dcgm(c.h2, 1, "hostname"),
        c.dcgm("spare", 0, "Hostname"),
    ]
    for labels in gpus:
        fire.add(util, labels, f"{number(low / 2)}x{n}")
    counts: dict[str, int] = {}
    for host in (c.h1, c.h2):
        counts[host] = counts.get(host, 0) + 1
    expected = [
        ({k: v for k, v in {"host": h, "run_id": "run-1", "team": c.team}.items() if v}, float(k))
        for h, k in counts.items()
    ]
    fire.checks += [("GpuAllocatedIdle", max(wait - 1, 0), []), ("GpuAllocatedIdle", end, expected)]
    near = _Group("GpuAllocatedIdle near miss: utilisation at the threshold is not idle")
    near.add("up", c.rank(c.h1, 0), f"1x{n}")
    near.add(util, c.dcgm(c.h1, 0, "Hostname"), f"{number(low)}x{n}")
    near.checks.append(("GpuAllocatedIdle", end, []))
    return [fire, near]


def _memory_series(group: _Group, labels: Labels, pct: float, reserved: bool) -> float:
    total = 100_000.0  # MiB
    used = pct * 1000
    res = min(500.0, (total - used) / 2) if reserved else 0.0
    free = total - used - res
    group.add(names.DCGM["fb_used"], labels, f"{number(used)}x15")
    group.add(names.DCGM["fb_free"], labels, f"{number(free)}x15")
    if reserved:
        group.add(names.DCGM["fb_reserved"], labels, f"{number(res)}x15")
    return 100 * used / (used + free + res)


def _memory(c: _Ctx) -> list[_Group]:
    pct = c.m.gpu_memory_pct
    fire = _Group("GpuMemoryHigh: both host label spellings, with and without FB_RESERVED")
    a, b = c.dcgm(c.h1, 0, "Hostname"), c.dcgm(c.h2, 1, "hostname")
    hot = min(math.floor(pct) + 2, 100)
    expected = [
        (_with_host(a, c.h1), _memory_series(fire, a, hot, reserved=True)),
        (_with_host(b, c.h2), _memory_series(fire, b, hot, reserved=False)),
    ]
    fire.checks.append(("GpuMemoryHigh", 10, expected))
    near = _Group("GpuMemoryHigh near miss: just below the threshold")
    _memory_series(near, a, max(pct - 1, pct / 2), reserved=True)
    near.checks.append(("GpuMemoryHigh", 10, []))
    return [fire, near]


def _temperature(c: _Ctx) -> list[_Group]:
    limit, temp = c.m.gpu_temp_c, names.DCGM["temp"]
    hot = float(math.floor(limit) + 5)
    fire = _Group("GpuTemperatureHigh: both host label spellings")
    a, b = c.dcgm(c.h1, 0, "Hostname"), c.dcgm(c.h2, 1, "hostname")
    for labels in (a, b):
        fire.add(temp, labels, f"{number(hot)}x15")
    fire.checks.append(
        ("GpuTemperatureHigh", 10, [(_with_host(a, c.h1), hot), (_with_host(b, c.h2), hot)])
    )
    near = _Group("GpuTemperatureHigh near miss: at the limit")
    near.add(temp, a, f"{number(limit)}x15")
    near.checks.append(("GpuTemperatureHigh", 10, []))
    return [fire, near]


def _xid(c: _Ctx) -> list[_Group]:
    xid = names.DCGM["xid"]
    fire = _Group("GpuXidError: a new XID code, and the exporter's XID count; an old code not")
    a, b, old = (
        c.dcgm(c.h1, 0, "Hostname"),
        c.dcgm(c.h2, 1, "hostname"),
        c.dcgm(c.h1, 1, "Hostname"),
    )
    fire.add(xid, a, "0x5 79x10")
    fire.add(DCGM_XID_COUNT, {**b, "xid": "48"}, "0x5 1x10")
    fire.add(xid, old, "79x15")
    expected = [(_with_host(a, c.h1), 79.0), (_with_host({**b, "xid": "48"}, c.h2), 1.0)]
    fire.checks.append(("GpuXidError", 8, expected))
    near = _Group("GpuXidError near miss: a code that does not change, a zero count")
    near.add(xid, a, "79x15")
    near.add(xid, b, "0x15")
    near.add(DCGM_XID_COUNT, {**b, "xid": "48"}, "0x15")
    near.checks.append(("GpuXidError", 8, []))
    return [fire, near]


def _ib_port(c: _Ctx) -> list[_Group]:
    state = names.NODE["ib_state"]
    port = c.node(c.h1, device="mlx5_0", port="1")
    fire = _Group("InfinibandPortNotActive: a DOWN port")
    fire.add(state, port, "1x10")
    fire.checks.append(("InfinibandPortNotActive", 5, [(port, 1.0)]))
    near = _Group("InfinibandPortNotActive near miss: ACTIVE")
    near.add(state, port, f"{IB_ACTIVE}x10")
    near.checks.append(("InfinibandPortNotActive", 5, []))
    return [fire, near]


def _ib_errors(c: _Ctx) -> list[_Group]:
    p1 = c.node(c.h1, device="mlx5_0", port="1")
    p2 = c.node(c.h2, device="mlx5_1", port="1")
    fire = _Group("InfinibandErrorsRising: symbol errors and a link-down event")
    fire.add(IB_ERROR_COUNTERS["symbol_error"], p1, "0+3x20")
    fire.add(IB_ERROR_COUNTERS["port_errors_received"], p1, "7x20")
    fire.add(IB_ERROR_COUNTERS["link_downed"], p2, "0x5 1x15")
    expected = [({**p1, "counter": "symbol_error"}, 30.0), ({**p2, "counter": "link_downed"}, 1.0)]
    fire.checks.append(("InfinibandErrorsRising", 15, expected))
    near = _Group("InfinibandErrorsRising near miss: non-zero but flat counters")
    for metric in IB_ERROR_COUNTERS.values():
        near.add(metric, p1, "5x20")
    near.checks.append(("InfinibandErrorsRising", 15, []))
    return [fire, near]


def _stalled(c: _Ctx) -> list[_Group]:
    stall = c.m.stall_minutes * 60
    end = math.ceil((660 + stall) / 60) + 3
    n = end + 2
    fire = _Group("TrainingStalled: the last step stops advancing while the target is up")
    rank = c.rank(c.h1, 0)
    fire.add("up", rank, f"1x{n}")
    fire.add(names.LAST_STEP, rank, f"60+60x10 660x{n - 11}")
    fire.checks.append(("TrainingStalled", end, [(rank, end * 60 - 660.0)]))
    near = _Group("TrainingStalled near miss: a step less than the limit ago; a target down")
    lag = stall / 2 if stall <= 120 else stall - 60
    slow, down = c.rank(c.h1, 0), c.rank(c.h2, 1)
    near.add("up", slow, f"1x{n}")
    near.add(names.LAST_STEP, slow, f"{number(-lag)}+60x{n}")
    near.add("up", down, f"0x{n}")
    near.add(names.LAST_STEP, down, f"60x{n}")
    near.checks.append(("TrainingStalled", end, []))
    return [fire, near]


def _phases(group: _Group, c: _Ctx, wait: float) -> None:
    per_minute = {"data_wait": wait, "compute": 100 - wait, "comm": 0.0, "optimizer": 0.0}
    for i, host in enumerate((c.h1, c.h2)):
        for phase, seconds in per_minute.items():
            labels = {**c.rank(host, i), "phase": phase}
            group.add(names.STEP_PHASE, labels, f"0+{number(seconds)}x35")


def _input_bound(c: _Ctx) -> list[_Group]:
    limit = c.m.data_wait_pct
    wait = float(min(math.floor(limit) + 10, 100))
    fire = _Group("TrainingInputBound: both ranks wait for data above the limit")
    _phases(fire, c, wait)
    labels = {k: v for k, v in {"run_id": "run-1", "team": c.team}.items() if v}
    fire.checks.append(("TrainingInputBound", 30, [(labels, wait)]))
    near = _Group("TrainingInputBound near miss: below the limit")
    _phases(near, c, max(math.floor(limit) - 1, limit / 2))
    near.checks.append(("TrainingInputBound", 30, []))
    return [fire, near]


def _metrics_down(c: _Ctx) -> list[_Group]:
    rank = c.rank(c.h1, 0)
    fire = _Group("TrainingMetricsDown: a rank target down")
    fire.add("up", rank, "0x15")
    fire.checks.append(("TrainingMetricsDown", 10, [(rank, 0.0)]))
    near = _Group("TrainingMetricsDown near miss: up")
    near.add("up", rank, "1x15")
    near.checks.append(("TrainingMetricsDown", 10, []))
    return [fire, near]


def _app(group: _Group, instance: str, app: str, executors: int, gone: str) -> Labels:
    """A driver's ``/metrics/executors/prometheus`` series: the driver row, and ``executors``
    executors whose series end as ``gone`` says."""
    base = {"instance": instance, "job": names.JOB_SPARK_EXECUTORS}
    base |= {"application_id": app, "application_name": "etl"}
    group.add(EXECUTOR_SERIES, {**base, "executor_id": "driver"}, "1x40")
    for i in range(1, executors + 1):
        group.add(EXECUTOR_SERIES, {**base, "executor_id": str(i)}, gone)
    return {k: base[k] for k in ("instance", "application_id", "application_name")}


def _exited(group: _Group, instance: str, lost: int) -> Labels:
    labels = {"instance": instance, "job": names.JOB_SPARK_APPS, "type": "counters"}
    values = f"0x5 1+1x{lost - 1} {lost}x40" if lost else "0x45"
    group.add(EXITED_UNEXPECTEDLY, labels, values)
    return {"instance": instance}


def _executors_lost(c: _Ctx) -> list[_Group]:
    limit = c.m.executor_lost_per_hour
    fire = _Group("SparkExecutorsLost: exited unexpectedly (dynamic allocation), executors gone")
    counted = _exited(fire, f"{c.h1}:4040", limit + 1)
    vanished = _app(fire, f"{c.h2}:4041", "app-2", limit + 1, "1x10 stale")
    released = f"{c.h1}:4042"  # dynamic allocation released idle executors: not lost
    _exited(fire, released, 0)
    _app(fire, released, "app-3", limit + 3, "1x10 stale")
    ended = f"{c.h2}:4043"  # the whole application ended: not lost
    for row in range(limit + 2):
        labels = {"instance": ended, "job": names.JOB_SPARK_EXECUTORS, "application_id": "app-4"}
        labels |= {"application_name": "etl", "executor_id": str(row) if row else "driver"}
        fire.add(EXECUTOR_SERIES, labels, "1x10 stale")
    expected = [(counted, float(limit + 1)), (vanished, float(limit + 1))]
    fire.checks.append(("SparkExecutorsLost", 30, expected))
    near = _Group("SparkExecutorsLost near miss: exactly the limit lost")
    _exited(near, f"{c.h1}:4040", limit)
    _app(near, f"{c.h2}:4041", "app-2", limit, "1x10 stale")
    near.checks.append(("SparkExecutorsLost", 30, []))
    return [fire, near]


def _filesystem(group: _Group, labels: Labels, free_pct: float) -> float:
    size = 1e12
    avail = free_pct * 1e10
    group.add(names.NODE["fs_avail"], labels, f"{number(avail)}x15")
    group.add(names.NODE["fs_size"], labels, f"{number(size)}x15")
    return 100 * avail / size


def _nvme(c: _Ctx) -> list[_Group]:
    limit = c.m.nvme_free_pct
    scratch = c.node(c.h1, device="/dev/nvme0n1", fstype="ext4", mountpoint="/scratch")
    fire = _Group("NvmeFreeSpaceLow: NVMe scratch nearly full")
    value = _filesystem(fire, scratch, math.floor(limit / 2))
    fire.checks.append(("NvmeFreeSpaceLow", 12, [(scratch, value)]))
    near = _Group("NvmeFreeSpaceLow near miss: just above the limit; tmpfs and non-NVMe disks")
    _filesystem(near, scratch, min(limit + 1, 100))
    _filesystem(near, c.node(c.h1, device="tmpfs", fstype="tmpfs", mountpoint="/dev/shm"), 0.5)
    _filesystem(near, c.node(c.h1, device="/dev/sda2", fstype="ext4", mountpoint="/"), 0.5)
    near.checks.append(("NvmeFreeSpaceLow", 12, []))
    return [fire, near]


def _dcgm_missing(c: _Ctx) -> list[_Group]:
    down, empty = c.dcgm(c.h1, 0, "Hostname"), c.dcgm(c.h2, 0, "hostname")
    target = {"instance": down["instance"], "job": names.JOB_DCGM}
    empty_target = {"instance": empty["instance"], "job": names.JOB_DCGM}
    fire = _Group("DcgmExporterMissing: a target down, a target without GPU metrics")
    fire.add("up", target, "0x15")
    fire.add("up", empty_target, "1x15")
    fire.checks.append(("DcgmExporterMissing", 12, [(target, 0.0), (empty_target, 1.0)]))
    absent = _Group("DcgmExporterMissing: no dcgm job at all")
    absent.add("up", c.node(c.h1), "1x15")
    absent.checks.append(("DcgmExporterMissing", 12, [({"job": names.JOB_DCGM}, 1.0)]))
    near = _Group("DcgmExporterMissing near miss: up with GPU metrics")
    near.add("up", target, "1x15")
    near.add(names.DCGM["util"], down, "50x15")
    near.checks.append(("DcgmExporterMissing", 12, []))
    return [fire, absent, near]


def _node_missing(c: _Ctx) -> list[_Group]:
    ib = "infiniband" in (c.spec.networks.compute.kind, c.spec.networks.storage.kind)
    fire = _Group("NodeExporterMissing: a target down" + (", one without InfiniBand" if ib else ""))
    fire.add("up", c.node(c.h1), "0x15")
    expected = [(c.node(c.h1), 0.0)]
    if ib:
        fire.add("up", c.node(c.h2), "1x15")
        expected.append((c.node(c.h2), 1.0))
    fire.checks.append(("NodeExporterMissing", 12, expected))
    absent = _Group("NodeExporterMissing: no node job at all")
    absent.add("up", {"instance": f"{c.h1}:{names.DCGM_PORT}", "job": names.JOB_DCGM}, "1x15")
    absent.checks.append(("NodeExporterMissing", 12, [({"job": names.JOB_NODE}, 1.0)]))
    near = _Group("NodeExporterMissing near miss: up" + (" with InfiniBand ports" if ib else ""))
    near.add("up", c.node(c.h1), "1x15")
    if ib:
        near.add(names.NODE["ib_state"], c.node(c.h1, device="mlx5_0", port="1"), "4x15")
    near.checks.append(("NodeExporterMissing", 12, []))
    return [fire, absent, near]


_BUILDERS: dict[str, Callable[[_Ctx], list[_Group]]] = {
    "GpuAllocatedIdle": _idle,
    "GpuMemoryHigh": _memory,
    "GpuTemperatureHigh": _temperature,
    "GpuXidError": _xid,
    "InfinibandPortNotActive": _ib_port,
    "InfinibandErrorsRising": _ib_errors,
    "TrainingStalled": _stalled,
    "TrainingInputBound": _input_bound,
    "TrainingMetricsDown": _metrics_down,
    "SparkExecutorsLost": _executors_lost,
    "NvmeFreeSpaceLow": _nvme,
    "DcgmExporterMissing": _dcgm_missing,
    "NodeExporterMissing": _node_missing,
}

# -- rendering -------------------------------------------------------------------------------

_TEMPLATE = re.compile(r'\{\{ (?:\$labels\.(\w+)|printf "%\.0f" \$value) \}\}')


def _expand(text: str, labels: Labels, value: float) -> str:
    """Prometheus' rendering of the annotation templates the rules use."""

    def one(match: re.Match[str]) -> str:
        return labels.get(match.group(1), "") if match.group(1) else f"{value:.0f}"

    out = _TEMPLATE.sub(one, text)
    if "{{" in out:
        raise ValueError(f"annotation template not understood by the test renderer: {text!r}")
    return out


def _series_text(metric: str, labels: Labels) -> str:
    body = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{body}}}"


def _test_group(group: _Group, rules: dict[str, dict[str, Any]]) -> dict[str, Any]:
    checks = []
    for alert, minute, expected in group.checks:
        rule = rules[alert]
        exp = []
        for labels, value in expected:
            out = {**labels, "severity": rule["labels"]["severity"]}
            notes = {k: _expand(v, out, value) for k, v in rule["annotations"].items()}
            exp.append({"exp_labels": out, "exp_annotations": notes})
        checks.append({"eval_time": f"{minute}m", "alertname": alert, "exp_alerts": exp})
    series = [{"series": _series_text(m, lb), "values": v} for m, lb, v in group.series]
    return {
        "name": group.name,
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": checks,
    }


def _context(spec: ClusterSpec) -> _Ctx:
    hosts = [host for group in spec.nodes for host in group.hosts]
    h2 = hosts[1] if len(hosts) > 1 else f"{hosts[0]}-2"
    team = spec.teams[0].name if spec.teams else ""
    return _Ctx(spec=spec, h1=hosts[0], h2=h2, team=team)


def alert_rule_tests(spec: ClusterSpec) -> str:
    """Content of ``tests/gpuspark-alerts.test.yml``: run ``promtool test rules`` on it."""

    rules = {r["alert"]: r for g in rule_groups(spec) for r in g["rules"]}
    ctx = _context(spec)
    groups = [_test_group(g, rules) for alert in ALERTS for g in _BUILDERS[alert.name](ctx)]
    body = {
        "rule_files": [f"../rules/{RULES_FILE}"],
        "evaluation_interval": "1m",
        "tests": groups,
    }
    header = (
        f"# promtool unit tests of gpuspark's alert rules for cluster '{spec.name}', rendered\n"
        "# from the same spec: every alert fires on one group and stays silent on a near miss.\n"
        f"# Run: promtool test rules {TESTS_FILE}\n"
    )
    return header + dump_yaml(body)
