"""Options and output helpers shared by the CLI commands."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuspark._util import envvars


def new_app(**settings: Any) -> typer.Typer:
    """A Typer app (the root or a command group) with the settings every gpuspark app shares.

    Help is plain click text, not rich markup: markup would eat every ``[...]`` of a help
    text (``[default: ...]``, ``[spark]``). Neither shell-completion options nor rich
    tracebacks: errors are one line (:mod:`gpuspark.cli.main`). A command group's help then
    reads the same whether it is rendered under ``gpuspark`` or from its own app.
    """
    return typer.Typer(
        rich_markup_mode=None, add_completion=False, pretty_exceptions_enable=False, **settings
    )


JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
CollectiveTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--collective-timeout",
        metavar="SECONDS",
        help="Seconds a rank waits in one collective for its peers before it fails: the "
        "default timeout of init_process_group in every rank (a host cut off ends the run "
        "within about this long) [default: the spec's [training] collective_timeout_s, 600].",
        min=1,
    ),
]
MinRanksOpt = Annotated[
    int | None,
    typer.Option(
        "--min-ranks",
        metavar="K",
        help="Elastic: after a lost host, --max-attempts retries on the ranks the hosts left "
        "can hold, at least K; they resume the newest checkpoint, written by another world "
        "size (the loaders deal the epoch's rest again to them).",
        min=1,
    ),
]
SpecOpt = Annotated[
    Path | None,
    typer.Option(
        "--spec",
        envvar=envvars.SPEC.name,
        help="Cluster spec (TOML) whose master and [spark] settings the job uses "
        "[default: the built-in embedded-cluster spec].",
    ),
]
SpecFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--spec",
        envvar=envvars.SPEC.name,
        help="Cluster spec file (TOML); required, here or in the environment.",
    ),
]
"""``--spec`` of a command whose subject is the spec (``validate``, ``render *``): no
built-in default; with :data:`SpecFileArg` and :func:`spec_path`."""
SpecFileArg = Annotated[
    Path | None,
    typer.Argument(
        help="Deprecated: the spec as an argument; use --spec (the argument goes in the next "
        "release).",
        show_default=False,
    ),
]
"""The spec as a positional argument, the older form, kept for one release."""
ConfOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--conf",
        metavar="K=V",
        help="A Spark setting (repeatable), applied over the spec's [spark.conf] as "
        "spark-submit's --conf is over spark-defaults.conf.",
    ),
]


def parse_conf(items: list[str] | None) -> dict[str, str]:
    """``--conf K=V`` items -> ``{K: V}`` (later wins); a usage error for an item without ``=``
    or whose key is no ``spark.`` property."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.startswith("spark.") or key == "spark.":
            raise typer.BadParameter(
                f"expected K=V with a spark.* key, got {item!r}", param_hint="--conf"
            )
        out[key] = value
    return out


def spec_with_conf(spec: Path | None, conf: list[str] | None) -> Any:
    """The spec a job command passes on: ``spec`` as given without ``--conf``; else the spec
    (``spec``, ``$GPUSPARK_SPEC`` or the default) read, with ``--conf`` over its
    ``[spark.conf]``, so every session of the job gets it (and gpuspark keeps a
    ``spark.pyspark.python`` given so, as one from the spec)."""
    pairs = parse_conf(conf)
    if not pairs:
        return spec
    from gpuspark.spec import resolve_spec

    found = resolve_spec(spec)
    _check_managed(found.spark, pairs)
    spark = found.spark.model_copy(update={"conf": {**found.spark.conf, **pairs}})
    return found.model_copy(update={"spark": spark})


