"""``gpuspark quota status | why APP``: team GPU usage vs quota, and why an application waits."""

from __future__ import annotations

import typer

quota_app = typer.Typer(help="Team GPU quotas: usage now, and why an application waits.")


def register(app: typer.Typer) -> None:
    """Add the ``quota`` group to ``app``."""
    app.add_typer(quota_app, name="quota")
