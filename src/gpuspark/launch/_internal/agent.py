"""The per-task side of a launch: one torch elastic agent and its ranks, watched and tailed.

:func:`run_task` runs wherever one "node" of the job lives: inside a Spark barrier task, or in
the caller's process for local mode. It forks the elastic agent into its own process group
(``torch.distributed.launcher.api.elastic_launch``), tails the rank log files and hands every
line to a :class:`Sink`, and on abort, timeout or exit kills the whole group. Every process in
the chain follows its parent (``PR_SET_PDEATHSIG``): if Spark kills the task's Python worker, the
agent gets SIGTERM and stops its ranks, and a rank whose agent is gone gets SIGKILL.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import types
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuspark._util import envvars
from gpuspark._util.net import free_port
from gpuspark.launch._internal import rendezvous, worker
from gpuspark.launch._internal.rendezvous import host_store
from gpuspark.launch._internal.worker import set_parent_death_signal, set_process_name
from gpuspark.monitor.rank_settings import endpoint_rank, read_endpoint

__all__ = ["Sink", "TaskSetup", "run_task", "store_port"]

_TAIL_LINES = 30
_POLL_S = 0.05
_AGENT_SHUTDOWN_S = 5
_WORKER_MODULE = worker.__name__
"""What a script-mode rank runs (``python -m``): set-up, then the user's script."""


@dataclass
class TaskSetup:
    """Everything one node of the job needs: plain data, picklable."""

    run_id: str
    task_index: int
    num_tasks: int
    nproc: int
    master_addr: str
    master_port: int
    local_addr: str
    rdzv_backend: str
    max_restarts: int
    start_method: str
    payload: bytes | None = None
    """``cloudpickle.dumps((fn, args, kwargs))`` in function mode."""
    script: list[str] | None = None
    """``[script.py, *args]`` in script mode (``[module, *args]`` with ``module``)."""
    module: bool = False
    """``script[0]`` is a module, run as ``python -m`` does."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of every rank (``CUDA_VISIBLE_DEVICES``, ``GPUSPARK_*``, user env)."""
    host: str = ""
    """How the driver names this task's host in messages."""
    store_fd: int = -1
    """Task 0 of a static rendezvous: a listening socket's fd (from :func:`store_port`) that
    the job's TCP store takes over; the task owns it until then."""
    workdir: str = ""
    """The ranks' working directory (empty: the task's own)."""
    collective_timeout: float | None = None
    """Seconds: the default timeout of the ranks' ``init_process_group`` (``None``: torch's)."""


class Sink(Protocol):
    """Where a task's output goes: the driver's console (local) or its log server (Spark)."""

    def line(self, rank: int, text: str) -> None:
        """One line a rank printed."""

    def notice(self, kind: str, payload: dict[str, Any]) -> None:
        """A structured event: ``"failed"`` (a failure report), ``"metrics"`` (a rank's
        ``/metrics`` endpoint) or ``"info"``."""

    def aborted(self) -> bool:
        """True once the driver asked every task to stop."""


def store_port(host: str, rdzv_backend: str) -> tuple[int, int]:
    """``(port, fd)`` for the job's rendezvous at task 0 on ``host``.

    Static: a socket listening on ``host`` only (not every interface), held from now on, so no
    other process can take the port before the store does; the store takes over ``fd``.
    c10d: a free port for torch's own store (which listens on every interface) and ``-1``.
    """
    if rdzv_backend != "static":
        return free_port(""), -1
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        sock.listen(1024)
        port = int(sock.getsockname()[1])
    except BaseException:
        sock.close()
        raise
    return port, sock.detach()


# ---------------------------------------------------------------------------- agent process


