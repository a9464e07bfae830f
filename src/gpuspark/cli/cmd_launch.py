"""``gpuspark launch``: run a training script on N ranks, on Spark or locally, like torchrun."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuspark.cli._common import (
    CollectiveTimeoutOpt,
    ConfOpt,
    JsonOpt,
    MasterOpt,
    MinRanksOpt,
    SpecOpt,
    print_json,
    spec_with_conf,
)
from gpuspark.cli._torchrun import TorchrunCommand

if TYPE_CHECKING:
    from gpuspark.launch import LaunchRequest

# The script stops option parsing, as with torchrun: everything after it is the script's.
_CONTEXT = {"allow_interspersed_args": False}


def register(app: typer.Typer) -> None:
    """Add the ``launch`` command."""
    app.command("launch", cls=TorchrunCommand, no_args_is_help=True, context_settings=_CONTEXT)(
        launch
    )


def launch(
    script: Annotated[
        str,
        typer.Argument(
            metavar="SCRIPT",
            help="The training script (reads RANK, LOCAL_RANK, WORLD_SIZE, ... as under "
            "torchrun), or with -m a module name. Launch options go before it.",
        ),
    ],
    script_args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="SCRIPT_ARGS",
            help="Everything after SCRIPT goes to the script as its arguments, as with "
            "torchrun (a first -- is dropped).",
        ),
    ] = None,
    num_processes: Annotated[
        int | None,
        typer.Option(
            "-n",
            "--num-processes",
            help="Ranks in all (WORLD_SIZE) [default: --nproc-per-node, else 1].",
            min=1,
        ),
    ] = None,
    processes_per_task: Annotated[
        int | None,
        typer.Option(
            "--nproc-per-node",
            "--nproc_per_node",
            "--processes-per-task",
            metavar="N",
            help="Ranks per node (LOCAL_WORLD_SIZE): each Spark barrier task starts N "
            "processes, LOCAL_RANK 0..N-1, and asks N x --gpus-per-process GPUs; -n must be a "
            "multiple of N [default: 1 on Spark; -n with --local, which runs one node].",
            min=1,
        ),
    ] = None,
    module: Annotated[
        bool,
        typer.Option(
            "-m", "--module", help="Run SCRIPT as a module, as python -m does (torchrun -m)."
        ),
    ] = False,
    gpus_per_process: Annotated[
        float, typer.Option("--gpus-per-process", help="Whole GPUs per rank (0: CPU ranks).")
    ] = 1,
    log_dir: Annotated[
        Path | None,
        typer.Option(
            "--log-dir",
            metavar="DIR",
            help="Write each rank's output (stdout and stderr, as one stream) to "
            "DIR/rank_<r>.log on this machine (DIR is made; files of an earlier launch are "
            "replaced); the console then shows rank 0 only.",
        ),
    ] = None,
    tee: Annotated[
        bool,
        typer.Option(
            "--tee",
            help="With --log-dir: show every rank's lines on the console too, as [rank r] "
            "lines (torchrun's --tee 3 or -t 3, also taken; stdout and stderr are one stream "
            "here).",
        ),
    ] = False,
    max_restarts: Annotated[
        int, typer.Option("--max-restarts", help="Restarts of failed ranks.")
    ] = 0,
    max_attempts: Annotated[
        int, typer.Option("--max-attempts", help="Attempts of the whole stage.")
    ] = 1,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Seconds in all.", min=1)
    ] = None,
    collective_timeout: CollectiveTimeoutOpt = None,
    min_ranks: MinRanksOpt = None,
    backend: Annotated[str, typer.Option("--backend", help="auto, nccl or gloo.")] = "auto",
    local: Annotated[bool, typer.Option("--local", help="Run on this machine, no Spark.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would run, start nothing.")
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port", help="Base port of the ranks' /metrics (+ local rank; 0: off)."
        ),
    ] = None,
    metrics_host: Annotated[
        str | None, typer.Option("--metrics-host", help="Address /metrics binds to.")
    ] = None,
    team: Annotated[
        str | None,
        typer.Option(
            "--team",
            help="Team to submit under (one of the spec's teams): its max_gpus is enforced and "
            "it labels the metrics [default: your team per members].",
        ),
    ] = None,
    master: MasterOpt = None,
    spec: SpecOpt = None,
    conf: ConfOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run SCRIPT on N ranks (Spark barrier stage, or --local), the way torchrun runs it.

    As with torchrun, launch's options come before SCRIPT and everything after it is the
    script's: gpuspark launch -n 2 train.py --epochs 1. torchrun's own spellings are taken
    where they mean the same (--tee 3, --nproc_per_node, --log_dir, --max_restarts); its
    other options are refused with gpuspark's equivalent (--nnodes M: -n M*N --nproc-per-node
    N).
    """
    from gpuspark.launch import make_request, prepare, run_request
    from gpuspark.launch.cluster_total import check_cluster_total

    spec = spec_with_conf(spec, conf)
    args = list(script_args or [])
    if args[:1] == ["--"]:  # the older form: train.py -- --epochs 1
        args = args[1:]
    req = make_request(
        script,
        *args,
        num_processes=num_processes or processes_per_task or 1,
        gpus_per_process=gpus_per_process,
        processes_per_task=processes_per_task,
        module=module,
        log_dir=log_dir,
        tee=tee,
        local=local,
        backend=backend,
        max_restarts=max_restarts,
        max_attempts=max_attempts,
        timeout=timeout,
        collective_timeout=collective_timeout,
        min_ranks=min_ranks,
        master=master,
        team=team,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        env=_store_credentials(local),
    )
    if dry_run:  # checked as the run would be (spec, team, its GPUs), then printed
        job = prepare(req, spec)
        check_cluster_total(req, job.master)
        session = None if req.local else _session_plan(job)
        if json_out:
            shown = dataclasses.asdict(session) if session is not None else None
            print_json(_plan(req) | {"session": shown})
        else:
            typer.echo(req.materialize())
            if session is not None:
                typer.echo(f"session: {session.materialize()}")
        return
    start = time.monotonic()
    run_request(req, spec=spec)
    seconds = round(time.monotonic() - start, 2)
    if json_out:
        logs = {"log_dir": req.log_dir} if req.log_dir else {}
        print_json({"ok": True, "ranks": req.num_processes, "seconds": seconds, **logs})
    else:
        typer.echo(f"[gpuspark] {req.num_processes} ranks finished in {seconds} s")


