"""Local mode: every rank is a process of this machine, under one elastic agent."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from gpuspark._util import envvars
from gpuspark.errors import LaunchError
from gpuspark.launch._internal.agent import TaskSetup, run_task, store_port
from gpuspark.launch._internal.logs import PrintSink, RankOutput
from gpuspark.launch.ranks import (
    cuda_available,
    import_launcher,
    rank_env,
    resolve_backend,
    start_method,
)
from gpuspark.launch.request import LaunchRequest

__all__ = ["run_local"]


def run_local(
    req: LaunchRequest,
    run_id: str,
    attempt: int,
    on_metrics: Callable[[dict[str, Any]], None] | None = None,
    output: RankOutput | None = None,
) -> list[dict[str, Any]]:
    """Run one attempt of ``req`` here; return the agent's report (a list of one).

    ``on_metrics`` gets each rank's ``/metrics`` endpoint as the rank reports it; ``output``
    places the ranks' lines (default: the console).
    """
    fork_ok = import_launcher()  # imported once here, not per rank

    want_gpus = req.gpus_per_process > 0
    cuda = want_gpus and cuda_available()
    backend, why = resolve_backend(req.backend, want_gpus and cuda, cuda)
    if backend == "nccl":
        _check_local_gpus(req)
    env = rank_env(req, run_id, attempt, backend)
    sink = PrintSink(on_metrics=on_metrics, output=output)
    if attempt == 0:
        sink.write(f"[gpuspark] backend {backend} ({why}); {req.num_processes} local ranks")
    port, store_fd = store_port("127.0.0.1", req.rdzv_backend)
    spec = TaskSetup(
        run_id=run_id,
        task_index=0,
        num_tasks=1,
        nproc=req.num_processes,
        master_addr="127.0.0.1",
        master_port=port,
        local_addr="127.0.0.1",
        rdzv_backend=req.rdzv_backend,
        max_restarts=req.max_restarts,
        start_method=start_method(backend, req.rdzv_backend, fork_ok),
        payload=req.payload,
        script=req.script,
        module=req.module,
        env=env,
        host="localhost",
        store_fd=store_fd,
        collective_timeout=req.collective_timeout,
    )
    with _stdin_for_rank0(spec) as spec:
        return [run_task(spec, sink, timeout=req.timeout)]


@contextlib.contextmanager
def _stdin_for_rank0(spec: TaskSetup) -> Iterator[TaskSetup]:
    """As under torchrun, rank 0 of a script reads the launcher's standard input (``echo hi |
    gpuspark launch --local -n 2 s.py``): a copy of its descriptor goes down to the ranks
    (:data:`~gpuspark._util.envvars.STDIN_FD`, see
    :func:`gpuspark.launch._internal.worker.take_stdin`). Not a terminal: the agent and its
    ranks run in a process group of their own, which a terminal would stop on a read."""
    try:
        usable = spec.script is not None and not os.isatty(0) and sys.stdin is not None
    except OSError:  # no descriptor 0 at all
        usable = False
    if not usable:
        yield spec
        return
    fd = os.dup(0)  # forked into the agent and the ranks it forks
    try:
        yield dataclasses.replace(spec, env={**spec.env, envvars.STDIN_FD.name: str(fd)})
    finally:
        os.close(fd)


def _check_local_gpus(req: LaunchRequest) -> None:
    import torch

    have = torch.cuda.device_count()
    need = int(req.num_processes * req.gpus_per_process)
    if need > have:
        raise LaunchError(
            f"{req.num_processes} local ranks x {req.gpus_per_process:g} GPU need {need} GPUs; "
            f"this machine has {have}",
            remedy="use fewer processes, or --backend gloo (backend='gloo')",
        )
