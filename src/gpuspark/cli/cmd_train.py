"""``gpuspark train RECIPE --data SHARDS``: a ready recipe on N ranks through the launcher."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuspark.cli._common import (
    CollectiveTimeoutOpt,
    ConfOpt,
    JsonOpt,
    MasterOpt,
    MinRanksOpt,
    SpecOpt,
    deprecated,
    echo,
    on_interrupt,
    print_json,
    print_table,
    spec_with_conf,
)
from gpuspark.train.recipes.config import flag_fields

if TYPE_CHECKING:
    from gpuspark.train.recipes import TrainSummary


def _run_options(
    recipe: Annotated[
        str,
        typer.Argument(
            help="Recipe: resnet3d (CT volumes), resnet2d (images), tabular "
            "(tables from `gpuspark prep parquet`) or bert (text from `gpuspark prep text`)."
        ),
    ],
    num_processes: Annotated[
        int, typer.Option("--num-processes", "-n", help="Training processes (ranks).", min=1)
    ] = 2,
    gpus_per_process: Annotated[float, typer.Option(help="GPUs per rank.")] = 1,
    processes_per_task: Annotated[
        int | None,
        typer.Option(
            "--nproc-per-node",
            "--processes-per-task",
            help="Ranks per Spark task, i.e. per node (torchrun's --nproc-per-node; sets "
            "LOCAL_WORLD_SIZE, the shard group of --strategy hsdp) [default: 1 on Spark, "
            "all ranks with --local].",
            min=1,
        ),
    ] = None,
    local: Annotated[
        bool, typer.Option("--local", help="Run ranks as local processes, not on Spark.")
    ] = False,
    no_local: Annotated[
        bool, typer.Option("--no-local", hidden=True, help="Deprecated: Spark is the default.")
    ] = False,
    max_restarts: Annotated[
        int,
        typer.Option(
            "--max-restarts",
            help="Restart the ranks in place after a rank fails, this many times (they "
            "resume from the newest checkpoint).",
        ),
    ] = 0,
    max_attempts: Annotated[
        int,
        typer.Option(
            "--max-attempts",
            help="Attempts of the whole Spark stage, e.g. after a lost host (a retry resumes "
            "from the newest checkpoint).",
        ),
    ] = 1,
    min_ranks: MinRanksOpt = None,
    collective_timeout: CollectiveTimeoutOpt = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="Base port of the ranks' /metrics (+ local rank; 0: off; default 9700)."),
    ] = None,
    metrics_host: Annotated[
        str | None, typer.Option(help="Address /metrics binds to (default 127.0.0.1).")
    ] = None,
    team: Annotated[
        str | None,
        typer.Option(
            help="Team to train under (one of the spec's teams): its max_gpus is enforced and "
            "it labels the metrics [default: your team per members]."
        ),
    ] = None,
    master: MasterOpt = None,
    spec: SpecOpt = None,
    conf: ConfOpt = None,
    mlflow: Annotated[
        bool,
        typer.Option(
            "--mlflow",
            help="Track the run in MLflow from rank 0 and register best.pt as a model: "
            "`--mlflow [URI]`, URI a folder, sqlite:///FILE.db or http://HOST:PORT "
            "[default: MLFLOW_TRACKING_URI, else ./mlruns]. Needs gpuspark[mlflow].",
        ),
    ] = False,
    mlflow_model: Annotated[
        str | None,
        typer.Option(
            "--mlflow-model", metavar="NAME", help="Registered model name [default: the recipe]."
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """The options of ``gpuspark train`` that are no :class:`RecipeConfig` field: which recipe,
    where and how the ranks run. The config's own flags are made from its fields."""


