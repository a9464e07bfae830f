"""Entry point of the ``gpuspark`` command.

Each command group lives in its own module and is registered here; a command parses, calls
one library function and prints a table or ``--json``. Known errors become one line and exit
code 1 (``GPUSPARK_DEBUG=1`` shows the traceback); a command given ``--json`` prints any
failure as one JSON object instead (``error``, ``remedy``, ``exit_code``).
"""

from __future__ import annotations

import errno
import functools
import logging
import math
import os
import signal
import sys
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Annotated, Any

import typer

from gpuspark import __version__
from gpuspark._util import envvars
from gpuspark._util.signals import Caught, by_interrupt, terminate_raises
from gpuspark.cli._common import new_app, print_json
from gpuspark.errors import GpusparkError

app = new_app(
    name="gpuspark", help="Spark + PyTorch DDP on shared GPU clusters.", no_args_is_help=True
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
    # A logger's filters see only the records logged on it, not those its children pass up:
    # the filter sits on every logger py4j logs on (the root one too: logging.exception()).
    for name in _PY4J_LOGGERS:
        py4j_logger = logging.getLogger(name)
        if _quiet_py4j_interrupt not in py4j_logger.filters:
            py4j_logger.addFilter(_quiet_py4j_interrupt)
    if verbose:  # show Spark's own warnings live too (default: errors only, the rest in a file)
        from gpuspark.cluster.driver_log import CONSOLE_LEVEL_ENV

        os.environ.setdefault(CONSOLE_LEVEL_ENV, "warn")


_PY4J_LOGGERS = ("", "py4j.clientserver", "py4j.java_gateway")


def _quiet_py4j_interrupt(record: logging.LogRecord) -> bool:
    """Drop the tracebacks py4j logs on the root logger when Ctrl-C lands in a call to the JVM
    ("KeyboardInterrupt while sending command", or PySpark's SIGINT handler cancelling jobs
    over the connection in use); the CLI says ``interrupted:`` instead."""
    if "py4j" not in record.pathname or not record.exc_info:
        return True
    exc = record.exc_info[1]
    return not (by_interrupt(exc) or _in_sigint_handler())


def _in_sigint_handler() -> bool:
    """Whether this runs inside PySpark's SIGINT handler (``SparkContext``'s ``signal_handler``)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "signal_handler" and "pyspark" in code.co_filename:
            return True
        frame = frame.f_back
    return False


def _register() -> None:
    """Attach every command group (imports stay light: heavy ones live inside commands)."""
    from gpuspark.cli import commands

    commands.register(app)


_register()


def _report(exc: GpusparkError, argv: list[str] | None) -> int:
    if os.environ.get(envvars.DEBUG.name) == "1":
        traceback.print_exception(exc)
    return _fail(f"error: {exc}", exc.message, exc.remedy, 1, argv)


def _fail(line: str, error: str, remedy: str | None, code: int, argv: list[str] | None) -> int:
    """Say why the command failed and return ``code``: ``line`` on stderr, or, when the
    command was given ``--json``, one JSON object on stdout (``error``, ``remedy``,
    ``exit_code``) that a script reads as it reads the command's output."""
    if _json_wanted(sys.argv[1:] if argv is None else argv):
        print_json({"error": error, "remedy": remedy, "exit_code": code})
    else:
        sys.stderr.write(line + "\n")
    return code


def _json_wanted(argv: list[str]) -> bool:
    """Whether the command that ``argv`` names was given ``--json``: the words parsed again as
    shell completion parses them (leniently: errors ignored, nothing run), down to the last
    command named, whose own ``--json`` counts (after launch's SCRIPT it is the script's)."""
    try:
        ctx = _resolved(argv)
    except Exception:  # a failure is being reported: it must not fail in its turn
        return False
    return any(
        "--json" in param.opts and ctx.params.get(param.name) is True
        for param in ctx.command.params
    )


def _resolved(argv: list[str]) -> Any:
    """The click context of the last command ``argv`` names, parsed leniently."""
    cmd = _command()
    ctx = cmd.make_context("gpuspark", list(argv), resilient_parsing=True)
    while getattr(cmd, "commands", None):
        args = [*ctx._protected_args, *ctx.args]  # the subcommand and its words, as click's
        # shell completion (_resolve_context) reads them: no public name holds them
        name, sub, rest = cmd.resolve_command(ctx, args) if args else (None, None, [])
        if sub is None:
            break
        ctx = sub.make_context(name, rest, parent=ctx, resilient_parsing=True)
        cmd = sub
    return ctx


def _path_error(exc: OSError) -> GpusparkError:
    """Last resort for a path problem no check caught: one line naming the path."""
    if exc.filename is None:
        return GpusparkError(str(exc), remedy="check the paths given")
    error = GpusparkError(f"{exc.filename}: {exc.strerror or exc}", remedy="check the path")
    error.__cause__ = exc
    return error


def _disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it, or a Spark task's error it carries as text) is a
    write that ran out of space (``ENOSPC``)."""
    text = f"[Errno {errno.ENOSPC}] No space left on device"
    return any(
        (isinstance(cur, OSError) and cur.errno == errno.ENOSPC) or text in str(cur)
        for cur in _chain(exc)
    )


def _disk_full_error(argv: list[str] | None) -> GpusparkError:
    words = _command_words(sys.argv[1:] if argv is None else argv)
    kept = _kept(words)
    return GpusparkError(
        f"{words}: no space left on device; {kept}",
        remedy="free space where the output goes, or write it elsewhere",
    )


# What an interrupted command leaves behind, by command (its first words); default: nothing.
_KEPT_ON_INTERRUPT = {
    "prep": "nothing was written; the old dataset, if any, is unchanged",
    "demo": "finished steps are kept in the output directory",
}


def _interrupt_types() -> tuple[type[BaseException], ...]:
    """KeyboardInterrupt, and py4j's errors when py4j is loaded (the JVM torn down by Ctrl-C)."""
    py4j = sys.modules.get("py4j.protocol")
    extra = (py4j.Py4JError,) if py4j is not None else ()
    return (KeyboardInterrupt, *extra)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        yield cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__


def _interrupted(exc: BaseException | None, argv: list[str] | None, signum: int | None) -> int:
    """One line for a Ctrl-C, or a SIGTERM or SIGHUP (``signum``), with no traceback and no
    py4j noise; the shell's exit code: 130 for Ctrl-C, else 128 + ``signum`` (SIGTERM: 143)."""
    if exc is not None and os.environ.get(envvars.DEBUG.name) == "1":
        traceback.print_exception(exc)
    words = _command_words(sys.argv[1:] if argv is None else argv)
    kept = _kept(words)
    by = f" by {signal.Signals(signum).name}" if signum else ""
    return _fail(
        f"interrupted{by}: {words} stopped; {kept}",
        f"{words} was interrupted{by}; {kept}",
        None,
        128 + signum if signum else 130,
        argv,
    )


EMPTY_ALLOWED = frozenset({"--namespace-prefix", "script_args"})
"""Options where an empty value means something (their default, said explicitly), and the
arguments passed on untouched (a launched script's own)."""
INFINITE_ALLOWED = frozenset({"--decode-per-core"})
"""Float options where ``inf`` means something (decoding costs no CPU: done on the GPUs)."""


@functools.cache
def _command() -> Any:
    """The click command of :data:`app`, every option checked for values no command takes:
    an empty text or path, a float that is not finite (nan, inf)."""
    import typer.main

    command = typer.main.get_command(app)
    for param in _params(command):
        if (param.opts and param.opts[0] in EMPTY_ALLOWED) or getattr(param, "is_flag", False):
            continue
        finite = not (param.opts and param.opts[0] in INFINITE_ALLOWED)
        param.process_value = _checked(param, param.process_value, finite)
    return command


def _params(command: Any) -> Iterator[Any]:
    yield from command.params
    for sub in (getattr(command, "commands", None) or {}).values():
        yield from _params(sub)


def _checked(param: Any, process: Any, finite: bool) -> Any:
    """``param``'s ``process_value`` after refusing an empty text (before ``Path("")``
    becomes ``.``) and, once converted, NaN and (``finite``) infinities: usage errors."""

    def check(ctx: Any, value: Any) -> Any:
        source = ctx.get_parameter_source(param.name)
        given = source is not None and source.name != "DEFAULT"
        raw = value if isinstance(value, list | tuple) else [value]
        if given and any(isinstance(v, str) and not v.strip() for v in raw):
            raise typer.BadParameter("must not be empty", ctx=ctx, param=param)
        out = process(ctx, value)
        for one in out if isinstance(out, list | tuple) else [out]:
            if isinstance(one, float) and (math.isnan(one) or (finite and math.isinf(one))):
                raise typer.BadParameter(f"{one} is not a number", ctx=ctx, param=param)
        return out

    return check


def _usage_error(exc: Exception, message: str, code: int, argv: list[str] | None) -> int:
    """A usage error in one line: what is wrong, and where the command's help is."""
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "gpuspark"
    text = " ".join(message.split())
    see = f"see '{path} --help'"
    return _fail(f"error: {text} ({see})", text, see, code, argv)


def _kept(words: str) -> str:
    """What the stopped command leaves: its own note, else its group's default."""
    return _safe_note() or _KEPT_ON_INTERRUPT.get(words.split(" ")[0], "nothing was written")


def _safe_note() -> str | None:
    """The command's own word on what it leaves; a note that fails says nothing."""
    from gpuspark.cli._common import interrupt_note

    try:
        return interrupt_note()
    except Exception:  # the interrupted line must still be printed
        return None


def _command_words(argv: list[str]) -> str:
    """``prep images`` of ``["-v", "prep", "images", "SRC", ...]``: the command's names."""
    cmd: object = _command()
    words: list[str] = []
    for token in argv:
        sub = (getattr(cmd, "commands", None) or {}).get(token)
        if sub is None:
            if token.startswith("-") and not words:
                continue  # a root option such as -v
            break
        words.append(token)
        cmd = sub
    return " ".join(words) or "gpuspark"


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code. SIGTERM and SIGHUP stop a command as Ctrl-C does
    (:mod:`gpuspark._util.signals`): what it started is cleaned up, then one line."""
    from gpuspark.cli._common import on_interrupt

    on_interrupt(None)  # a note of an earlier command run in this process does not apply
    with terminate_raises() as caught:
        return _run(argv, caught)


def _run(argv: list[str] | None, caught: Caught) -> int:
    """The command of ``argv``, run; its exit code (``caught``: a SIGTERM or SIGHUP that
    stopped it)."""
    try:
        # With standalone_mode=False click returns the exit code of typer.Exit(n).
        rc = _command()(args=argv, standalone_mode=False, prog_name="gpuspark")
    except _interrupt_types() as exc:
        if not by_interrupt(exc):
            raise  # a py4j error of its own: as any unexpected error
        return _interrupted(exc, argv, caught.signum)
    except GpusparkError as exc:
        return _report(exc, argv)
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        return _report(_path_error(exc), argv)
    except OSError as exc:
        if not _disk_full(exc):
            raise
        return _report(_disk_full_error(argv), argv)
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        return _fail("aborted", "aborted", None, 1, argv)
    except Exception as exc:
        # Usage errors are click exceptions: they show themselves and carry their exit code.
        # typer vendors click privately, so they are recognised by that interface, not by class.
        message, code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
        if type(exc).__name__ == "NoArgsIsHelpError":  # a group run bare: its help
            sys.stderr.write(message() + "\n")  # type: ignore[misc]
            return int(code)  # type: ignore[arg-type]
        if callable(message) and isinstance(code, int):
            return _usage_error(exc, message(), code, argv)
        if _disk_full(exc):  # a Spark task's ENOSPC reaches the driver as a Spark error
            return _report(_disk_full_error(argv), argv)
        from gpuspark.storage import store_failure

        failed = store_failure(exc)  # an object store's client gave up
        if failed is not None:
            return _report(failed, argv)
        raise
    if rc == 130:  # typer returns a Ctrl-C inside a command as exit code 130
        return _interrupted(None, argv, caught.signum)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
