"""Where the Spark driver's log goes: a file per process, and only errors on the console.

Spark's default log4j2 profile prints start-up notes and WARN lines on stderr, interleaved with
progress bars. Sessions built by gpuspark start the driver JVM with a log4j2 configuration that
writes the whole driver log (INFO and up) to ``<log dir>/driver-<time>-<pid>.log`` and shows
only ERROR on the console (``GPUSPARK_SPARK_CONSOLE_LEVEL=warn``, or ``gpuspark -v``, shows
more). The log dir is ``$GPUSPARK_LOG_DIR`` or ``~/.gpuspark/logs``.

One WARN line passes to the console at any level: the scheduler's ``Initial job has not
accepted any resources`` (repeated every ``spark.starvation.timeout``, 15 s), so that a job
waiting for executors on a busy cluster says so instead of hanging in silence.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpuspark._util import envvars

__all__ = [
    "CONSOLE_LEVEL_ENV",
    "STARVING",
    "driver_java_options",
    "driver_log_file",
    "log_dir",
    "write_log_config",
]

CONSOLE_LEVEL_ENV = envvars.SPARK_CONSOLE_LEVEL.name
_LEVELS = ("off", "fatal", "error", "warn", "info", "debug", "trace", "all")
_FILE: Path | None = None

_TEMPLATE = """\
# Spark driver logging, written by gpuspark: everything to the file, {console}+ to the console.
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
rootLogger.appenderRef.file.ref = file
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = {console}
appender.file.type = File
appender.file.name = file
appender.file.fileName = {file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# Spark lowers the console of a "shell" (PySpark counts) to the level of the shell's logger
# (the REPL's, or PySpark's gateway) and says so on stderr unless it equals the root level:
# keep them equal; the filter above decides.
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = info
logger.pygateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.pygateway.level = info
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = warn
# The RPC layer's errors while a stopping driver still had messages in flight (Ctrl-C, a
# failed job torn down) are the shutdown, not its cause: the file only.
logger.network.name = org.apache.spark.network
logger.network.additivity = false
logger.network.appenderRef.file.ref = file
logger.rpc.name = org.apache.spark.rpc
logger.rpc.additivity = false
logger.rpc.appenderRef.file.ref = file
{waiting}"""

STARVING = "Initial job has not accepted any resources"
"""Spark's ``TaskSchedulerImpl`` warning while a job's tasks wait for executors."""

_WAITING = f"""\
# A job waiting for executors says so at every console level ({STARVING}).
logger.waiting.name = org.apache.spark.scheduler.TaskSchedulerImpl
logger.waiting.appenderRef.waiting.ref = waiting
appender.waiting.type = Console
appender.waiting.name = waiting
appender.waiting.target = SYSTEM_ERR
appender.waiting.layout.type = PatternLayout
appender.waiting.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n
appender.waiting.filter.starving.type = RegexFilter
appender.waiting.filter.starving.regex = .*{STARVING}.*
appender.waiting.filter.starving.onMatch = ACCEPT
appender.waiting.filter.starving.onMismatch = DENY
"""


def log_dir() -> Path:
    """``$GPUSPARK_LOG_DIR`` or ``~/.gpuspark/logs``."""
    env = envvars.LOG_DIR.get()
    return Path(env).expanduser() if env else Path.home() / ".gpuspark" / "logs"


def driver_log_file() -> Path:
    """This process's driver log file (one per process: the JVM starts once)."""
    global _FILE
    if _FILE is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        _FILE = log_dir() / f"driver-{stamp}-{os.getpid()}.log"
    return _FILE


def _console_level() -> str:
    level = os.environ.get(CONSOLE_LEVEL_ENV, "error").strip().lower()
    return level if level in _LEVELS else "error"


def _config_file() -> Path:
    return driver_log_file().with_suffix(".log4j2.properties")


def driver_java_options(existing: str | None = None) -> str | None:
    """``spark.driver.extraJavaOptions`` pointing log4j2 at gpuspark's configuration, or
    ``None`` when the user already chose a log4j configuration."""
    if existing and "log4j" in existing:
        return None
    option = f"-Dlog4j2.configurationFile=file:{_config_file()}"
    return f"{existing} {option}" if existing else option


def write_log_config() -> Path:
    """Write the log4j2 configuration (idempotent) and return the driver log's path."""
    target = driver_log_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    level = _console_level()
    shown = _LEVELS.index(level) >= _LEVELS.index("warn")  # the console has it already
    text = _TEMPLATE.format(console=level, file=target, waiting="" if shown else _WAITING)
    config = _config_file()
    tmp = config.with_name(f".{config.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, config)
    return target
