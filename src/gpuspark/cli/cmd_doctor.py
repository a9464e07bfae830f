"""``gpuspark doctor``: live checks; ``gpuspark doctor logs PATH...``: explain a failure."""

from __future__ import annotations

import typer

from gpuspark.cli.cmd_doctor_logs import logs

doctor_app = typer.Typer(
    help="Check this node and the cluster, or explain a failed job's logs.",
    invoke_without_command=True,
)
doctor_app.command("logs")(logs)


def register(app: typer.Typer) -> None:
    """Add the ``doctor`` group to ``app``."""
    app.add_typer(doctor_app, name="doctor")
