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


def start_method(backend: str, rdzv_backend: str = "static") -> str:
    """How the elastic agent starts its ranks: ``fork``, ``forkserver`` or ``spawn``."""
    # NCCL ranks are spawned like torchrun does, so CUDA never meets a forked process. gloo
    # ranks of a static rendezvous are forked from the agent (it has imported torch: ranks
    # start in milliseconds), which is single-threaded there (launch._internal.rendezvous).
    # A c10d agent runs rendezvous threads: its ranks come from a fork server instead.
    if backend == "nccl" or sys.platform != "linux":
        return "spawn"
    return "fork" if rdzv_backend == "static" else "forkserver"


def fork_safe() -> bool:
    """True when this process has not imported torch yet, so it has run no OpenMP region:
    a process forked after one hangs in its first parallel op (libgomp's thread team does
    not survive ``fork``). Ask before importing torch to start an agent; a process that ran
    torch already (a notebook, a reused Spark Python worker) starts script ranks as new
    interpreters instead."""
    return "torch" not in sys.modules


def restart_count() -> int:
    """How many times this rank's function was started before now (0 on the first start).

    Counts the elastic agent's restarts (``TORCHELASTIC_RESTART_COUNT``) and the barrier
    stage's earlier attempts; a function resumes from its own checkpoint when this is > 0.
    """
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    attempt = int(envvars.ATTEMPT.get("0") or 0)
    max_restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    return attempt * (max_restarts + 1) + restarts