def _session_plan(job: Any) -> Any:
    """The training session the launch would build (master, conf, environment), unstarted;
    ``None`` when it can only be planned once the run starts it (the embedded cluster, not
    running yet, is started for the run)."""
    from gpuspark.cluster.session import session_plan
    from gpuspark.errors import ClusterError

    args = job.session_args()
    args.pop("reuse_active", None)
    try:
        return session_plan(**args)
    except ClusterError:
        return None


def _plan(req: LaunchRequest) -> dict[str, Any]:
    """The dry run as data (``--dry-run --json``): what :meth:`LaunchRequest.materialize`
    prints, one key per fact, and that text under ``text``."""
    from gpuspark.storage import redact

    script = req.script or []
    stage = None
    if not req.local:
        stage = {"tasks": req.num_tasks, "cpus_per_task": 1, "gpus_per_task": req.gpus_per_task}
    return {
        "mode": "local" if req.local else "spark",
        "master": None if req.local else req.master,
        "ranks": req.num_processes,
        "nodes": req.num_tasks,
        "ranks_per_node": req.per_task,
        "gpus_per_process": req.gpus_per_process,
        "entrypoint": req.entrypoint,
        "script": script[0] if script else None,
        "script_args": script[1:],
        "module": req.module,
        "backend": req.backend,
        "rendezvous": req.rdzv_backend,
        "max_restarts": req.max_restarts,
        "max_attempts": req.max_attempts,
        "timeout": req.timeout,
        "collective_timeout": req.collective_timeout,
        "min_ranks": req.min_ranks,
        "barrier_stage": stage,
        "team": req.team,
        "metrics": {"port": req.metrics_port, "host": req.metrics_host},
        "log_dir": req.log_dir,
        "tee": req.tee,
        "workdir": req.workdir,
        "env": redact(req.env),
        "text": req.materialize(),
    }


def _store_credentials(local: bool) -> dict[str, str]:
    """The object-store credential variables of this shell, for ranks on a cluster's
    executors (started with their own environment), as torchrun's ranks inherit them; shown
    redacted in ``--dry-run`` and ``--json``. Local ranks inherit them anyway."""
    from gpuspark.storage import credential_env

    return {} if local else credential_env()
