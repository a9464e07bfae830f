"""Entry point of the ``gpuspark`` command.

Each command group lives in its own module and is registered here; a command parses, calls
one library function and prints a table or ``--json``. Known errors become one line and exit
code 1 (``GPUSPARK_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Annotated

import typer

from gpuspark import __version__
from gpuspark.errors import GpusparkError

app = typer.Typer(
    name="gpuspark",
    help="Spark + PyTorch DDP on shared GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuspark {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Show the library's debug log.")
    ] = False,
) -> None:
    """Spark + PyTorch DDP on shared GPU clusters."""
    _logging(verbose)


def _logging(verbose: bool) -> None:
    """The library logs through ``logging``; the CLI shows it on stderr (INFO, or DEBUG)."""
    import logging

    from rich.console import Console
    from rich.logging import RichHandler

    logger = logging.getLogger("gpuspark")
    for handler in list(logger.handlers):
        if getattr(handler, "_gpuspark_cli", False):
            logger.removeHandler(handler)
    handler = RichHandler(
        console=Console(stderr=True), show_time=False, show_path=verbose, markup=False
    )
    handler._gpuspark_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    if verbose:  # show Spark's own warnings live too (default: errors only, the rest in a file)
        from gpuspark.cluster.driver_log import CONSOLE_LEVEL_ENV

        os.environ.setdefault(CONSOLE_LEVEL_ENV, "warn")


def _register() -> None:
    """Attach every command group (imports stay light: heavy ones live inside commands)."""
    from gpuspark.cli import commands

    commands.register(app)


_register()


def _report(exc: BaseException) -> int:
    if os.environ.get("GPUSPARK_DEBUG") == "1":
        traceback.print_exception(exc)
    sys.stderr.write(f"error: {exc}\n")
    return 1


def _path_error(exc: OSError) -> GpusparkError:
    """Last resort for a path problem no check caught: one line naming the path."""
    if exc.filename is None:
        return GpusparkError(str(exc), remedy="check the paths given")
    error = GpusparkError(f"{exc.filename}: {exc.strerror or exc}", remedy="check the path")
    error.__cause__ = exc
    return error


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code."""
    try:
        # With standalone_mode=False click returns the exit code of typer.Exit(n).
        rc = app(args=argv, standalone_mode=False)
    except GpusparkError as exc:
        return _report(exc)
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        return _report(_path_error(exc))
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        sys.stderr.write("aborted\n")
        return 1
    except Exception as exc:
        # Usage errors are click exceptions: they show themselves and carry their exit code.
        # typer vendors click privately, so they are recognised by that interface, not by class.
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            return code
        raise
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
