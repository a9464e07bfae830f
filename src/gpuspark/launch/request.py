"""The launch request: what to run, on how many ranks, where, as plain data.

:func:`make_request` turns :func:`gpuspark.launch.run`'s arguments into a :class:`LaunchRequest`
(the function cloudpickled, or a script path checked on the driver); the request checks its own
shape when built and prints itself with :meth:`LaunchRequest.materialize` (a dry run).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark._util.procs import machine_key
from gpuspark.errors import LaunchError, did_you_mean
from gpuspark.launch.option_names import option

__all__ = ["OPTIONS", "LaunchRequest", "build_request", "make_request"]

_BACKENDS = ("auto", "nccl", "gloo")


def _python_version() -> tuple[int, int]:
    return (sys.version_info[0], sys.version_info[1])


@dataclass
class LaunchRequest:
    """What to run, on how many ranks, where: plain data, built before anything starts."""

    num_processes: int
    """World size: the number of ranks."""
    gpus_per_process: float = 1.0
    """Whole GPUs per rank (0 for CPU ranks)."""
    processes_per_task: int | None = None
    """Ranks per Spark barrier task (default 1 on Spark; all of them in local mode)."""
    local: bool = False
    """Run on this machine instead of Spark."""
    master: str | None = None
    """Spark master URL, for display."""
    backend: str = "auto"
    """``auto`` (NCCL when GPUs are assigned and CUDA is available, else gloo), nccl, gloo."""
    max_restarts: int = 0
    """Restarts of failed ranks by the elastic agent."""
    max_attempts: int = 1
    """Attempts of the whole barrier stage (the last one's failure is raised)."""
    min_ranks: int | None = None
    """Elastic: a retry after a lost host runs on as many ranks as the hosts that remain
    hold, at least this many (``None``: always ``num_processes``); the ranks resume a
    checkpoint written by another number of ranks."""
    timeout: float | None = None
    """Seconds per attempt (all ranks are stopped when it runs out), or None."""
    collective_timeout: float | None = None
    """Seconds a rank waits in one collective before it fails: the default of
    ``init_process_group(timeout=...)`` in every rank (a rank passing its own ``timeout``
    keeps it); ``None``: the spec's ``[training] collective_timeout_s``."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of every rank."""
    team: str | None = None
    """Team label of the ranks' metrics (one of the spec's ``[[teams]]``)."""
    metrics_port: int | None = None
    """Base port of the ranks' ``/metrics`` (rank's port = base + local rank; 0: off);
    ``None``: the spec's ``[monitoring] metrics_port``."""
    metrics_host: str | None = None
    """Address the ranks' ``/metrics`` bind to; ``None``: the spec's ``metrics_host``."""
    function: str | None = None
    """Name of the function (function mode)."""
    payload: bytes | None = field(default=None, repr=False)
    """``cloudpickle.dumps((fn, args, kwargs))`` (function mode)."""
    script: list[str] | None = None
    """``[script.py, *args]`` (script mode), or ``[module, *args]`` with ``module``."""
    module: bool = False
    """``script[0]`` names a module, run as ``python -m`` does (torchrun's ``-m``)."""
    log_dir: str | None = None
    """A folder on the driver: each rank's output (stdout and stderr, one stream) goes to
    ``<log_dir>/rank_<r>.log``, and the console shows rank 0 only unless ``tee``."""
    tee: bool = False
    """With ``log_dir``: the console shows every rank too (torchrun's ``--tee 3``)."""
    workdir: str = field(default_factory=os.getcwd)
    """Where the launch was started: the ranks' working directory on this machine's executors
    (elsewhere they start in the executor's work folder)."""
    driver_machine: str = field(default_factory=machine_key)
    """:func:`~gpuspark._util.procs.machine_key` of the driver."""
    host_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """The spec's network variables (``NCCL_SOCKET_IFNAME``, ``GLOO_SOCKET_IFNAME``,
    ``NCCL_IB_HCA``, ``NCCL_IB_GID_INDEX``) per host name, short name and address
    (:func:`gpuspark.spec.network.hosts_network_env`): each task looks its host up; ``env``
    wins over them."""
    driver_python: tuple[int, int] = field(default_factory=_python_version)
    """The driver's Python (major, minor): every barrier task compares its own with it before
    any rank starts (cloudpickle needs the same version on both sides)."""

    def __post_init__(self) -> None:
        _check_shape(self)

    @property
    def per_task(self) -> int:
        """Ranks per task (per node in local mode)."""
        if self.local:
            return self.num_processes
        return self.processes_per_task or 1

    @property
    def num_tasks(self) -> int:
        """Barrier tasks (elastic agents / nodes)."""
        return self.num_processes // self.per_task

    @property
    def gpus_per_task(self) -> float:
        """GPUs one barrier task asks for in its resource profile."""
        return self.gpus_per_process * self.per_task

    @property
    def rdzv_backend(self) -> str:
        """``static`` (one TCP store at task 0, fastest) unless ranks may restart.

        The static rendezvous never forms a new round: restarted ranks would read their peers'
        old addresses, and other nodes would not follow. ``c10d`` starts a new round on every
        restart, on every node.
        """
        return "c10d" if self.max_restarts > 0 else "static"

    @property
    def entrypoint(self) -> str:
        """What each rank runs, for humans."""
        if self.script is not None:
            words = ["-m", *self.script] if self.module else self.script
            return " ".join(shlex.quote(a) for a in words)
        return f"function {self.function or '?'}"

    def materialize(self) -> str:
        """The launch as text: what would run where (a dry run; nothing is started)."""
        gpu = f"{self.gpus_per_task:g}"
        lines = [
            f"ranks: {self.num_processes} ({self.num_tasks} node(s) x {self.per_task})",
            f"entrypoint: {self.entrypoint}",
            f"backend: {self.backend}",
            f"elastic agent: rdzv={self.rdzv_backend} max_restarts={self.max_restarts} "
            f"attempts={self.max_attempts} timeout={self.timeout}",
            f"collective timeout: {_seconds(self.collective_timeout)}",
        ]
        if self.min_ranks is not None:
            lines.append(f"elastic: a retry after a lost host runs >= {self.min_ranks} ranks")
        if self.local:
            lines.insert(0, "mode: local (this machine)")
        else:
            lines.insert(0, f"mode: spark ({self.master or 'session master'})")
            lines.append(
                f"barrier stage: {self.num_tasks} tasks, task resource profile cpus=1 gpu={gpu}"
            )
        lines.append("per node: " + self._torchrun_line())
        if self.metrics_port is not None or self.team:
            lines.append(self._metrics_line())
        if self.log_dir is not None:
            lines.append(self.logs_line())
        lines += [f"env: {k}={v}" for k, v in sorted(storage.redact(self.env).items())]
        return "\n".join(lines)

    def logs_line(self) -> str:
        """Where the ranks' output goes with ``log_dir`` (printed when the launch starts)."""
        files = os.path.join(self.log_dir or "", "rank_<r>.log")
        console = "every rank" if self.tee else "rank 0 only (--tee: every rank)"
        return f"rank output: {files}; console: {console}"

    def _metrics_line(self) -> str:
        if self.metrics_port == 0:
            where = "off"
        else:
            base = "spec" if self.metrics_port is None else str(self.metrics_port)
            where = f"{self.metrics_host or 'spec host'}:{base}+local_rank"
        return f"metrics: {where} team={self.team or '-'}"

    def _torchrun_line(self) -> str:
        parts = ["torchrun", f"--nnodes={self.num_tasks}", f"--nproc-per-node={self.per_task}"]
        parts += [f"--rdzv-backend={self.rdzv_backend}", "--rdzv-endpoint=<task0-host>:<port>"]
        parts += [f"--max-restarts={self.max_restarts}"]
        if self.num_tasks > 1 and self.rdzv_backend == "static":
            parts.append("--node-rank=<task>")
        return " ".join([*parts, self.entrypoint])


def _seconds(value: float | None) -> str:
    return "spec" if value is None else f"{value:g} s"


def _whole(value: float) -> bool:
    return float(value).is_integer()


def _check_shape(req: LaunchRequest) -> None:
    if not isinstance(req.num_processes, int) or req.num_processes < 1:
        raise LaunchError(
            f"{option('num_processes', req.num_processes)} must be a whole number >= 1",
            remedy="pass -n N (num_processes=N), the number of ranks",
        )
    ppt = req.processes_per_task
    if ppt is not None and (not isinstance(ppt, int) or ppt < 1):
        raise LaunchError(f"{option('processes_per_task', ppt)} must be a whole number >= 1")
    if ppt is not None and req.local and ppt != req.num_processes:
        raise LaunchError(
            f"{option('processes_per_task', ppt)} does not match "
            f"{option('num_processes', req.num_processes)} in local mode: --local runs one "
            "node of all the ranks",
            remedy="make them equal or leave -n out; several nodes need Spark: drop --local",
        )
    if ppt is not None and req.num_processes % ppt:
        lower = req.num_processes - req.num_processes % ppt
        options = ", ".join(str(n) for n in (lower, lower + ppt) if n > 0)
        raise LaunchError(
            f"{option('num_processes', req.num_processes)} is not a multiple of "
            f"{option('processes_per_task', ppt)}",
            remedy=f"use -n {options}, or another --nproc-per-node",
        )
    g = req.gpus_per_process
    if g < 0 or not _whole(g):
        raise LaunchError(
            f"{option('gpus_per_process', g)}: a training process needs whole GPUs",
            remedy="use 1 (or 2, ...); use 0 for CPU ranks",
        )
    if req.backend not in _BACKENDS:
        raise LaunchError(
            f"{option('backend', req.backend)} is not one of {', '.join(_BACKENDS)}"
            + did_you_mean(req.backend, _BACKENDS)
        )
    _check_min_ranks(req)
    if req.max_restarts < 0 or req.max_attempts < 1:
        raise LaunchError(
            f"{option('max_restarts', req.max_restarts)}, "
            f"{option('max_attempts', req.max_attempts)}",
            remedy="--max-restarts must be >= 0 and --max-attempts >= 1",
        )
    if (req.payload is None) == (req.script is None):
        raise LaunchError("a launch needs exactly one of a function or a script")
    if req.module and req.script is None:
        raise LaunchError(
            "module=True runs a module by name, not a function",
            remedy="give the module's name as a string (or drop module=True)",
        )
    if req.tee and req.log_dir is None:
        raise LaunchError(
            f"{option('tee', True)} shows every rank on the console besides the files of "
            f"{option('log_dir')}, which was not given: without it the console shows every rank",
            remedy="add --log-dir DIR, or drop --tee",
        )
    _check_metrics_port(req.metrics_port)
    _check_collective_timeout(req.collective_timeout)


def _check_min_ranks(req: LaunchRequest) -> None:
    k = req.min_ranks
    if k is None:
        return
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= req.num_processes:
        raise LaunchError(
            f"{option('min_ranks', k)} must be a whole number from 1 to "
            f"{req.num_processes}, the ranks in all (-n)",
            remedy="--min-ranks K lets a retry continue on K or more ranks",
        )
    if req.local:
        raise LaunchError(
            f"{option('min_ranks', k)}: --local runs every rank on this machine, there is no "
            "host to lose",
            remedy="drop --min-ranks, or run on Spark (drop --local)",
        )
    if k % req.per_task:
        raise LaunchError(
            f"{option('min_ranks', k)} is not a multiple of "
            f"{option('processes_per_task', req.per_task)}",
            remedy="a retry drops whole tasks (nodes): use a multiple of --nproc-per-node",
        )
    if req.max_attempts < 2:
        raise LaunchError(
            f"{option('min_ranks', k)} needs a retry to act on: "
            f"{option('max_attempts', req.max_attempts)}",
            remedy="add --max-attempts 2 (or more)",
        )


_MAX_COLLECTIVE_TIMEOUT_S = 10**9
"""Beyond what ``datetime.timedelta`` holds comfortably (also keeps out inf and NaN)."""


def _check_collective_timeout(seconds: object) -> None:
    if seconds is None:
        return
    ok = (
        isinstance(seconds, int | float)
        and not isinstance(seconds, bool)
        and 0 < seconds < _MAX_COLLECTIVE_TIMEOUT_S
    )
    if not ok:
        raise LaunchError(
            f"{option('collective_timeout', seconds)} is not a number of seconds > 0",
            remedy="use e.g. 600 (10 minutes), or leave it out for the spec's "
            "[training] collective_timeout_s",
        )


def _check_metrics_port(port: object) -> None:
    if port is not None and (not isinstance(port, int) or not 0 <= port <= 65535):
        raise LaunchError(
            f"{option('metrics_port', port)} is not a port",
            remedy="use 0 to 65535 (0: metrics off)",
        )


OPTIONS = frozenset(LaunchRequest.__dataclass_fields__) - {"payload", "script", "function", "env"}
"""The keyword arguments of :func:`make_request` that set the launch, not the function."""


def make_request(
    fn: Callable[..., Any] | str, *args: Any, env: Mapping[str, str] | None = None, **kw: Any
) -> LaunchRequest:
    """Build the :class:`LaunchRequest` for :func:`~gpuspark.launch.run`'s arguments (nothing
    starts): keyword arguments named in :data:`OPTIONS` set the launch, the others go to
    ``fn``. ``fn`` a path: a script, ``args`` its command line; with ``module=True`` a
    module's name, run as ``python -m`` does. ``log_dir``: a folder on this machine for
    one ``rank_<r>.log`` per rank (checked here, made when the launch starts)."""
    opts = {k: kw.pop(k) for k in list(kw) if k in OPTIONS}
    return build_request(fn, args, kw, env=env, **opts)


def build_request(
    fn: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    **opts: Any,
) -> LaunchRequest:
    """The :class:`LaunchRequest` to run ``fn(*args, **kwargs)`` (or the script or module
    ``fn`` with the command line ``args``); ``opts`` are the request's fields."""
    if opts.get("log_dir") is not None:
        opts["log_dir"] = _log_dir(opts["log_dir"])
    if isinstance(fn, str | os.PathLike):
        if kwargs:
            raise LaunchError(f"a script takes command-line arguments, not {sorted(kwargs)}")
        target = _module_name(fn) if opts.get("module") else _script_path(fn)
        return LaunchRequest(script=[target, *map(str, args)], env=dict(env or {}), **opts)
    import cloudpickle

    payload = cloudpickle.dumps((fn, args, kwargs))
    name = getattr(fn, "__qualname__", type(fn).__name__)
    return LaunchRequest(function=name, payload=payload, env=dict(env or {}), **opts)


def _module_name(name: str | os.PathLike[str]) -> str:
    """A dotted module name as ``python -m`` takes it; a file name is refused with a hint
    (the module itself is looked up by the ranks, where it may be installed)."""
    text = os.fspath(name)
    if not all(part.isidentifier() for part in text.split(".")):
        hint = "without -m, give the script's path" if text.endswith(".py") else "e.g. pkg.train"
        raise LaunchError(
            f"module {text!r} is not a module name (dotted Python names, as python -m takes)",
            remedy=hint,
        )
    return text


def _log_dir(path: str | os.PathLike[str]) -> str:
    """The log folder as an absolute path, refused now when it, or a folder above it, is a
    file (it is made when the launch starts, not by a dry run)."""
    shown = os.fspath(path)
    p = Path(path).expanduser().absolute()
    blocker = next((q for q in (*reversed(p.parents), p) if q.exists() and not q.is_dir()), None)
    if blocker is not None:
        what = "is a file" if blocker == p else f"is under {blocker}, a file"
        raise LaunchError(
            f"--log-dir {shown} (log_dir) {what}, not a folder",
            remedy="name a folder (new or existing) for the rank_<r>.log files",
        )
    return str(p)


def _script_path(path: str | os.PathLike[str]) -> str:
    """The script as an absolute path, checked on the driver: ranks start in other working
    directories (a Spark worker's), where a relative path names nothing."""
    p = Path(path).expanduser()
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "does not exist"
        raise LaunchError(
            f"script {os.fspath(path)}: {what}",
            remedy="give the path of a Python file (relative to the current directory or absolute)",
        )
    _check_source_text(p, os.fspath(path))
    return str(p.resolve())


def _check_source_text(p: Path, shown: str) -> None:
    """Refuse a script that is not Python source text (binary, or not in its encoding) now,
    not after N ranks have started and failed on it."""
    import tokenize

    try:
        with open(p, "rb") as f:
            data = f.read()
        encoding, _ = tokenize.detect_encoding(iter(data.splitlines(keepends=True)).__next__)
        data.decode(encoding)
        ok = b"\0" not in data
    except OSError as exc:
        raise LaunchError(
            f"script {shown}: cannot read it ({exc.strerror or exc})", remedy="check the path"
        ) from None
    except (SyntaxError, UnicodeDecodeError, LookupError):
        ok = False
    if not ok:
        raise LaunchError(
            f"script {shown} is not Python source text (binary or not UTF-8)",
            remedy="give the path of a .py file",
        )
