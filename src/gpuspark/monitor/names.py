"""The metric names and labels gpuspark exports, and the exporters' names it relies on.

One place for every name: the exporter (:mod:`gpuspark.monitor.exporter`), the rendered alert
rules and dashboards, and ``gpuspark top`` all read them from here, so a rename cannot leave a
dashboard querying a series that no longer exists. Names follow Prometheus conventions: base
units (``_seconds``, ``_bytes``), counters end in ``_total``.
"""

from __future__ import annotations

__all__ = [
    "CUDA_ALLOCATED",
    "CUDA_RESERVED",
    "DCGM",
    "DCGM_HOST_LABELS",
    "DCGM_PORT",
    "EPOCH",
    "GRAD_SENT",
    "GRAD_UNCOMPRESSED",
    "JOB_DCGM",
    "JOB_NODE",
    "JOB_RUNS",
    "JOB_SPARK_APPS",
    "JOB_SPARK_EXECUTORS",
    "JOB_SPARK_MASTER",
    "LABELS",
    "LAST_STEP",
    "LEARNING_RATE",
    "LOADER_CACHE_BYTES",
    "LOADER_CACHE_HITS",
    "LOADER_CACHE_MISSES",
    "LOADER_CORRUPT",
    "LOADER_RECORDS",
    "LOSS",
    "NODE",
    "NODE_EXPORTER_PORT",
    "PHASES",
    "RUN_INFO",
    "SAMPLES",
    "SPARK_NAMESPACE",
    "STEPS",
    "STEP_PHASE",
    "STEP_SECONDS",
    "TRAINING_METRICS",
    "WORLD_SIZE",
]

# -- gpuspark training ranks (one /metrics per rank) -----------------------------------------
LABELS = ("run_id", "rank", "host", "team")
"""Labels on every training series. ``team`` is ``""`` when the run names no team."""

SAMPLES = "gpuspark_train_samples_total"
"""Counter: samples this rank has trained on."""
STEPS = "gpuspark_train_steps_total"
"""Counter: optimizer steps this rank has finished."""
STEP_SECONDS = "gpuspark_train_step_duration_seconds"
"""Histogram: wall-clock seconds per optimizer step (data wait included)."""
STEP_PHASE = "gpuspark_train_step_phase_seconds_total"
"""Counter with label ``phase`` (:data:`PHASES`): where step time went."""
PHASES = ("data_wait", "compute", "comm", "optimizer")
"""Values of the ``phase`` label: the loop's step-time breakdown (comm = exposed comm)."""
GRAD_SENT = "gpuspark_train_gradient_sent_bytes_total"
"""Counter: gradient bytes this rank put on the wire (after compression)."""
GRAD_UNCOMPRESSED = "gpuspark_train_gradient_uncompressed_bytes_total"
"""Counter: gradient bytes the same all-reduces would have sent uncompressed."""
LOSS = "gpuspark_train_loss"
"""Gauge: loss of the last optimizer step on this rank."""
LEARNING_RATE = "gpuspark_train_learning_rate"
"""Gauge: learning rate of the first parameter group."""
EPOCH = "gpuspark_train_epoch"
"""Gauge: the epoch being trained (0-based)."""
LAST_STEP = "gpuspark_train_last_step_timestamp_seconds"
"""Gauge: Unix time the last optimizer step finished (stall detection: ``time() - x``)."""
WORLD_SIZE = "gpuspark_train_world_size"
"""Gauge: ranks in the run."""
RUN_INFO = "gpuspark_train_run_info"
"""Gauge, always 1: labels ``recipe``, ``backend``, ``device`` describe the run."""
LOADER_RECORDS = "gpuspark_loader_records_total"
"""Counter: records the shard loader decoded."""
LOADER_CORRUPT = "gpuspark_loader_corrupt_records_total"
"""Counter: corrupt records the loader skipped."""
LOADER_CACHE_HITS = "gpuspark_loader_cache_hits_total"
"""Counter: shard files served from the node-local cache."""
LOADER_CACHE_MISSES = "gpuspark_loader_cache_misses_total"
"""Counter: shard files fetched into the node-local cache."""
LOADER_CACHE_BYTES = "gpuspark_loader_cache_fetched_bytes_total"
"""Counter: bytes fetched into the node-local cache."""
CUDA_ALLOCATED = "gpuspark_cuda_memory_allocated_bytes"
"""Gauge: ``torch.cuda.memory_allocated()`` (GPU runs only)."""
CUDA_RESERVED = "gpuspark_cuda_memory_reserved_bytes"
"""Gauge: ``torch.cuda.memory_reserved()`` (GPU runs only)."""

TRAINING_METRICS = (
    SAMPLES,
    STEPS,
    STEP_SECONDS,
    STEP_PHASE,
    GRAD_SENT,
    GRAD_UNCOMPRESSED,
    LOSS,
    LEARNING_RATE,
    EPOCH,
    LAST_STEP,
    WORLD_SIZE,
    RUN_INFO,
    LOADER_RECORDS,
    LOADER_CORRUPT,
    LOADER_CACHE_HITS,
    LOADER_CACHE_MISSES,
    LOADER_CACHE_BYTES,
    CUDA_ALLOCATED,
    CUDA_RESERVED,
)

