"""What runs inside each training process (one per rank) started by the elastic agent.

Two entry points share the same set-up:

* :func:`entry` runs a cloudpickled function (``gpuspark.launch.run(fn, ...)``);
* ``python -m gpuspark.launch._internal.worker --log-dir D script.py [args]`` runs a script
  the way ``torchrun`` does (``gpuspark launch``); ``... --log-dir D -m module [args]`` runs a
  module the way ``torchrun -m`` (``python -m``) does; ``--collective-timeout S`` after
  ``--log-dir D`` sets the collective timeout.

Set-up: the process dies with its parent (``PR_SET_PDEATHSIG``), so no rank outlives its agent,
and is named ``gpuspark-rank<RANK>`` (``ps -o comm``);
its stdout and stderr go, line-buffered, to ``<log-dir>/rank-<RANK>.log`` which the task tails
and streams to the driver; an exception also lands in ``rank-<RANK>.error.json`` so the driver
can name the failing rank with the last lines of its traceback. With a collective timeout
(the launch's ``collective_timeout``), ``init_process_group`` in the rank defaults to it
instead of torch's 30 minutes (gloo) or 10 minutes (NCCL): :func:`set_collective_timeout`.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
import traceback
from typing import Any

from gpuspark._util import envvars
from gpuspark._util.procs import pid_alive

__all__ = [
    "entry",
    "main",
    "script_entry",
    "set_collective_timeout",
    "set_parent_death_signal",
    "set_process_name",
]

_TRACEBACK_LINES = 20


def _prctl(option: int, arg: Any) -> None:
    """``prctl(option, arg)`` on Linux; nothing elsewhere or with an exotic libc."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent exits (no-op elsewhere)."""
    _prctl(1, int(sig))  # PR_SET_PDEATHSIG


def set_process_name(name: str) -> None:
    """Name this process (``/proc/<pid>/comm``, what ``ps -o comm`` and ``top`` show; Linux
    keeps 15 bytes) so an operator can tell ranks apart; no-op elsewhere."""
    import ctypes

    _prctl(15, ctypes.c_char_p(name.encode()[:15]))  # PR_SET_NAME


def set_collective_timeout(seconds: float | None) -> None:
    """Make ``seconds`` the default timeout of ``init_process_group`` and ``new_group`` in
    this process, for every backend (a call that passes ``timeout=`` keeps its own).

    torch reads its defaults (``torch.distributed.constants``: gloo 30 min, NCCL 10 min) from
    ``distributed_c10d``'s module globals at each call (``_get_default_timeout``), and no
    environment variable sets them: this sets those globals. ``None`` leaves torch's.
    """
    if seconds is None:
        return
    import datetime

    from torch.distributed import distributed_c10d

    timeout = datetime.timedelta(seconds=seconds)
    distributed_c10d.default_pg_timeout = timeout
    distributed_c10d.default_pg_nccl_timeout = timeout


def _flush_std() -> None:
    """Flush ``sys.stdout`` and ``sys.stderr``, whatever state they are in."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _rank() -> str:
    return os.environ.get("RANK", "0")


def _redirect_output(log_dir: str) -> None:
    """Send fd 1 and 2 (and every child's) to this rank's log file, line by line."""
    _flush_std()
    path = os.path.join(log_dir, f"rank-{_rank()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ["PYTHONUNBUFFERED"] = "1"
    # New stream objects on fd 1 and 2: the parent's sys.stdout may be anything (a notebook,
    # pytest's capture) and a forked rank inherits it.
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), line_buffering=True)


def _setup(log_dir: str) -> None:
    set_parent_death_signal(signal.SIGKILL)
    agent = envvars.AGENT_PID.get()
    if agent and os.getppid() != int(agent) and not pid_alive(int(agent)):
        os._exit(1)  # the agent died before we could follow it (a forked rank's parent is the
        # agent; a rank from the agent's fork server follows the server, which ends with it)
    _redirect_output(log_dir)
    set_process_name(f"gpuspark-rank{_rank()}")
    # Where gpuspark.monitor.serve() drops the endpoint it bound; the task forwards it.
    os.environ[envvars.RANK_DIR.name] = log_dir


def _record_failure(log_dir: str, exc: BaseException) -> None:
    """Print the traceback to the rank log and write the error file the task reads."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    sys.stderr.write(text)
    sys.stderr.flush()
    lines = text.rstrip("\n").splitlines()[-_TRACEBACK_LINES:]
    record = {
        "rank": int(_rank()),
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": lines,
        "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "time": time.time(),
    }
    path = os.path.join(log_dir, f"rank-{_rank()}.error.json")
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)