def _launch_config(spec: TaskSetup, log_dir: str) -> Any:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    endpoint = f"{spec.master_addr}:{spec.master_port}"
    backend = spec.rdzv_backend
    if backend == "static":
        backend = rendezvous.BACKEND  # the store lives in task 0's process, not in an agent
        configs: dict[str, Any] = {"rank": spec.task_index, "timeout": 300}
    else:
        configs = {"is_host": spec.task_index == 0, "join_timeout": 300}
    kwargs: dict[str, Any] = dict(
        min_nodes=spec.num_tasks,
        max_nodes=spec.num_tasks,
        nproc_per_node=spec.nproc,
        run_id=spec.run_id,
        rdzv_backend=backend,
        rdzv_endpoint=endpoint,
        rdzv_configs=configs,
        max_restarts=spec.max_restarts,
        monitor_interval=0.1,
        start_method=spec.start_method,
        local_addr=spec.local_addr,
        logs_specs=DefaultLogsSpecs(log_dir=os.path.join(log_dir, "torch")),
    )
    if "shutdown_timeout" in LaunchConfig.__dataclass_fields__:  # torch >= 2.12
        kwargs["shutdown_timeout"] = _AGENT_SHUTDOWN_S
    return LaunchConfig(**kwargs)


def _failure_records(exc: Any) -> list[dict[str, Any]]:
    records = []
    for rank, failure in exc.failures.items():
        exitcode = int(failure.exitcode)
        records.append(
            {
                "rank": int(rank),
                "local_rank": int(failure.local_rank),
                "exitcode": exitcode,
                "signal": signal.Signals(-exitcode).name if exitcode < 0 else None,
                "timestamp": int(failure.timestamp),
            }
        )
    return records


def _plain_agent_logging() -> None:
    # torch's own log formatter imports torch._dynamo on the first error record: seconds of
    # imports in the agent right when a rank fails. A plain handler says the same.
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("torch.distributed.elastic", "torch.distributed.launcher"):
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.propagate = False


def _agent_main(spec: TaskSetup, log_dir: str) -> dict[str, Any]:
    """Body of the forked agent process; returns what the task reports."""
    os.environ.update(spec.env)
    os.environ[envvars.AGENT_PID.name] = str(os.getpid())
    set_process_name(f"gpuspark-agent{spec.task_index}")
    # Never let the agent initialise CUDA: ranks are forked from it (torch issue #40403).
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    if spec.rdzv_backend == "c10d":
        # Ranks of every round get a fresh TCP store (rank 0 hosts it on a new port). Sharing
        # the agent's store, a restarted round read its peers' addresses from the last round.
        os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    _plain_agent_logging()

    rendezvous.register()
    if spec.start_method == "forkserver" and spec.payload is not None:
        from gpuspark.launch._internal import forkserver

        forkserver.start()  # before the rendezvous starts its threads in this agent
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    config = _launch_config(spec, log_dir)
    timeout = spec.collective_timeout
    target = ["-m", *(spec.script or [])] if spec.module else list(spec.script or [])
    try:
        if spec.payload is not None:
            outputs = elastic_launch(config, worker.entry)(spec.payload, log_dir, timeout)
        elif spec.start_method == "fork":  # torch is imported here already
            outputs = elastic_launch(config, worker.script_entry)(target, log_dir, timeout)
        else:
            args = ["-u", "-m", _WORKER_MODULE, "--log-dir", log_dir]
            if timeout is not None:
                args += ["--collective-timeout", repr(float(timeout))]
            outputs = elastic_launch(config, sys.executable)(*args, *target)
    except ChildFailedError as exc:
        return {"ok": False, "failures": _failure_records(exc)}
    # With c10d, a restarted round may place global rank 0 on another node: say who holds it.
    return {"ok": True, "value": outputs.get(0), "rank0": 0 in outputs}