def _check_managed(spark: Any, pairs: dict[str, str]) -> None:
    """A usage error for a ``--conf`` value of a key a typed spec setting owns that the
    setting would refuse (``spark.executor.memory=abc``, ``spark.task.resource.gpu.amount=0``)
    and for ``spark.master`` (``--master`` chooses the master)."""
    from pydantic import ValidationError

    from gpuspark.spec.models import MANAGED_CONF, SparkSettings

    for key, value in pairs.items():
        field = MANAGED_CONF.get(key)
        if field is None:
            continue
        if field == "master":
            raise typer.BadParameter(
                f"{key} is chosen by --master: pass --master {shlex.quote(value)}",
                param_hint="--conf",
            )
        try:
            SparkSettings.model_validate({**spark.model_dump(exclude={"conf"}), field: value})
        except ValidationError as exc:
            reason = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise typer.BadParameter(
                f"{key}={value}: {reason} (the spec's spark.{field})", param_hint="--conf"
            ) from None


MasterOpt = Annotated[
    str | None,
    typer.Option(
        "--master",
        help="Spark master URL (spark://, yarn, k8s://, sc:// for Spark Connect, local[*]); "
        "default: the embedded cluster.",
    ),
]


def spec_path(ctx: typer.Context, argument: Path | None, option: Path | None) -> Path:
    """The spec file of a command with :data:`SpecFileOpt` (``option``, from ``--spec`` or
    ``$GPUSPARK_SPEC``) and :data:`SpecFileArg` (``argument``, deprecated: it wins over the
    environment, with a note on stderr; given with ``--spec``, a usage error)."""
    if argument is None:
        if option is None:
            raise typer.BadParameter(
                f"none given: name the cluster spec with --spec FILE or {envvars.SPEC.name}",
                ctx=ctx,
                param_hint="--spec",
            )
        return option
    name = next((p.name for p in ctx.command.params if "--spec" in p.opts), None)
    source = ctx.get_parameter_source(name) if name else None
    if option is not None and source is not None and source.name == "COMMANDLINE":
        raise typer.BadParameter(
            f"the spec is also given as an argument ({argument}); give --spec only",
            ctx=ctx,
            param_hint="--spec",
        )
    sys.stderr.write(
        f"deprecated: the spec as an argument; use {ctx.command_path} --spec "
        f"{shlex.quote(str(argument))} "
        f"(or {envvars.SPEC.name}): the argument goes in the next release\n"
    )
    return argument


def deprecated(old: str, new: str) -> None:
    """One ``deprecated:`` line on stderr: ``old`` still works this release; use ``new``."""
    sys.stderr.write(f"deprecated: {old}; use {new} (the old form goes in the next release)\n")


SPLIT_FORM = "train=F,val=F[,test=F] such as train=0.8,val=0.1,test=0.1 (train: the rest)"
"""The one split syntax of every ``prep`` command (and what a bad ``--split`` names)."""

_SPLIT_NAMES = ("train", "val", "test")


def parse_split(text: str, option: str = "--split", *, allow_none: bool = False) -> Any:
    """``train=0.8,val=0.1,test=0.1`` (any of the names, in any order; a missing ``train``
    gets the rest) -> ``(train, val[, test])``; ``none`` (where ``allow_none``) -> ``None``.
    The old spellings still work, with a ``deprecated:`` line: bare fractions
    ``0.8,0.1,0.1`` and text's ``val=0.05``-without-train (which means the same)."""
    if allow_none and text.strip().lower() == "none":
        return None
    if "=" not in text:
        out = parse_numbers(text, float, None, option, SPLIT_FORM)
        named = ",".join(f"{n}={v:g}" for n, v in zip(_SPLIT_NAMES, out or (), strict=False))
        deprecated(f"{option} {text} (bare fractions)", f"{option} {named}")
        return out
    parts: dict[str, float] = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        name = name.strip()
        try:
            if name not in _SPLIT_NAMES or name in parts:
                raise ValueError(name)
            parts[name] = float(value)
        except ValueError:
            raise typer.BadParameter(
                f"expected {SPLIT_FORM}, got {text!r}", param_hint=option
            ) from None
    val, test = parts.get("val", 0.0), parts.get("test")
    train = parts.get("train", 1.0 - val - (test or 0.0))
    return (train, val) if test is None else (train, val, test)


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
