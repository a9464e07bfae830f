"""Every ``GPUSPARK_*`` environment variable, defined once: its name, what it does, its default
and who sets it. Code reads a variable through its :class:`EnvVar` (``SPEC.get()``), never by a
string of its own; the README's table is :func:`markdown_table` (a test compares them)."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = [
    "AGENT_PID",
    "ALL",
    "ATTEMPT",
    "BACKEND",
    "CACHE_DIR",
    "DEBUG",
    "FORKSERVER_SYS_PATH",
    "JVM_TUNING",
    "K8S_TOKEN",
    "KEEP_LOGS",
    "LOG_DIR",
    "METRICS_HOST",
    "METRICS_PORT",
    "MIN_RANKS",
    "MONITOR_DIR",
    "QUOTA_DIR",
    "RANK_DIR",
    "RUN_ID",
    "SPARK_CONSOLE_LEVEL",
    "SPARK_LOG_LEVEL",
    "SPEC",
    "STATE_DIR",
    "STDIN_FD",
    "TEAM",
    "YARN_RM",
    "EnvVar",
    "markdown_table",
]


@dataclass(frozen=True)
class EnvVar:
    """One environment variable gpuspark reads or sets."""

    name: str
    meaning: str
    default: str = ""
    """What applies when it is unset (empty: nothing)."""
    set_by: str = "you"
    """``you``, or ``launcher``: gpuspark sets it in every rank it starts."""

    def get(self, default: str | None = None) -> str | None:
        """Its value, or ``default`` when unset or empty."""
        return os.environ.get(self.name) or default


SPEC = EnvVar(
    "GPUSPARK_SPEC",
    "the cluster spec (TOML) of every command and job without `--spec` / `spec=`",
    "the built-in embedded-cluster spec",
)
STATE_DIR = EnvVar(
    "GPUSPARK_STATE_DIR",
    "where the embedded cluster keeps its pids, ports and logs",
    "`~/.gpuspark/cluster`",
)
LOG_DIR = EnvVar("GPUSPARK_LOG_DIR", "where Spark driver logs are written", "`~/.gpuspark/logs`")
SPARK_CONSOLE_LEVEL = EnvVar(
    "GPUSPARK_SPARK_CONSOLE_LEVEL",
    "the driver's console log level (`warn` also shows Spark's warnings)",
    "`error`",
)
SPARK_LOG_LEVEL = EnvVar(
    "GPUSPARK_SPARK_LOG_LEVEL", "Spark's log level for the session (`setLogLevel`)"
)
DEBUG = EnvVar("GPUSPARK_DEBUG", "`1`: an error prints its full traceback after the one line")
MONITOR_DIR = EnvVar(
    "GPUSPARK_MONITOR_DIR",
    "`monitor up` state and the Prometheus target files of runs and clusters",
    "`~/.gpuspark/monitor`",
)
CACHE_DIR = EnvVar(
    "GPUSPARK_CACHE_DIR",
    "the DataFrame cache of `from_dataframe`",
    "`gpuspark-data/dataframes`",
)
JVM_TUNING = EnvVar(
    "GPUSPARK_JVM_TUNING",
    "`0`: drivers and executors on this machine start with the JVM's default options "
    "(no class-data-sharing archive, no light JIT and GC)",
    "`1`",
)
KEEP_LOGS = EnvVar("GPUSPARK_KEEP_LOGS", "`1`: a launch keeps its agents' and ranks' logs")
QUOTA_DIR = EnvVar(
    "GPUSPARK_QUOTA_DIR",
    "where a k8s:// job's pod templates and Volcano PodGroup templates are written",
    "`~/.gpuspark/quota`",
)
K8S_TOKEN = EnvVar(
    "GPUSPARK_K8S_TOKEN",
    "bearer token of the Kubernetes API for `quota status` / `quota why`",
    "the kubeconfig's current user, or the pod's service account",
)
YARN_RM = EnvVar(
    "GPUSPARK_YARN_RM",
    "the ResourceManager's web address for `quota status` / `quota why` on YARN",
)
BACKEND = EnvVar(
    "GPUSPARK_BACKEND",
    "the torch.distributed backend of the rank: `nccl` on GPUs, `gloo` on CPUs",
    set_by="launcher",
)
RUN_ID = EnvVar("GPUSPARK_RUN_ID", "the launch's run id (the `run_id` label)", set_by="launcher")
ATTEMPT = EnvVar(
    "GPUSPARK_ATTEMPT", "attempt of the barrier stage, from 0", "`0`", set_by="launcher"
)
TEAM = EnvVar("GPUSPARK_TEAM", "the job's team (the `team` label)", set_by="launcher")
MIN_RANKS = EnvVar(
    "GPUSPARK_MIN_RANKS",
    "the launch's `--min-ranks`: a retry after a lost host may run fewer ranks, and a rank "
    "resumes a checkpoint written by another number of ranks",
    set_by="launcher",
)
METRICS_PORT = EnvVar(
    "GPUSPARK_METRICS_PORT",
    "base port of the ranks' `/metrics` (+ local rank; `0`: off)",
    "the spec's `[monitoring] metrics_port`",
    set_by="launcher",
)
METRICS_HOST = EnvVar(
    "GPUSPARK_METRICS_HOST",
    "address the ranks' `/metrics` bind to",
    "the spec's `[monitoring] metrics_host`",
    set_by="launcher",
)
RANK_DIR = EnvVar(
    "GPUSPARK_RANK_DIR",
    "the task's log folder, where a rank leaves its `/metrics` endpoint file",
    set_by="launcher",
)
AGENT_PID = EnvVar(
    "GPUSPARK_AGENT_PID", "pid of the task's agent: a rank stops when it dies", set_by="launcher"
)
STDIN_FD = EnvVar(
    "GPUSPARK_STDIN_FD",
    "`launch --local`: the descriptor of the launcher's standard input, which rank 0 reads",
    set_by="launcher",
)
FORKSERVER_SYS_PATH = EnvVar(
    "GPUSPARK_FORKSERVER_SYS_PATH",
    "the driver's `sys.path`, for the task's fork server",
    set_by="launcher",
)

ALL: tuple[EnvVar, ...] = (
    SPEC,
    STATE_DIR,
    LOG_DIR,
    SPARK_CONSOLE_LEVEL,
    SPARK_LOG_LEVEL,
    DEBUG,
    MONITOR_DIR,
    CACHE_DIR,
    JVM_TUNING,
    KEEP_LOGS,
    QUOTA_DIR,
    K8S_TOKEN,
    YARN_RM,
    BACKEND,
    RUN_ID,
    ATTEMPT,
    TEAM,
    MIN_RANKS,
    METRICS_PORT,
    METRICS_HOST,
    RANK_DIR,
    AGENT_PID,
    STDIN_FD,
    FORKSERVER_SYS_PATH,
)


def markdown_table() -> str:
    """The README's table of environment variables."""
    lines = ["| variable | what it does | default | set by |", "|---|---|---|---|"]
    for var in ALL:
        lines.append(f"| `{var.name}` | {var.meaning} | {var.default or '-'} | {var.set_by} |")
    return "\n".join(lines) + "\n"
