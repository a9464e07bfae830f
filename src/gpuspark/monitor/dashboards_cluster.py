"""The hardware dashboards: GPUs (dcgm-exporter) and network (node_exporter, DCGM NVLink).

dcgm-exporter names the host ``Hostname`` (releases) or ``hostname`` (newer code). Every GPU
query goes through :func:`dcgm`, which selects on either label and copies the one present
into a ``node`` label, then keeps one series per ``(node, gpu)``: panels and the ``node``
variable read ``node`` whichever exporter version runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuspark.monitor import names
from gpuspark.monitor.grafana import Grid, dashboard, query_variable, value_map

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["dcgm", "gpus_dashboard", "network_dashboard", "with_node"]

RATE = "$__rate_interval"
GPU_LEGEND = "{{node}} GPU {{gpu}}"
UP_STATES = value_map({0: ("down", "red"), 1: ("up", "green")})
IB_STATES = value_map(
    {
        0: ("no change", "text"),
        1: ("DOWN", "red"),
        2: ("INIT", "orange"),
        3: ("ARMED", "yellow"),
        4: ("ACTIVE", "green"),
        5: ("ACTIVE_DEFER", "blue"),
    }
)


def with_node(expr: str) -> str:
    """``expr`` with a ``node`` label copied from ``Hostname`` or ``hostname`` (either)."""
    inner = f'label_replace({expr}, "node", "$1", "hostname", "(.+)")'
    return f'label_replace({inner}, "node", "$1", "Hostname", "(.+)")'


def dcgm(metric: str, fn: str = "", window: str = "", agg: str = "max") -> str:
    """One series per ``(node, gpu)`` of a dcgm-exporter metric, ``$node``/``$gpu`` applied.

    ``fn`` (with ``window``) wraps the raw selector first, e.g. ``changes`` over ``$__range``.
    """
    sides = []
    for host in names.DCGM_HOST_LABELS:
        sel = f'{metric}{{{host}=~"$node", gpu=~"$gpu"}}'
        if window:
            sel = f"{sel}[{window}]"
        sides.append(f"{fn}({sel})" if fn else sel)
    return f"{agg} by (node, gpu) ({with_node(' or '.join(sides))})"


def _node_variable() -> dict[str, Any]:
    query = f"query_result(count by (node) ({with_node(names.DCGM['util'])}))"
    return query_variable("node", query, label="Node", regex='/node="([^"]+)"/')


def _gpu_overview(g: Grid, spec: ClusterSpec) -> None:
    m, util = spec.monitoring, dcgm(names.DCGM["util"])
    g.row("Overview")
    g.stat(
        "GPUs reporting",
        f"count({util})",
        unit="short",
        description=f"GPUs dcgm-exporter reports now; the spec lists {spec.total_gpus}.",
        thresholds=((None, "red"), (spec.total_gpus, "green")),
    )
    g.stat(
        "Mean utilisation",
        f"avg({util})",
        unit="percent",
        description="Mean DCGM_FI_DEV_GPU_UTIL over the selected GPUs.",
        max_value=100,
    )
    g.stat(
        "Idle GPUs",
        f"count({util} < {m.gpu_util_low_pct:g}) or vector(0)",
        unit="short",
        description=f"GPUs below [monitoring] gpu_util_low_pct ({m.gpu_util_low_pct:g} %).",
        thresholds=((None, "green"), (1, "yellow")),
    )
    g.stat(
        "Hottest GPU",
        f"max({dcgm(names.DCGM['temp'])})",
        unit="celsius",
        description=f"Highest GPU temperature; alert at {m.gpu_temp_c:g} °C.",
        thresholds=((None, "green"), (m.gpu_temp_c - 10, "yellow"), (m.gpu_temp_c, "red")),
    )
    g.stat(
        "Power draw",
        f"sum({dcgm(names.DCGM['power'])})",
        unit="watt",
        description="Total DCGM_FI_DEV_POWER_USAGE of the selected GPUs.",
    )
    g.stat(
        "XID events (range)",
        f"sum({dcgm(names.DCGM['xid'], 'changes', '$__range')}) or vector(0)",
        unit="short",
        thresholds=((None, "green"), (1, "red")),
        description="Times the last XID changed during the dashboard range "
        "(DCGM_FI_DEV_XID_ERRORS holds the last XID (a code), not a count).",
    )


def _gpu_usage(g: Grid, spec: ClusterSpec) -> None:
    m, d = spec.monitoring, names.DCGM
    used, free = dcgm(d["fb_used"]), dcgm(d["fb_free"])
    g.row("Utilisation and memory")
    g.timeseries(
        "GPU utilisation",
        [(dcgm(d["util"]), GPU_LEGEND)],
        unit="percent",
        max_value=100,
        description="DCGM_FI_DEV_GPU_UTIL: share of time a kernel ran, per node and GPU.",
        threshold_line=m.gpu_util_low_pct,
    )
    g.timeseries(
        "SM active",
        [(dcgm(d["sm_active"]), GPU_LEGEND)],
        unit="percentunit",
        max_value=1,
        description="DCGM_FI_PROF_SM_ACTIVE: share of cycles an SM had a warp (profiling "
        "metric; empty where dcgm-exporter does not collect DCP fields).",
    )
    g.timeseries(
        "Mean utilisation per node",
        [(f"avg by (node) ({dcgm(d['util'])})", "{{node}}")],
        unit="percent",
        max_value=100,
        description="Mean GPU utilisation of each node's GPUs.",
    )
    g.timeseries(
        "Framebuffer used",
        [(used, GPU_LEGEND)],
        unit="mbytes",
        description="DCGM_FI_DEV_FB_USED (MiB) per node and GPU.",
    )
    g.timeseries(
        "Framebuffer used %",
        [(f"100 * {used} / ({used} + {free})", GPU_LEGEND)],
        unit="percent",
        max_value=100,
        threshold_line=m.gpu_memory_pct,
        description=f"FB_USED / (FB_USED + FB_FREE); alert at {m.gpu_memory_pct:g} %.",
    )


def _gpu_health(g: Grid, spec: ClusterSpec) -> None:
    m, d = spec.monitoring, names.DCGM
    g.row("Temperature, power and errors")
    g.timeseries(
        "Temperature",
        [(dcgm(d["temp"]), GPU_LEGEND)],
        unit="celsius",
        threshold_line=m.gpu_temp_c,
        description=f"DCGM_FI_DEV_GPU_TEMP; [monitoring] gpu_temp_c = {m.gpu_temp_c:g} °C.",
    )
    g.timeseries(
        "Power",
        [(dcgm(d["power"]), GPU_LEGEND)],
        unit="watt",
        description="DCGM_FI_DEV_POWER_USAGE per node and GPU.",
    )
    g.timeseries(
        "XID changes",
        [(dcgm(d["xid"], "changes", RATE), GPU_LEGEND)],
        unit="short",
        description="How often DCGM_FI_DEV_XID_ERRORS changed. It holds a GPU's last XID "
        "(a code), not a count, so a change means a new XID; the table beside shows the codes.",
    )
    g.table(
        "Last XID per GPU",
        f"{dcgm(d['xid'])} > 0",
        unit="none",
        description="GPUs whose last XID is not 0, with the code: DCGM_FI_DEV_XID_ERRORS holds "
        "the last XID (a code), not a count. NVIDIA's XID catalogue: 79 fell off the bus, "
        "48/63/64 ECC, 13/31/43 application faults.",
    )
    g.state_timeline(
        "dcgm-exporter scrapes",
        [(f'up{{job="{names.JOB_DCGM}"}}', "{{instance}}")],
        unit="none",
        mappings=[UP_STATES],
        width=24,
        height=6,
        description=f"up of scrape job {names.JOB_DCGM}: a GPU without data is missing here.",
    )


def gpus_dashboard(spec: ClusterSpec) -> dict[str, Any]:
    """Cluster GPUs: utilisation, memory, temperature, power, XID, per node and GPU."""
    g = Grid()
    _gpu_overview(g, spec)
    _gpu_usage(g, spec)
    _gpu_health(g, spec)
    gpu = query_variable("gpu", f"label_values({names.DCGM['util']}, gpu)", label="GPU")
    return dashboard(
        f"gpuspark-{spec.name}-gpus",
        f"gpuspark {spec.name} / GPUs",
        g,
        [_node_variable(), gpu],
        tags=["gpuspark", spec.name, "gpu"],
        description="dcgm-exporter metrics of every GPU in the cluster.",
    )


def _ib(metric: str, fn: str = "rate") -> str:
    sel = f'{metric}{{instance=~"$instance", device=~"$device"}}'
    return f"sum by (instance, device, port) ({fn}({sel}[{RATE}]))"


def _network_ib(g: Grid) -> None:
    n, legend = names.NODE, "{{instance}} {{device}}/{{port}}"
    state = f'{n["ib_state"]}{{instance=~"$instance", device=~"$device"}}'
    g.row("InfiniBand")
    g.stat(
        "Receive",
        f"sum({_ib(n['ib_rx'])})",
        unit="Bps",
        width=6,
        description="All selected ports' received bytes/s.",
    )
    g.stat(
        "Transmit",
        f"sum({_ib(n['ib_tx'])})",
        unit="Bps",
        width=6,
        description="All selected ports' transmitted bytes/s.",
    )
    g.stat(
        "Ports ACTIVE",
        f"count({state} == 4) or vector(0)",
        unit="short",
        width=6,
        description="Ports in state 4 (ACTIVE).",
    )
    g.stat(
        "Ports not ACTIVE",
        f"count({state} != 4) or vector(0)",
        unit="short",
        width=6,
        description="Ports in any state but ACTIVE.",
        thresholds=((None, "green"), (1, "red")),
    )
    g.timeseries(
        "IB receive",
        [(_ib(n["ib_rx"]), legend)],
        unit="Bps",
        description="rate(node_infiniband_port_data_received_bytes_total) per port.",
    )
    g.timeseries(
        "IB transmit",
        [(_ib(n["ib_tx"]), legend)],
        unit="Bps",
        description="rate(node_infiniband_port_data_transmitted_bytes_total) per port.",
    )
    g.state_timeline(
        "IB port state",
        [(state, legend)],
        unit="none",
        mappings=[IB_STATES],
        width=24,
        description="node_infiniband_state_id: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.",
    )
    errors = [
        (_ib(n["ib_symbol_errors"], "increase"), "symbol errors " + legend),
        (_ib(n["ib_rcv_errors"], "increase"), "receive errors " + legend),
        (_ib(n["ib_link_downed"], "increase"), "link downed " + legend),
    ]
    g.timeseries(
        "IB errors",
        errors,
        unit="short",
        width=24,
        description="Error counters' increase per interval: symbol errors, receive "
        "errors, link downed (any non-zero value deserves a look at the cable or port).",
    )


def _network_nvlink(g: Grid) -> None:
    g.row("NVLink and exporters")
    g.timeseries(
        "NVLink bandwidth counter rate",
        [(dcgm(names.DCGM["nvlink_bw"], "rate", RATE), GPU_LEGEND)],
        unit="short",
        description="rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL) per GPU, in the counter's own "
        "units per second; empty where dcgm-exporter does not export the field (no NVLink "
        "or not in its counter list).",
    )
    g.state_timeline(
        "node_exporter scrapes",
        [(f'up{{job="{names.JOB_NODE}"}}', "{{instance}}")],
        unit="none",
        mappings=[UP_STATES],
        description=f"up of scrape job {names.JOB_NODE}: no IB data without it.",
    )


def network_dashboard(spec: ClusterSpec) -> dict[str, Any]:
    """Network: InfiniBand traffic, errors and port state; NVLink where exported."""
    g = Grid()
    _network_ib(g)
    _network_nvlink(g)
    state = names.NODE["ib_state"]
    variables = [
        query_variable("instance", f"label_values({state}, instance)", label="Host"),
        query_variable(
            "device", f'label_values({state}{{instance=~"$instance"}}, device)', label="HCA"
        ),
        _node_variable(),
        query_variable("gpu", f"label_values({names.DCGM['util']}, gpu)", label="GPU"),
    ]
    return dashboard(
        f"gpuspark-{spec.name}-network",
        f"gpuspark {spec.name} / Network",
        g,
        variables,
        tags=["gpuspark", spec.name, "network"],
        description=f"InfiniBand ports ({spec.networks.compute.kind} compute network, "
        f"{spec.networks.compute.gbps:g} Gb/s) from node_exporter; NVLink from dcgm-exporter.",
    )