def _agent_process(spec: TaskSetup, log_dir: str, parent: int) -> None:
    """Run in the forked child: own process group, follow the parent, write the result file."""
    code = 1
    try:
        if spec.store_fd >= 0:  # the store's listening socket stays with the task's process
            os.close(spec.store_fd)
        os.setpgid(0, 0)
        set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)
        fd = os.open(os.path.join(log_dir, "agent.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        # Spawned ranks must not re-run the caller's script (multiprocessing imports __main__);
        # the function travels by value with cloudpickle and needs none of it.
        sys.modules["__main__"] = types.ModuleType("__main__")
        if spec.workdir:
            os.chdir(spec.workdir)  # the ranks start there (they inherit it)
        try:
            result = _agent_main(spec, log_dir)
        except BaseException:
            result = {"ok": False, "agent_error": traceback.format_exc().splitlines()[-15:]}
        import cloudpickle

        path = os.path.join(log_dir, "result.pkl")
        with open(path + ".tmp", "wb") as fh:
            fh.write(cloudpickle.dumps(result))
        os.replace(path + ".tmp", path)
        code = 0
    finally:
        os._exit(code)


# ---------------------------------------------------------------------------- log tailing


class _Tailer(threading.Thread):
    """Follow ``rank-*.log`` files; hand complete lines to the sink; keep the last lines.

    Also forwards each rank's metrics endpoint file (``rank-<r>.metrics.json``, written by
    :func:`gpuspark.monitor.exporter.serve`) to the sink as a ``"metrics"`` notice, again
    whenever a restarted rank rewrites it.
    """

    def __init__(self, log_dir: str, sink: Sink, address: str = "127.0.0.1") -> None:
        super().__init__(name="gpuspark-tail", daemon=True)
        self.log_dir = log_dir
        self.sink = sink
        self.address = address
        """How other hosts reach this task's host (used when a rank bound every address)."""
        self._endpoints: dict[str, tuple[int, int]] = {}
        self.tails: dict[int, collections.deque[str]] = {}
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(_POLL_S):
            self.poll()

    def stop(self) -> None:
        """Stop following; read what is left, unfinished last lines included."""
        self._stop_event.set()
        self.join()
        self.poll()
        for name, rest in self._partial.items():
            if rest:
                self._emit(name, rest)
        self._partial.clear()

    def poll(self) -> None:
        try:
            entries = sorted(os.listdir(self.log_dir))
        except FileNotFoundError:
            return
        for name in entries:
            if name.startswith("rank-") and name.endswith(".log"):
                self._read(name)
            elif endpoint_rank(name) is not None:
                self._endpoint(name)

    def _endpoint(self, name: str) -> None:
        path = os.path.join(self.log_dir, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        stamp = (st.st_mtime_ns, st.st_ino)
        if self._endpoints.get(name) == stamp:
            return
        self._endpoints[name] = stamp
        data = read_endpoint(path)
        if data is None:
            return
        bind = str(data.get("bind") or "")
        data["address"] = self.address if bind in ("", "0.0.0.0", "::") else bind
        with contextlib.suppress(Exception):
            self.sink.notice("metrics", data)

    def _read(self, name: str) -> None:
        offset = self._offsets.get(name, 0)
        try:
            with open(os.path.join(self.log_dir, name), "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            return
        if not data:
            return
        self._offsets[name] = offset + len(data)
        data = self._partial.pop(name, b"") + data
        *lines, rest = data.split(b"\n")
        self._partial[name] = rest
        for raw in lines:
            self._emit(name, raw)

    def _emit(self, name: str, raw: bytes) -> None:
        rank = int(name[len("rank-") : -len(".log")])
        text = raw.decode("utf-8", "replace").rstrip("\r")
        self.tails.setdefault(rank, collections.deque(maxlen=_TAIL_LINES)).append(text)
        with contextlib.suppress(Exception):
            self.sink.line(rank, text)


# ---------------------------------------------------------------------------- task side


def _wait_agent(pid: int, sink: Sink, deadline: float | None) -> tuple[int, str | None]:
    """Wait for the agent; kill its group on abort or timeout. Returns (status, why-stopped)."""
    why: str | None = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, why
        if why is None and sink.aborted():
            why = "aborted"
        elif why is None and deadline is not None and time.monotonic() > deadline:
            why = "timeout"
        if why is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        time.sleep(_POLL_S)


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _error_files(log_dir: str) -> dict[int, dict[str, Any]]:
    """The ranks' error files of the last round (earlier rounds may have failed and restarted)."""
    errors: dict[int, dict[str, Any]] = {}
    for name in os.listdir(log_dir):
        if name.startswith("rank-") and name.endswith(".error.json"):
            data = _read_json(os.path.join(log_dir, name))
            if data is not None and "rank" in data:
                errors[int(data["rank"])] = data
    last = max((e.get("restart", 0) for e in errors.values()), default=0)
    return {r: e for r, e in errors.items() if e.get("restart", 0) == last}


def _describe(result: dict[str, Any], spec: TaskSetup, log_dir: str, tails: dict) -> None:
    """Attach host, error file and last log lines to each failed rank.

    The agent reports the first rank it saw die; every rank that wrote an error file is added,
    so the driver can pick the one that failed first (its peers fail after it).
    """
    errors = _error_files(log_dir)
    failures = {rec["rank"]: rec for rec in result.get("failures", [])}
    for rank, err in errors.items():
        failures.setdefault(
            rank,
            {"rank": rank, "exitcode": 1, "signal": None, "timestamp": int(err.get("time", 0))},
        )
    for rank, rec in failures.items():
        rec["host"] = spec.host or spec.local_addr
        rec["error"] = errors.get(rank)
        rec["tail"] = list(tails.get(rank, ()))
    if "failures" in result:
        result["failures"] = sorted(failures.values(), key=lambda r: r["rank"])


def _agent_log_tail(log_dir: str) -> list[str]:
    try:
        with open(os.path.join(log_dir, "agent.log"), encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()[-_TAIL_LINES:]
    except OSError:
        return []


def _collect(spec: TaskSetup, log_dir: str, status: int, why: str | None, tails: dict) -> dict:
    import cloudpickle

    path = os.path.join(log_dir, "result.pkl")
    if why is not None:
        # Told to stop (another task failed first, or the time ran out): a rank of this task
        # may have failed before that, and its error file is then the root cause to report.
        stopped: dict[str, Any] = {"ok": False, "stopped": why, "task": spec.task_index}
        if _error_files(log_dir):
            stopped["failures"] = []
            _describe(stopped, spec, log_dir, tails)
        return stopped
    if not os.path.exists(path):
        return {
            "ok": False,
            "task": spec.task_index,
            "agent_error": [
                f"elastic agent ended without a result (wait status {status})",
                *_agent_log_tail(log_dir),
            ],
        }
    with open(path, "rb") as fh:
        result: dict[str, Any] = cloudpickle.loads(fh.read())
    result["task"] = spec.task_index
    if "agent_error" in result:
        result["agent_error"] = result["agent_error"] + _agent_log_tail(log_dir)
    _describe(result, spec, log_dir, tails)
    return result


def _host_store(spec: TaskSetup) -> Any:
    """Task 0 of a static rendezvous hosts the job's TCP store (see ``rendezvous``) on the
    socket it holds; the store owns (and closes) that fd from here on."""
    if spec.store_fd < 0:
        return None

    try:
        return host_store(spec.master_addr, spec.master_port, spec.store_fd, spec.run_id)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(spec.store_fd)
        raise


def run_task(spec: TaskSetup, sink: Sink, timeout: float | None = None) -> dict[str, Any]:
    """Run one node of the job: agent + ranks; stream logs; return the task's report.

    The report is ``{"ok": True, "value": bytes | None}`` (rank 0's cloudpickled result on the
    task that holds rank 0) or ``{"ok": False, ...}`` with ``failures`` (rank, host, exit code,
    signal, error file, last log lines), ``agent_error`` or ``stopped``.
    """
    log_dir = tempfile.mkdtemp(prefix=f"gpuspark-{spec.run_id}-{spec.task_index}-")
    deadline = None if timeout is None else time.monotonic() + timeout
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    parent = os.getpid()
    try:
        pid = os.fork()
    except BaseException:
        if spec.store_fd >= 0:
            os.close(spec.store_fd)
        raise
    if pid == 0:  # pragma: no cover - runs in the child, which ends with os._exit
        _agent_process(spec, log_dir, parent)
    tailer = _Tailer(log_dir, sink, spec.local_addr)
    tailer.start()
    status, why, store = -1, None, None
    try:
        store = _host_store(spec)  # after the fork: the agent never sees the store's thread
        status, why = _wait_agent(pid, sink, deadline)
    finally:
        del store
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # stragglers the ranks left in the group
        with contextlib.suppress(ChildProcessError):
            if status == -1:
                os.waitpid(pid, 0)
        tailer.stop()
    try:
        result = _collect(spec, log_dir, status, why, tailer.tails)
    finally:
        if not envvars.KEEP_LOGS.get():  # debugging: keep agent and rank logs
            shutil.rmtree(log_dir, ignore_errors=True)
    if not result.get("ok") and "stopped" not in result:
        with contextlib.suppress(Exception):
            sink.notice("failed", result)
    return result
