"""What every rank gets, on Spark and locally: the backend, its environment, how it starts.

The driver (local mode) or each barrier task (Spark) resolves the backend, builds the ranks'
extra environment and picks the start method; :func:`restart_count` reads that environment
back inside a rank.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuspark._util import envvars

if TYPE_CHECKING:
    from gpuspark.launch.request import LaunchRequest

__all__ = [
    "cuda_available",
    "import_launcher",
    "rank_env",
    "rank_map",
    "resolve_backend",
    "restart_count",
    "start_method",
]


def resolve_backend(requested: str, gpus: bool, cuda: bool) -> tuple[str, str]:
    """The backend and why: NCCL needs GPUs assigned and CUDA available; else gloo."""
    if requested != "auto":
        return requested, "requested"
    if gpus and cuda:
        return "nccl", "GPUs assigned and CUDA available"
    if not gpus:
        return "gloo", "no GPUs assigned"
    return "gloo", "CUDA not available (simulated or missing GPUs)"


def cuda_available() -> bool:
    """Whether torch sees CUDA here, asked through NVML so this process never initialises it."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # does not initialise CUDA
    import torch

    return bool(torch.cuda.is_available())


def rank_env(
    req: LaunchRequest, run_id: str, attempt: int, backend: str, host: str | None = None
) -> dict[str, str]:
    """The ``GPUSPARK_*`` variables of every rank of this attempt, the spec's network
    variables of this task's ``host`` (:attr:`LaunchRequest.host_env`, looked up by ``host``
    and this machine's name), then the request's ``env``.

    Run id, attempt, backend, and the metrics settings (``GPUSPARK_TEAM``,
    ``GPUSPARK_METRICS_PORT``, ``GPUSPARK_METRICS_HOST``) that
    :func:`gpuspark.monitor.exporter.serve` reads in the rank.
    """
    env = _network_env(req, host)
    env |= {
        envvars.RUN_ID.name: run_id,
        envvars.ATTEMPT.name: str(attempt),
        envvars.BACKEND.name: backend,
        "PYTHONUNBUFFERED": "1",
    }
    if req.team:
        env[envvars.TEAM.name] = req.team
    if req.min_ranks is not None:
        env[envvars.MIN_RANKS.name] = str(req.min_ranks)
    if req.metrics_port is not None:
        env[envvars.METRICS_PORT.name] = str(req.metrics_port)
    if req.metrics_host:
        env[envvars.METRICS_HOST.name] = req.metrics_host
    env.update({str(k): str(v) for k, v in req.env.items()})
    return env


def _network_env(req: LaunchRequest, host: str | None) -> dict[str, str]:
    """This task's entry of ``req.host_env``, by the task's host, then this machine's name
    and full name, each as given and short (the keys
    :func:`~gpuspark.spec.network.hosts_network_env` writes); empty when none is listed."""
    if not req.host_env:
        return {}
    import socket

    for name in (host, socket.gethostname(), socket.getfqdn()):
        for key in (name, (name or "").split(".", 1)[0].lower()):
            if key and key in req.host_env:
                return dict(req.host_env[key])
    return {}


def rank_map(tasks: Sequence[dict[str, Any]], per_task: int, gpus_per_process: int) -> str:
    """``rank->host gpu a,b`` (or ``host cpu``) for every rank, for the driver's log."""
    parts = []
    for t, info in enumerate(tasks):
        for local in range(per_task):
            gpus = info["gpus"][local * gpus_per_process : (local + 1) * gpus_per_process]
            where = f"{info['host']} gpu {','.join(gpus)}" if gpus else f"{info['host']} cpu"
            parts.append(f"{t * per_task + local}->{where}")
    return ", ".join(parts)


def start_method(backend: str, rdzv_backend: str = "static", fork_ok: bool = True) -> str:
    """How the elastic agent starts its ranks: ``fork``, ``forkserver`` or ``spawn``.

    ``fork_ok`` is :func:`import_launcher`'s answer: whether this process may fork ranks.
    """
    # NCCL ranks are spawned like torchrun does, so CUDA never meets a forked process. gloo
    # ranks of a static rendezvous are forked from the agent (it has imported torch: ranks
    # start in milliseconds), which is single-threaded there (launch._internal.rendezvous).
    # A c10d agent runs rendezvous threads, and a process that ran torch's OpenMP regions
    # cannot fork: their ranks come from a fork server instead (a new interpreter).
    if backend == "nccl" or sys.platform != "linux":
        return "spawn"
    return "fork" if rdzv_backend == "static" and fork_ok else "forkserver"


_clean_threads: int | None = None
"""This process's thread count right after :func:`import_launcher` imported torch into a
process that had none (``None``: torch was here before gpuspark imported it)."""


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # not Linux: no forked ranks there anyway
        return sys.maxsize


def import_launcher() -> bool:
    """Import torch's elastic launcher into this process (the agent forked from it inherits
    it: ranks start without importing torch again) and say whether ranks may be forked from
    here.

    They may when this process had not imported torch before, or when gpuspark imported it
    here itself and no thread has started since. A process that ran torch's OpenMP regions
    (a notebook that trained, a test process, a Python worker reused after a job that ran
    torch) keeps OpenMP's threads, and a child forked from it hangs in its first parallel
    op (libgomp's thread team does not survive ``fork``): its ranks start as new
    interpreters instead (:func:`start_method`).
    """
    global _clean_threads
    clean = "torch" not in sys.modules
    import torch.distributed.launcher.api  # noqa: F401

    if clean:
        _clean_threads = _thread_count()
        return True
    return _clean_threads is not None and _thread_count() <= _clean_threads


def restart_count() -> int:
    """How many times this rank's function was started before now (0 on the first start).

    Counts the elastic agent's restarts (``TORCHELASTIC_RESTART_COUNT``) and the barrier
    stage's earlier attempts; a function resumes from its own checkpoint when this is > 0.
    """
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    attempt = int(envvars.ATTEMPT.get("0") or 0)
    max_restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    return attempt * (max_restarts + 1) + restarts