def train(recipe: str, extra_args: list[str] | None = None, **options: Any) -> None:
    """Train a recipe with DDP or FSDP on the cluster (embedded one by default); rank 0 logs
    epochs."""
    from gpuspark.train import recipes

    run = {name: options.pop(name) for name in _RUN_NAMES}
    run["tracking"] = _tracking(run.pop("mlflow"), run.pop("mlflow_model"), extra_args or [])
    run["spec"] = spec_with_conf(run["spec"], run.pop("conf"))
    if run.pop("no_local"):
        deprecated("train --no-local", "no flag: ranks run on Spark by default")
    directory = options.get("checkpoint_dir")
    on_interrupt(lambda: _kept_on_interrupt(directory))
    cfg = recipes.RecipeConfig(**_config_values(recipe, options))
    json_out = run.pop("json_out")
    summary = recipes.run(recipe, cfg, **run)
    if json_out:
        print_json(summary.as_dict())
        return
    _print_summary(summary)


def _tracking(mlflow: bool, model_name: str | None, extra: list[str]) -> Any:
    """The :class:`~gpuspark.train.tracking.Tracking` of ``--mlflow [URI]`` (``None``
    without it). ``--mlflow`` is a flag whose optional URI is the word after it (Typer has
    no options with an optional value), so that word arrives as the command's one extra
    argument; any other extra argument is a usage error."""
    if len(extra) > 1 or (extra and not mlflow):
        raise typer.BadParameter(
            f"unexpected argument(s) {' '.join(extra)} (only --mlflow takes one URI after it)"
        )
    if not mlflow:
        if model_name is not None:
            raise typer.BadParameter("--mlflow-model needs --mlflow", param_hint="--mlflow-model")
        return None
    from gpuspark.train.tracking import Tracking

    return Tracking(uri=extra[0] if extra else None, model_name=model_name)


_RUN_NAMES = tuple(inspect.signature(_run_options).parameters)[1:]


def _config_values(recipe: str, given: dict[str, Any]) -> dict[str, Any]:
    """The config flags' values as :class:`RecipeConfig` takes them: text parsed, ``none``
    words as ``None``, paths as text, and flags with a recipe default that were not given as
    the recipe's own default (else the field's)."""
    from gpuspark.train import recipes

    defaults = recipes.get_recipe(recipe).defaults
    out: dict[str, Any] = {}
    for name, (_, f) in flag_fields().items():
        if name not in given:
            continue
        value, meta = given[name], f.metadata
        if meta["recipe_default"] and value is None:
            if name in defaults:
                out[name] = defaults[name]
            continue
        out[name] = _from_flag(name, value, meta)
    return out


def _from_flag(name: str, value: Any, meta: Mapping[str, Any]) -> Any:
    """One flag's value as the config field takes it."""
    if value is None:
        return None
    if meta["none_word"] is not None and value == meta["none_word"]:
        return None
    if meta["path"]:
        return str(value)
    if meta["parse"] is not None:
        try:
            return meta["parse"](value)
        except ValueError as exc:
            flag = (meta["decls"] or (f"--{name.replace('_', '-')}",))[0]
            raise typer.BadParameter(f"{exc}, got {value!r}", param_hint=flag) from None
    return value


def _flag_parameter(name: str, f: dataclasses.Field[Any], hint: Any) -> inspect.Parameter:
    """The ``gpuspark train`` flag of the config field ``f`` (its metadata: :func:`option`)."""
    meta = f.metadata
    # a path flag takes text: it may be a URL (s3://b/run), which Path would fold to s3:/b/run
    kind = str if meta["path"] or meta["parse"] or meta["none_word"] else hint
    if meta["recipe_default"] or f.default is None or meta["parse"]:
        default: Any = None
        kind = kind | None
    elif f.default is dataclasses.MISSING:
        default = inspect.Parameter.empty
    else:
        default = f.default
    if meta["none_word"] is not None and default is None and f.default is not None:
        default = f.default
    flag = typer.Option(*meta["decls"], help=meta["cli"])
    annotation = Annotated[kind, flag]  # type: ignore[valid-type]
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def _flag_type(owner_cls: type, name: str) -> Any:
    """The field's type, without ``None`` (a flag not given is its default)."""
    hint = typing.get_type_hints(owner_cls)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if isinstance(hint, types.UnionType) and len(args) == 1 else hint