def entry(payload: bytes, log_dir: str, collective_timeout: float | None = None) -> bytes | None:
    """Run the shipped function on this rank; return rank 0's result, cloudpickled.

    ``payload`` is ``cloudpickle.dumps((fn, args, kwargs))``. Other ranks return ``None`` so
    only one result travels back. ``collective_timeout``: :func:`set_collective_timeout`.
    """
    _setup(log_dir)
    try:
        set_collective_timeout(collective_timeout)
        import cloudpickle

        fn, args, kwargs = cloudpickle.loads(payload)
        value = fn(*args, **kwargs)
        out = cloudpickle.dumps(value) if _rank() == "0" else None
    except BaseException as exc:  # every failure must reach the driver, SystemExit included
        _record_failure(log_dir, exc)
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    return out


_exit_code = 0


def _leave_without_teardown() -> None:
    """Last atexit handler: end the rank with the script's code, skipping C++ teardown.

    Registered before the script runs, so it runs after every handler the script registers.
    After ``destroy_process_group`` gloo's threads can abort the interpreter's final teardown
    ("terminate called without an active exception"), turning a finished rank into a
    failed one; the script's work and its own atexit handlers are done by then.
    """
    _flush_std()
    os._exit(_exit_code)


def _run_target(script: str, args: list[str], module: bool) -> None:
    """Run the script (``python script.py``) or module (``python -m module``) as
    ``__main__`` with ``args`` in ``sys.argv``, as the interpreter would."""
    import runpy

    if module:
        # python -m puts the working directory first on the path (this worker ran with -m:
        # it is there already) and sets argv[0] to the module's file (run_module does).
        sys.argv = [script, *args]
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        runpy.run_module(script, run_name="__main__", alter_sys=True)
        return
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


def _collective_timeout_arg(argv: list[str]) -> float | None:
    """Take ``--collective-timeout S`` from just after ``--log-dir D`` out of ``argv``."""
    if len(argv) > 3 and argv[2] == "--collective-timeout":
        seconds = float(argv[3])
        del argv[2:4]
        return seconds
    return None


def _run_script(log_dir: str, target: list[str], collective_timeout: float | None) -> int:
    """Run ``target`` (``[script, args...]`` or ``["-m", module, args...]``) as ``__main__``;
    its exit code, a failure recorded for the driver."""
    module = target[0] == "-m"
    script, script_args = (target[1], target[2:]) if module else (target[0], target[1:])
    try:
        set_collective_timeout(collective_timeout)
        _run_target(script, script_args, module)
    except SystemExit as exc:
        code: Any = exc.code
        if code in (None, 0):
            return 0
        _record_failure(log_dir, exc)
        return code if isinstance(code, int) else 1
    except BaseException as exc:
        _record_failure(log_dir, exc)
        return 1
    return 0


def take_stdin(*, forked: bool) -> None:
    """torchrun's standard input under ``launch --local``: rank 0 reads the launcher's (its
    descriptor in :data:`~gpuspark._util.envvars.STDIN_FD`), the other ranks read nothing.
    A rank ``forked`` from the agent has the descriptor (multiprocessing replaced fd 0 by
    ``/dev/null``); a rank started as a new interpreter has fd 0 itself (a descriptor number
    from the agent means nothing there)."""
    fd = os.environ.pop(envvars.STDIN_FD.name, None)
    if fd is None:
        return
    if os.environ.get("RANK") != "0":
        sys.stdin = open(os.devnull)  # noqa: SIM115 - the process's stdin from now on
        if forked:
            os.close(int(fd))
    elif forked:
        sys.stdin = os.fdopen(int(fd), "r")


def script_entry(target: list[str], log_dir: str, collective_timeout: float | None) -> None:
    """Run a script or module on this rank in a process forked from the agent, which has
    imported torch already (a new interpreter would spend seconds importing it again).

    As ``python script.py`` would: the script's own ``atexit`` handlers run when it ends (the
    ones inherited from the agent do not), then the process ends with the script's code
    without the interpreter's teardown (see :func:`_leave_without_teardown`).
    """
    import atexit

    atexit._clear()  # the agent's and the Spark worker's handlers are not this rank's
    take_stdin(forked=True)
    _setup(log_dir)
    code = _run_script(log_dir, target, collective_timeout)
    atexit._run_exitfuncs()
    _flush_std()
    if code != 0:
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuspark.launch._internal.worker --log-dir D [--collective-timeout S]
    [-m] target [args...]``."""
    import atexit

    argv = list(sys.argv[1:] if argv is None else argv)
    collective_timeout = _collective_timeout_arg(argv)
    if len(argv) < 3 or argv[0] != "--log-dir" or argv[2:] == ["-m"]:
        sys.stderr.write(
            "usage: python -m gpuspark.launch._internal.worker --log-dir DIR "
            "[--collective-timeout SECONDS] (script.py | -m module) ...\n"
        )
        return 2
    log_dir = argv[1]
    take_stdin(forked=False)
    _setup(log_dir)
    atexit.register(_leave_without_teardown)
    return _run_script(log_dir, argv[2:], collective_timeout)


if __name__ == "__main__":
    _exit_code = main()
    sys.exit(_exit_code)
