"""Options and output helpers shared by the CLI commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuspark._util import envvars

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
SpecOpt = Annotated[
    Path | None,
    typer.Option(
        "--spec",
        envvar=envvars.SPEC.name,
        help="Cluster spec (TOML) whose master and [spark] settings the job uses "
        "[default: the built-in embedded-cluster spec].",
    ),
]
MasterOpt = Annotated[
    str | None,
    typer.Option(
        "--master",
        help="Spark master URL (spark://, yarn, k8s://, local[*]); default: the embedded cluster.",
    ),
]


_INTERRUPT_NOTE: list[Callable[[], str] | None] = [None]


def on_interrupt(note: Callable[[], str] | None) -> None:
    """Say what a Ctrl-C leaves behind, as it stands when it comes: ``note()`` is called then,
    and its text ends the running command's ``interrupted:`` line (``None``: the default)."""
    _INTERRUPT_NOTE[0] = note


def interrupt_note() -> str | None:
    """The running command's note of :func:`on_interrupt` (``None``: it set none)."""
    note = _INTERRUPT_NOTE[0]
    return note() if note is not None else None


def parse_numbers(
    text: str | None, kind: type, count: int | None, option: str, form: str
) -> tuple[Any, ...] | None:
    """``"a,b,c"`` -> a tuple of ``kind`` (``None`` stays ``None``); a usage error naming the
    option and the expected ``form`` otherwise. The library takes tuples: text ends here."""
    if text is None:
        return None
    try:
        out = tuple(kind(x) for x in text.split(","))
    except ValueError:
        out = ()
    if not out or (count is not None and len(out) != count):
        raise typer.BadParameter(f"expected {form}, got {text!r}", param_hint=option)
    return out


def print_json(obj: Any) -> None:
    """Write ``obj`` as indented JSON to stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print a rich table to stdout."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    Console().print(table)


def echo(message: str) -> None:
    """Print one line to stdout (rich markup allowed)."""
    from rich.console import Console

    Console().print(message, highlight=False)


def check_dir_option(path: Path, option: str) -> None:
    """Refuse before any work a directory option that names a file, or a path that cannot be
    created because the nearest existing folder above it is a file or is not writable."""
    from gpuspark import storage
    from gpuspark.errors import GpusparkError

    problem = storage.directory_problem(path)
    if problem is not None:
        raise GpusparkError(f"{option} {path} {problem.text}", remedy=problem.remedy)
