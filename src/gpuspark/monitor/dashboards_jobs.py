"""The job dashboards: Spark applications and gpuspark training runs.

Spark series are the ones a Spark 4 driver and standalone master really expose
(:data:`gpuspark.monitor.names.SPARK`): per-application numbers come from the executor
endpoint, whose series carry ``application_id``/``application_name``; the driver's own
endpoint has no application label, so driver panels are per scrape target (``instance``).
Training series carry ``run_id``, ``rank``, ``host`` and ``team``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuspark.monitor import names
from gpuspark.monitor.dashboards_cluster import UP_STATES
from gpuspark.monitor.grafana import Grid, dashboard, query_variable

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["spark_dashboard", "training_dashboard"]

RATE = "$__rate_interval"
APP_LEGEND = "{{application_name}} {{application_id}}"
RUN = 'run_id=~"$run", rank=~"$rank", team=~"$team"'
DATA_WAIT = RUN + ', phase="data_wait"'


def _executors(key: str, fn: str = "", agg: str = "sum") -> str:
    """``agg`` per application of an executor-endpoint series (driver row excluded)."""
    sel = f'{names.SPARK[key]}{{application_id=~"$app", executor_id!="driver"}}'
    if fn:
        sel = f"{fn}({sel}[{RATE}])"
    return f"{agg} by (application_id, application_name) ({sel})"


def _spark_master(g: Grid) -> None:
    s = names.SPARK
    g.row("Standalone master")
    for key, title, colours in (
        ("master_alive_workers", "Alive workers", ((None, "red"), (1, "green"))),
        ("master_workers", "Registered workers", ((None, "green"),)),
        ("master_apps", "Applications", ((None, "green"),)),
        ("master_waiting_apps", "Waiting applications", ((None, "green"), (1, "yellow"))),
    ):
        g.stat(
            title,
            f"sum({s[key]})",
            unit="short",
            width=6,
            thresholds=colours,
            description=f"{s[key]} from the master's /metrics/master/prometheus (needs the "
            "PrometheusServlet sink in the master's metrics.properties).",
        )


def _spark_apps(g: Grid) -> None:
    g.row("Applications")
    g.timeseries(
        "Executors",
        [(_executors("executor_cores", agg="count"), APP_LEGEND)],
        unit="short",
        description="Live executors of each application (executor endpoint, driver excluded).",
    )
    g.timeseries(
        "Active tasks",
        [(_executors("executor_active_tasks"), APP_LEGEND)],
        unit="short",
        description="metrics_executor_activeTasks summed over each application's executors.",
    )
    g.timeseries(
        "Failed tasks",
        [(_executors("executor_failed_tasks", fn="increase"), APP_LEGEND)],
        unit="short",
        description="Failed tasks per interval (increase of metrics_executor_failedTasks_total).",
    )
    g.timeseries(
        "Completed tasks/s",
        [(_executors("executor_completed_tasks", fn="rate"), APP_LEGEND)],
        unit="ops",
        description="rate(metrics_executor_completedTasks_total) per application.",
    )
    busy = _executors("executor_active_tasks")
    slots = _executors("executor_max_tasks")
    g.timeseries(
        "Task slots busy",
        [(f"{busy} / {slots}", APP_LEGEND)],
        unit="percentunit",
        max_value=1,
        description="Active tasks / task slots (maxTasks) of each application's executors.",
    )
    g.timeseries(
        "Executor memory",
        [
            (_executors("executor_memory_used"), "storage used " + APP_LEGEND),
            (_executors("executor_jvm_heap"), "JVM heap " + APP_LEGEND),
            (_executors("executor_max_memory"), "storage max " + APP_LEGEND),
        ],
        unit="bytes",
        description="Storage memory used and available, and JVM heap, summed per application.",
    )
    gc_share = f"{_executors('executor_gc_seconds', fn='rate')} / {_executors('executor_cores')}"
    g.timeseries(
        "GC time share",
        [(gc_share, APP_LEGEND)],
        unit="percentunit",
        description="GC seconds per second per executor core: high values starve tasks.",
    )
    g.timeseries(
        "Shuffle",
        [
            (_executors("executor_shuffle_read", fn="rate"), "read " + APP_LEGEND),
            (_executors("executor_shuffle_write", fn="rate"), "write " + APP_LEGEND),
        ],
        unit="Bps",
        description="Shuffle bytes read and written per second.",
    )


def _driver_increase(key: str) -> str:
    return f"sum by (instance) (increase({names.SPARK[key]}[{RATE}]))"


def _spark_drivers(g: Grid) -> None:
    s = names.SPARK
    g.row("Drivers")
    g.timeseries(
        "Jobs and stages",
        [
            (f"sum by (instance) ({s['driver_active_jobs']})", "active jobs {{instance}}"),
            (f"sum by (instance) ({s['driver_running_stages']})", "stages {{instance}}"),
            (f"sum by (instance) ({s['driver_executors']})", "executors {{instance}}"),
        ],
        unit="short",
        description="The driver's DAGScheduler gauges and, with dynamic allocation, its "
        "executor count; one driver per target (the driver endpoint has no app label).",
    )
    g.timeseries(
        "Driver failures",
        [
            (_driver_increase("driver_failed_tasks"), "failed tasks {{instance}}"),
            (_driver_increase("driver_failed_jobs"), "failed jobs {{instance}}"),
        ],
        unit="short",
        description="Failed tasks and jobs per interval from the driver's appStatus source.",
    )
    jobs = "|".join((names.JOB_SPARK_MASTER, names.JOB_SPARK_APPS, names.JOB_SPARK_EXECUTORS))
    g.state_timeline(
        "Spark scrapes",
        [(f'up{{job=~"{jobs}"}}', "{{job}} {{instance}}")],
        unit="none",
        mappings=[UP_STATES],
        width=24,
        description="up of the Spark scrape jobs (master, drivers, executor endpoints).",
    )


def spark_dashboard(spec: ClusterSpec) -> dict[str, Any]:
    """Spark: master, executors, active/failed tasks per application, drivers."""
    g = Grid()
    _spark_master(g)
    _spark_apps(g)
    _spark_drivers(g)
    app = query_variable(
        "app", f"label_values({names.SPARK['executor_cores']}, application_id)", label="App"
    )
    return dashboard(
        f"gpuspark-{spec.name}-spark",
        f"gpuspark {spec.name} / Spark",
        g,
        [app],
        tags=["gpuspark", spec.name, "spark"],
        description=f"Spark applications on {spec.spark.master} (spark.metrics.namespace="
        f"{names.SPARK_NAMESPACE}).",
    )


def _rate(metric: str, by: str = "run_id", sel: str = RUN) -> str:
    return f"sum by ({by}) (rate({metric}{{{sel}}}[{RATE}]))"


def _training_overview(g: Grid, spec: ClusterSpec) -> None:
    m = spec.monitoring
    g.row("Overview")
    runs = f"count(count by (run_id) ({names.WORLD_SIZE}{{{RUN}}}))"
    g.stat("Runs", f"{runs} or vector(0)", unit="short", description="Runs exporting metrics.")
    g.stat(
        "Ranks up",
        f'sum(up{{job="{names.JOB_RUNS}", run_id=~"$run", team=~"$team"}}) or vector(0)',
        unit="short",
        description=f"Training ranks whose /metrics answered (scrape job {names.JOB_RUNS}).",
    )
    g.stat(
        "Samples/s",
        f"sum({_rate(names.SAMPLES)})",
        unit="suffix: samples/s",
        description="All selected ranks together.",
    )
    stall = m.stall_minutes * 60
    g.stat(
        "Since last step",
        f"max(time() - {names.LAST_STEP}{{{RUN}}})",
        unit="s",
        thresholds=((None, "green"), (stall, "red")),
        description=f"Longest time any rank has gone without a step; alert after "
        f"{m.stall_minutes:g} min.",
    )
    wait = f"sum({_rate(names.STEP_PHASE, sel=DATA_WAIT)})"
    g.stat(
        "Data wait",
        f"{wait} / sum({_rate(names.STEP_PHASE)})",
        unit="percentunit",
        thresholds=((None, "green"), (m.data_wait_pct / 100, "red")),
        description=f"Share of step time spent waiting for data; alert at {m.data_wait_pct:g} %.",
    )
    ratio = f"sum({_rate(names.GRAD_UNCOMPRESSED)}) / sum({_rate(names.GRAD_SENT)})"
    g.stat(
        "Gradient compression",
        ratio,
        unit="suffix:×",
        description="Uncompressed gradient bytes / bytes sent (1× without compression).",
    )


def _training_throughput(g: Grid) -> None:
    g.row("Throughput")
    g.timeseries(
        "Samples/s per run",
        [(_rate(names.SAMPLES), "{{run_id}}")],
        unit="suffix: samples/s",
        description="rate(gpuspark_train_samples_total) summed over each run's ranks.",
    )
    g.timeseries(
        "Samples/s per rank",
        [(_rate(names.SAMPLES, "run_id, rank"), "{{run_id}} rank {{rank}}")],
        unit="suffix: samples/s",
        description="One line per rank: a slow rank holds back every all-reduce.",
    )
    hist = f"sum by (run_id, le) (rate({names.STEP_SECONDS}_bucket{{{RUN}}}[{RATE}]))"
    g.timeseries(
        "Step duration",
        [
            (f"histogram_quantile(0.5, {hist})", "p50 {{run_id}}"),
            (f"histogram_quantile(0.95, {hist})", "p95 {{run_id}}"),
        ],
        unit="s",
        description="Median and 95th percentile wall-clock seconds per optimizer step.",
    )
    g.timeseries(
        "Steps/s per run",
        [(f"{_rate(names.STEPS)} / {_count_ranks()}", "{{run_id}}")],
        unit="ops",
        description="Optimizer steps per second (mean over each run's ranks).",
    )


def _count_ranks() -> str:
    return f"count by (run_id) ({names.STEPS}{{{RUN}}})"


def _training_step_time(g: Grid, spec: ClusterSpec) -> None:
    m = spec.monitoring
    g.row("Step time")
    phases = f"sum by (phase) (rate({names.STEP_PHASE}{{{RUN}}}[{RATE}]))"
    steps = f"sum(rate({names.STEPS}{{{RUN}}}[{RATE}]))"
    g.timeseries(
        "Step-time breakdown",
        [(f"{phases} / ignoring(phase) group_left() {steps}", "{{phase}}")],
        unit="s",
        stacking="normal",
        description="Seconds per step in each phase (" + ", ".join(names.PHASES) + "), "
        "stacked; the mean over the selected ranks. Select one run for its own breakdown.",
    )
    wait = _rate(names.STEP_PHASE, sel=DATA_WAIT)
    g.timeseries(
        "Data wait share",
        [(f"{wait} / {_rate(names.STEP_PHASE)}", "{{run_id}}")],
        unit="percentunit",
        max_value=1,
        threshold_line=m.data_wait_pct / 100,
        description=f"Share of step time waiting for the loader; [monitoring] data_wait_pct = "
        f"{m.data_wait_pct:g} %.",
    )


def _training_model(g: Grid) -> None:
    g.row("Loss and gradients")
    g.timeseries(
        "Loss",
        [(f"{names.LOSS}{{{RUN}}}", "{{run_id}} rank {{rank}}")],
        unit="none",
        description="Loss of the last optimizer step, per rank.",
    )
    g.timeseries(
        "Learning rate",
        [(f"max by (run_id) ({names.LEARNING_RATE}{{{RUN}}})", "{{run_id}}")],
        unit="sci",
        width=6,
        description="Learning rate of the first parameter group.",
    )
    g.timeseries(
        "Epoch",
        [(f"max by (run_id) ({names.EPOCH}{{{RUN}}})", "{{run_id}}")],
        unit="none",
        width=6,
        description="The epoch being trained (0-based).",
    )
    g.timeseries(
        "Gradient bytes: sent vs uncompressed",
        [
            (_rate(names.GRAD_SENT), "sent {{run_id}}"),
            (_rate(names.GRAD_UNCOMPRESSED), "uncompressed {{run_id}}"),
        ],
        unit="Bps",
        width=24,
        description="Gradient bytes put on the wire after compression vs what the same "
        "all-reduces would have sent uncompressed.",
    )


def _training_loader(g: Grid) -> None:
    g.row("Data loader and ranks")
    g.timeseries(
        "Records/s",
        [
            (_rate(names.LOADER_RECORDS), "{{run_id}}"),
            (_rate(names.LOADER_CORRUPT), "corrupt {{run_id}}"),
        ],
        unit="ops",
        width=8,
        description="Records decoded by the shard loader, and corrupt records skipped.",
    )
    hits, misses = _rate(names.LOADER_CACHE_HITS), _rate(names.LOADER_CACHE_MISSES)
    g.timeseries(
        "Shard cache hit ratio",
        [(f"{hits} / ({hits} + {misses})", "{{run_id}}")],
        unit="percentunit",
        max_value=1,
        width=8,
        description="Shard files served from the node-local cache / all shard files opened.",
    )
    g.timeseries(
        "Cache fetches",
        [(_rate(names.LOADER_CACHE_BYTES), "{{run_id}}")],
        unit="Bps",
        width=8,
        description="Bytes fetched into the node-local cache per second.",
    )
    g.timeseries(
        "Time since last step",
        [(f"time() - {names.LAST_STEP}{{{RUN}}}", "{{run_id}} rank {{rank}}")],
        unit="s",
        description="Seconds since each rank finished a step: a growing line is a stall.",
    )
    g.timeseries(
        "CUDA memory",
        [
            (f"{names.CUDA_ALLOCATED}{{{RUN}}}", "allocated {{run_id}} rank {{rank}}"),
            (f"{names.CUDA_RESERVED}{{{RUN}}}", "reserved {{run_id}} rank {{rank}}"),
        ],
        unit="bytes",
        description="torch.cuda memory allocated and reserved per rank (GPU runs only).",
    )
    g.table(
        "Runs",
        f"max by (run_id, team, recipe, backend, device) ({names.RUN_INFO}{{{RUN}}})",
        unit="none",
        width=24,
        description="gpuspark_train_run_info: one row per run with its recipe, backend, device.",
    )


def training_dashboard(spec: ClusterSpec) -> dict[str, Any]:
    """Training: samples/s per run and rank, step-time breakdown, loss, gradients, data."""
    g = Grid()
    _training_overview(g, spec)
    _training_throughput(g)
    _training_step_time(g, spec)
    _training_model(g)
    _training_loader(g)
    size = names.WORLD_SIZE
    variables = [
        query_variable("team", f"label_values({size}, team)", label="Team"),
        query_variable("run", f'label_values({size}{{team=~"$team"}}, run_id)', label="Run"),
        query_variable("rank", f'label_values({size}{{run_id=~"$run"}}, rank)', label="Rank"),
    ]
    return dashboard(
        f"gpuspark-{spec.name}-training",
        f"gpuspark {spec.name} / Training",
        g,
        variables,
        tags=["gpuspark", spec.name, "training"],
        description="gpuspark training runs: one series per rank (labels run_id, rank, host, "
        "team).",
        refresh="10s",
    )