# -- Prometheus scrape job names (rendered prometheus.yml; rules and dashboards select on them) --
JOB_RUNS = "gpuspark-runs"
"""Training ranks, discovered through the file_sd target files the driver writes per run."""
JOB_DCGM = "dcgm"
JOB_NODE = "node"
JOB_SPARK_MASTER = "spark-master"
JOB_SPARK_APPS = "spark-apps"
"""Spark drivers' ``/metrics/prometheus`` (PrometheusServlet, driver instance)."""
JOB_SPARK_EXECUTORS = "spark-executors"
"""Spark drivers' ``/metrics/executors/prometheus`` (``spark.ui.prometheus.enabled``)."""

SPARK_NAMESPACE = "gpuspark"
"""``spark.metrics.namespace``: stable, so driver series aggregate across applications."""

# -- third-party exporters ---------------------------------------------------------------------
DCGM_PORT = 9400
NODE_EXPORTER_PORT = 9100
DCGM_HOST_LABELS = ("Hostname", "hostname")
"""dcgm-exporter releases label the host ``Hostname``; newer code ``hostname``."""

DCGM = {
    "util": "DCGM_FI_DEV_GPU_UTIL",
    "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "fb_used": "DCGM_FI_DEV_FB_USED",
    "fb_free": "DCGM_FI_DEV_FB_FREE",
    "fb_reserved": "DCGM_FI_DEV_FB_RESERVED",
    "temp": "DCGM_FI_DEV_GPU_TEMP",
    "power": "DCGM_FI_DEV_POWER_USAGE",
    "xid": "DCGM_FI_DEV_XID_ERRORS",
    "nvlink_bw": "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
}
"""dcgm-exporter's default-counter names gpuspark's rules and dashboards use."""

NODE = {
    "ib_rx": "node_infiniband_port_data_received_bytes_total",
    "ib_tx": "node_infiniband_port_data_transmitted_bytes_total",
    "ib_state": "node_infiniband_state_id",
    "ib_link_downed": "node_infiniband_link_downed_total",
    "ib_symbol_errors": "node_infiniband_symbol_error_total",
    "ib_rcv_errors": "node_infiniband_port_errors_received_total",
    "fs_avail": "node_filesystem_avail_bytes",
    "fs_size": "node_filesystem_size_bytes",
}
"""node_exporter names (infiniband and filesystem collectors)."""

# -- Spark 4 (PrometheusServlet and spark.ui.prometheus.enabled) ----------------------------
__all__ += ["SPARK"]

SPARK = {
    # /metrics/executors/prometheus on a driver's UI (job spark-executors): one series per
    # executor (plus executor_id="driver"), labels application_id, application_name, executor_id
    "executor_cores": "metrics_executor_totalCores",
    "executor_max_tasks": "metrics_executor_maxTasks",
    "executor_active_tasks": "metrics_executor_activeTasks",
    "executor_failed_tasks": "metrics_executor_failedTasks_total",
    "executor_completed_tasks": "metrics_executor_completedTasks_total",
    "executor_memory_used": "metrics_executor_memoryUsed_bytes",
    "executor_max_memory": "metrics_executor_maxMemory_bytes",
    "executor_jvm_heap": "metrics_executor_JVMHeapMemory_bytes",
    "executor_gc_seconds": "metrics_executor_totalGCTime_seconds_total",
    "executor_shuffle_read": "metrics_executor_totalShuffleRead_bytes_total",
    "executor_shuffle_write": "metrics_executor_totalShuffleWrite_bytes_total",
    # /metrics/prometheus on a driver's UI (job spark-apps): no application label (the target's
    # labels tell applications apart); the prefix carries spark.metrics.namespace
    "driver_active_jobs": f"metrics_{SPARK_NAMESPACE}_driver_DAGScheduler_job_activeJobs_Value",
    "driver_running_stages": (
        f"metrics_{SPARK_NAMESPACE}_driver_DAGScheduler_stage_runningStages_Value"
    ),
    "driver_failed_jobs": f"metrics_{SPARK_NAMESPACE}_driver_appStatus_jobs_failedJobs_Count",
    "driver_failed_tasks": f"metrics_{SPARK_NAMESPACE}_driver_appStatus_tasks_failedTasks_Count",
    "driver_completed_tasks": (
        f"metrics_{SPARK_NAMESPACE}_driver_appStatus_tasks_completedTasks_Count"
    ),
    "driver_executors": (
        f"metrics_{SPARK_NAMESPACE}_driver_ExecutorAllocationManager_executors_"
        "numberAllExecutors_Value"
    ),
    # /metrics/master/prometheus on the standalone master's web UI (job spark-master)
    "master_alive_workers": "metrics_master_aliveWorkers_Value",
    "master_workers": "metrics_master_workers_Value",
    "master_apps": "metrics_master_apps_Value",
    "master_waiting_apps": "metrics_master_waitingApps_Value",
}
"""Spark 4 series the dashboards read, as read from a running Spark 4.3 driver and standalone
master (``driver_executors`` exists only with dynamic allocation; the ``driver_*`` task and job
counters come from the appStatus source, present there without setting
``spark.metrics.appStatusSource.enabled``)."""
