"""``gpuspark doctor``: live checks; ``gpuspark doctor logs PATH...``: explain a failure."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuspark.cli._common import JsonOpt, MasterOpt, SpecOpt, echo, new_app, print_json, print_table
from gpuspark.cli.cmd_doctor_logs import logs

doctor_app = new_app(
    help="Check this node and the cluster, or explain a failed job's logs.",
    invoke_without_command=True,
)
doctor_app.command("logs")(logs)

_STYLE = {
    "ok": "[green]ok[/]",
    "warning": "[yellow]warning[/]",
    "failure": "[bold red]FAILURE[/]",
    "skipped": "[dim]skipped[/]",
    "info": "[cyan]info[/]",
}


@doctor_app.callback()
def doctor(
    ctx: typer.Context,
    spec: SpecOpt = None,
    master: MasterOpt = None,
    probe: Annotated[
        bool, typer.Option("--probe", help="Also time an allreduce over the cluster (busbw).")
    ] = False,
    world_size: Annotated[
        int | None,
        typer.Option("--world-size", min=1, help="Ranks (whole GPUs) a training job will ask."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Check Java, pyspark, GPUs, network, the master, workers, executors' Python, GPU slots
    and training capacity; each check says ok / warning / failure, its evidence and the fix.
    Exit code 1 when any check fails."""
    if ctx.invoked_subcommand is not None:
        return
    if probe and world_size is not None and world_size < 2:  # before any session starts
        raise typer.BadParameter(
            f"{world_size}: the probe times an allreduce between ranks; use 2 or more",
            param_hint="--world-size",
        )
    from gpuspark.doctor.live import run_checks

    report = run_checks(spec=spec, master=master, probe=probe, world_size=world_size)
    if json_out:
        print_json(report.as_dict())
    else:
        rows = [(c.name, _STYLE[c.status.value], c.evidence, c.fix) for c in report.checks]
        print_table("gpuspark doctor", ["check", "status", "evidence", "fix"], rows)
        echo(report.summary())
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    """Add the ``doctor`` group to ``app``."""
    app.add_typer(doctor_app, name="doctor")
