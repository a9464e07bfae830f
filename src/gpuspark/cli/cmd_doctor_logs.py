"""``gpuspark doctor logs PATH...``: match logs against the catalogue of known failures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def logs(
    paths: Annotated[list[Path], typer.Argument(help="Log files or directories.")],
) -> None:
    """Explain a failed job: known problems in the logs, with cause and fix."""
    raise typer.Exit(2)
