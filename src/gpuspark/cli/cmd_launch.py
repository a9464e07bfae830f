"""``gpuspark launch``: run a training script on N ranks, on Spark or locally, like torchrun."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from gpuspark.cli._common import JsonOpt, MasterOpt, SpecOpt, print_json


def register(app: typer.Typer) -> None:
    """Add the ``launch`` command."""
    app.command("launch", no_args_is_help=True)(launch)


def launch(
    script: Annotated[
        str, typer.Argument(help="The training script (reads RANK, WORLD_SIZE, ...).")
    ],
    script_args: Annotated[
        list[str] | None, typer.Argument(help="Arguments of the script, after --.")
    ] = None,
    num_processes: Annotated[int, typer.Option("-n", "--num-processes", help="Ranks.", min=1)] = 1,
    gpus_per_process: Annotated[
        float, typer.Option("--gpus-per-process", help="Whole GPUs per rank (0: CPU ranks).")
    ] = 1,
    processes_per_task: Annotated[
        int | None, typer.Option("--processes-per-task", help="Ranks per Spark barrier task.")
    ] = None,
    max_restarts: Annotated[
        int, typer.Option("--max-restarts", help="Restarts of failed ranks.")
    ] = 0,
    max_attempts: Annotated[
        int, typer.Option("--max-attempts", help="Attempts of the whole stage.")
    ] = 1,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Seconds in all.", min=1)
    ] = None,
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
    json_out: JsonOpt = False,
) -> None:
    """Run SCRIPT on N ranks (Spark barrier stage, or --local), the way torchrun runs it."""
    from gpuspark.launch import make_request, prepare, run_request
    from gpuspark.launch.cluster_total import check_cluster_total

    req = make_request(
        script,
        *(script_args or []),
        num_processes=num_processes,
        gpus_per_process=gpus_per_process,
        processes_per_task=processes_per_task,
        local=local,
        backend=backend,
        max_restarts=max_restarts,
        max_attempts=max_attempts,
        timeout=timeout,
        master=master,
        team=team,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    if dry_run:  # checked as the run would be (spec, team, its GPUs), then printed
        job = prepare(req, spec)
        check_cluster_total(req, job.master)
        print_json({"plan": req.materialize()}) if json_out else typer.echo(req.materialize())
        return
    start = time.monotonic()
    run_request(req, spec=spec)
    seconds = round(time.monotonic() - start, 2)
    if json_out:
        print_json({"ok": True, "ranks": num_processes, "seconds": seconds})
    else:
        typer.echo(f"[gpuspark] {num_processes} ranks finished in {seconds} s")
