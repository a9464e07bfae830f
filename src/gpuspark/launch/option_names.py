"""How an error names a launch option: the command line's flag first, the Python keyword
after, ``--nproc-per-node 2 (processes_per_task=2)``, so that one message reads right from
``gpuspark launch`` and from :func:`gpuspark.launch.run`."""

from __future__ import annotations

__all__ = ["FLAGS", "option"]

FLAGS = {
    "num_processes": "-n",
    "processes_per_task": "--nproc-per-node",
    "gpus_per_process": "--gpus-per-process",
    "backend": "--backend",
    "max_restarts": "--max-restarts",
    "max_attempts": "--max-attempts",
    "min_ranks": "--min-ranks",
    "collective_timeout": "--collective-timeout",
    "metrics_port": "--metrics-port",
    "log_dir": "--log-dir",
    "tee": "--tee",
    "timeout": "--timeout",
    "local": "--local",
}
"""Each launch keyword's flag on ``gpuspark launch`` (and ``gpuspark train``)."""

_NO_VALUE = object()


def option(name: str, value: object = _NO_VALUE) -> str:
    """``name``'s flag, then the keyword: ``--min-ranks 3 (min_ranks=3)`` with a value,
    ``--log-dir (log_dir)`` without; ``--tee (tee=True)`` for a flag that is on."""
    flag = FLAGS[name]
    if value is _NO_VALUE:
        return f"{flag} ({name})"
    if value is True:
        return f"{flag} ({name}=True)"
    return f"{flag} {value} ({name}={value!r})"