def _command() -> Any:
    """:func:`train` with a signature typer reads: the recipe, the config's flags (made from
    its fields, :func:`~gpuspark.train.recipes.config.flag_fields`), then the run options."""
    run = list(inspect.signature(_run_options, eval_str=True).parameters.values())
    config = []
    for name, (owner, f) in flag_fields().items():
        if not f.metadata.get("cli"):
            continue
        config.append(_flag_parameter(name, f, _flag_type(_owner_class(owner), name)))
    params = [run[0], *config, *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in run[1:])]
    params.append(
        inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
    )

    def command(ctx: typer.Context, **kwargs: Any) -> None:
        train(extra_args=list(ctx.args), **kwargs)

    command.__doc__ = train.__doc__
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def _owner_class(owner: str) -> type:
    from gpuspark.train.recipes.config import GROUPS
    from gpuspark.train.recipes.options import BUILTIN_OPTIONS

    if owner.startswith("recipe:"):
        return BUILTIN_OPTIONS[owner.removeprefix("recipe:")]
    return GROUPS[owner]


def _kept_on_interrupt(directory: str | None) -> str:
    """What a Ctrl-C leaves: the checkpoints there are now, or that there are none."""
    if directory is None:
        return "no checkpoints were written (no --checkpoint-dir)"
    from gpuspark.train.checkpoint_dir import latest

    try:
        newest = latest(directory)
    except Exception:  # a store that cannot be reached now: say nothing about its content
        newest = None
    if newest is None:
        return f"no checkpoint was written to {directory} yet (a new run starts over)"
    return f"checkpoints in {directory} are kept (--resume continues from {newest.name})"


def _print_summary(summary: TrainSummary) -> None:
    rows = []
    for m in summary.history:
        f = m["fractions"]
        rows.append(
            [
                m["epoch"],
                f"{m['loss']:.4f}",
                f"{m['samples_per_s']:.1f}",
                f"{f['data_wait']:.0%} / {f['compute']:.0%} / {f['comm_exposed']:.0%} / "
                f"{f['optimizer']:.0%}",
                f"{m['bytes_sent_per_step'] / 1e6:.3f} / {m['bytes_raw_per_step'] / 1e6:.3f}",
                _score(m),
            ]
        )
    print_table(
        f"{summary.recipe} on {summary.world_size} ranks ({summary.backend})",
        ["epoch", "loss", "samples/s", "data/compute/comm/opt", "MB sent/raw per step", "val"],
        rows,
    )
    best = summary.best
    if best:
        echo(f"best epoch {best.get('epoch')}: {_score(best)}")
    test = summary.test
    if test:
        scores = ", ".join(
            f"{k} {v:.3f}" for k, v in test.items() if isinstance(v, float) and k != "epoch"
        )
        echo(f"{test['split']} split ({test['samples']} samples, best model): {scores}")
    tracked = summary.tracking
    if tracked:
        echo(f"mlflow: run {tracked['run_id']} in {tracked['uri']}")
        if tracked.get("model_uri"):
            echo(f"mlflow: registered {tracked['model_uri']} (gpuspark predict ... --model it)")


def _score(m: dict[str, Any]) -> str:
    """The recipe's validation scores (``val_<metric>``) of an epoch or of the best one."""
    skip = {"val_samples", "val_s"}
    scores = [(k[4:], v) for k, v in m.items() if k.startswith("val_") and k not in skip]
    return ", ".join(f"{k} {v:.3f}" for k, v in scores if v is not None)


def register(app: typer.Typer) -> None:
    """Add ``gpuspark train``."""
    extra = {"allow_extra_args": True, "ignore_unknown_options": False}  # --mlflow's URI
    app.command("train", context_settings=extra)(_command())
