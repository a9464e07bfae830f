"""The tasks' reports, read on the driver: rank 0's value, or one error naming the root cause.

Every task returns a report (see :func:`gpuspark.launch._internal.agent.run_task`); a failed
launch becomes one :class:`~gpuspark.errors.LaunchError` naming the rank that failed first, its
host and the last lines of its traceback, never a wall of Py4J frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuspark.errors import HostLostError, LaunchError

if TYPE_CHECKING:
    from gpuspark.launch.request import LaunchRequest

__all__ = [
    "host_lost_error",
    "host_unreachable_error",
    "rank0_value",
    "result_error",
    "spark_error",
    "timeout_error",
]

_ERROR_LINES = 8


# What a rank's collective raises when a peer died: a consequence, never the root cause.
_PEER_GONE = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote worker crashing",
    "remote process exited",
)


def _failure_sort_key(rec: dict[str, Any]) -> tuple[bool, float, int]:
    # The root cause is the earliest failure that is not a consequence of another: a peer's
    # lost connection (peers of a dead rank fail after it, but their error files may be
    # written first: a race), or SIGTERM without an error file, which is how torch's agent
    # stops the surviving ranks once one failed (its timestamp has whole seconds: it can
    # sort before the failed rank's precise error time). SIGKILL stays a cause (OOM, a kill).
    err = rec.get("error") or {}
    stopped_by_agent = rec.get("signal") == "SIGTERM" and not err
    consequence = stopped_by_agent or any(p in str(err.get("message", "")) for p in _PEER_GONE)
    return (consequence, float(err.get("time", rec.get("timestamp", 0))), rec.get("rank", 0))


def _failure_error(rec: dict[str, Any], attempts: int) -> LaunchError:
    rank, host = rec.get("rank"), rec.get("host", "?")
    err = rec.get("error") or {}
    if rec.get("signal"):
        cause = f"killed by {rec['signal']}"
    elif err:
        cause = f"{err.get('type')}: {err.get('message')}"
    else:
        cause = f"exit code {rec.get('exitcode')}"
    lines = err.get("traceback") or rec.get("tail") or []
    tail = "".join(f"\n    {line}" for line in lines[-_ERROR_LINES:])
    after = f" after {attempts} attempt(s)" if attempts > 1 else ""
    return LaunchError(
        f"rank {rank} failed on host {host}{after}: {cause}"
        + (f"\n  last lines of rank {rank}:{tail}" if tail else "")
    )


def result_error(results: Sequence[dict[str, Any]], attempts: int) -> LaunchError:
    """One error for a failed attempt: the earliest rank failure, else an agent's, else why
    the tasks stopped."""
    failures = [f for r in results for f in r.get("failures", [])]
    if failures:
        return _failure_error(min(failures, key=_failure_sort_key), attempts)
    for r in results:
        if r.get("agent_error"):
            tail = "".join(f"\n    {line}" for line in r["agent_error"][-_ERROR_LINES:])
            return LaunchError(f"the elastic agent of task {r.get('task')} failed:{tail}")
    stopped = {r.get("stopped") for r in results if r.get("stopped")}
    return LaunchError(f"the launch stopped ({', '.join(sorted(map(str, stopped)))})")


def rank0_value(results: Sequence[dict[str, Any]]) -> Any:
    """Rank 0's return value, from whichever task holds rank 0 (after a c10d restart it may
    not be task 0)."""
    import cloudpickle

    for r in results:
        if r.get("rank0"):
            raw = r.get("value")
            return None if raw is None else cloudpickle.loads(raw)
    return None


def timeout_error(req: LaunchRequest) -> LaunchError:
    """The error for an attempt that ran out of ``req.timeout``."""
    return LaunchError(
        f"the launch of {req.entrypoint} on {req.num_processes} ranks timed out after "
        f"{req.timeout:g} s; every rank was stopped",
        remedy="raise --timeout (timeout=), or look at the [rank r] lines above for the stuck rank",
    )


def host_lost_error(host: str, req: Any) -> HostLostError:
    """The error for an attempt whose task vanished with its executor: the host is lost,
    and what the surviving ranks reported (a peer closed the connection) follows from it."""
    return HostLostError(
        host,
        f"host {host} was lost during the launch of {req.entrypoint}: its task stopped "
        "without a word (executor or machine gone); the other ranks were stopped",
        remedy="bring the host back, or allow a retry on the remaining capacity with "
        "--max-attempts 2 (max_attempts=2)",
    )


_PEER_ERROR_CHARS = 160


def host_unreachable_error(
    host: str, silent_s: float, req: Any, reports: Sequence[dict[str, Any]] = ()
) -> HostLostError:
    """The error for an attempt in which the driver stopped hearing a task (its stream open,
    not even a heartbeat): ``host`` was cut off. ``reports``: the failure reports of the
    other tasks (a collective with it timed out or lost its connection), the earliest rank
    failure in them quoted."""
    peers = ""
    failures = [f for r in reports for f in r.get("failures", [])]
    if failures:
        first = min(failures, key=lambda f: float((f.get("error") or {}).get("time", 0)))
        err = first.get("error") or {}
        said = f"{err.get('type')}: {err.get('message')}" if err else "stopped"
        said = " ".join(said.split())[:_PEER_ERROR_CHARS]
        peers = (
            f"; rank {first.get('rank')} on host {first.get('host', '?')} reported "
            f"the collective timeout or lost connection it caused: {said}"
        )
    return HostLostError(
        host,
        f"host {host} became unreachable during the launch of {req.entrypoint}: nothing was "
        f"heard from its task for {silent_s:.0f} s (network link down, host down or "
        f"partitioned){peers}; the other ranks were stopped",
        remedy="check that host's network link and its Spark worker; --max-attempts 2 "
        "(max_attempts=2) retries on the hosts that remain",
    )


def spark_error(exc: BaseException, server: Any) -> BaseException:
    """What to raise when the barrier stage's ``collect`` failed: the ranks' failure reports
    the log ``server`` received, else the Python lines of Spark's message (no JVM frames)."""
    if isinstance(exc, KeyboardInterrupt):
        return exc
    if server.failures:
        return result_error(server.failures, 1)
    text = str(exc)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    py = [ln for ln in lines if ln and not ln.startswith(("\tat ", "at "))]
    short = "\n    ".join(py[-_ERROR_LINES:]) if py else type(exc).__name__
    return LaunchError(f"the barrier stage failed in Spark:\n    {short}")
