"""``gpuspark train RECIPE --data SHARDS``: a ready recipe on N ranks through the launcher."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuspark.cli._common import (
    JsonOpt,
    MasterOpt,
    SpecOpt,
    echo,
    on_interrupt,
    parse_numbers,
    print_json,
    print_table,
)

if TYPE_CHECKING:
    from gpuspark.train.recipes import TrainSummary


def train(
    recipe: Annotated[
        str,
        typer.Argument(
            help="Recipe: resnet3d (CT volumes), resnet2d (images), tabular "
            "(tables from `gpuspark prep parquet`) or bert (text from `gpuspark prep text`)."
        ),
    ],
    data: Annotated[Path, typer.Option("--data", help="Dataset written by `gpuspark prep`.")],
    epochs: Annotated[
        int | None, typer.Option(help="Passes over the training split [default: 10].")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Batch size per rank [default: 8; tabular: 512].")
    ] = None,
    lr: Annotated[
        float | None, typer.Option(help="AdamW learning rate, cosine schedule [default: 1e-3].")
    ] = None,
    strategy: Annotated[
        str,
        typer.Option(
            help="ddp (full replicas), fsdp (each rank holds a shard of the model state) or "
            "hsdp (sharded within a node, replicated across nodes)."
        ),
    ] = "ddp",
    compression: Annotated[
        str | None,
        typer.Option(help="Gradient compression (ddp only): fp16, bf16 or powersgd."),
    ] = None,
    powersgd_rank: Annotated[int, typer.Option(help="PowerSGD matrix rank.")] = 2,
    amp: Annotated[str | None, typer.Option(help="Mixed precision: bf16 or fp16.")] = None,
    depth: Annotated[int, typer.Option(help="resnet3d depth: 10, 18, 34 or 50.")] = 18,
    width: Annotated[float, typer.Option(help="Channel width multiplier (MONAI).")] = 1.0,
    stem_stride: Annotated[int, typer.Option(help="resnet3d first-conv stride (1 or 2).")] = 1,
    window: Annotated[
        str | None, typer.Option(help="resnet3d re-window LEVEL,WIDTH in HU (e.g. 100,100).")
    ] = None,
    hidden: Annotated[int, typer.Option(help="tabular: hidden units per MLP layer.")] = 128,
    layers: Annotated[int, typer.Option(help="tabular: hidden layers of the MLP.")] = 2,
    dropout: Annotated[float, typer.Option(help="tabular, bert: dropout after each layer.")] = 0.1,
    size: Annotated[
        str, typer.Option(help="bert: encoder size tiny, small, base or large.")
    ] = "tiny",
    class_weights: Annotated[
        bool, typer.Option(help="tabular: weight the loss by inverse class frequency.")
    ] = True,
    num_processes: Annotated[
        int, typer.Option("--num-processes", "-n", help="Training processes (ranks).", min=1)
    ] = 2,
    gpus_per_process: Annotated[float, typer.Option(help="GPUs per rank.")] = 1,
    local: Annotated[
        bool, typer.Option(help="Run ranks as local processes, not on Spark.")
    ] = False,
    checkpoint_dir: Annotated[
        Path | None, typer.Option(help="Checkpoints (every epoch), best.pt, history.json.")
    ] = None,
    checkpoint_every: Annotated[int, typer.Option(help="Also every N steps (0: off).")] = 0,
    resume: Annotated[bool, typer.Option(help="Continue from the newest checkpoint.")] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Start a new run in a --checkpoint-dir that holds an earlier one (its "
            "checkpoints, best.pt and history.json are removed; other files stay).",
        ),
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
    threads: Annotated[int | None, typer.Option(help="torch threads per rank.")] = None,
    train_split: Annotated[
        str, typer.Option(help="Split to train on; 'all': every record (no splits).")
    ] = "train",
    val_split: Annotated[
        str, typer.Option(help="Split scored after each epoch; 'none': no validation.")
    ] = "val",
    test_split: Annotated[
        str | None,
        typer.Option(help="Split scored once at the end with the best model (e.g. test)."),
    ] = None,
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
    json_out: JsonOpt = False,
) -> None:
    """Train a recipe with DDP or FSDP on the cluster (embedded one by default); rank 0 logs
    epochs."""
    from gpuspark.train import recipes

    on_interrupt(lambda: _kept_on_interrupt(checkpoint_dir))
    given = {"epochs": epochs, "batch_size": batch_size, "lr": lr}
    cfg = recipes.RecipeConfig(
        data=str(data),
        **_with_recipe_defaults(recipe, given),
        strategy=strategy,
        compression=compression,
        powersgd_rank=powersgd_rank,
        amp=amp,
        depth=depth,
        width=width,
        stem_stride=stem_stride,
        window=_window(window),
        hidden=hidden,
        layers=layers,
        dropout=dropout,
        class_weights=class_weights,
        size=size,
        threads=threads,
        checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None,
        checkpoint_every=checkpoint_every,
        resume=resume,
        overwrite=overwrite,
        train_split=None if train_split == "all" else train_split,
        val_split=None if val_split == "none" else val_split,
        test_split=test_split,
    )
    summary = recipes.run(
        recipe,
        cfg,
        num_processes=num_processes,
        gpus_per_process=gpus_per_process,
        master=master,
        spec=spec,
        local=local,
        team=team,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        max_restarts=max_restarts,
        max_attempts=max_attempts,
    )
    if json_out:
        print_json(summary.as_dict())
        return
    _print_summary(summary)


def _kept_on_interrupt(directory: Path | None) -> str:
    """What a Ctrl-C leaves: the checkpoints there are now, or that there are none."""
    if directory is None:
        return "no checkpoints were written (no --checkpoint-dir)"
    from gpuspark.train.checkpoint_dir import latest

    newest = latest(directory) if directory.is_dir() else None
    if newest is None:
        return f"no checkpoint was written to {directory} yet (a new run starts over)"
    return f"checkpoints in {directory} are kept (--resume continues from {newest.name})"


def _with_recipe_defaults(recipe: str, given: dict[str, Any]) -> dict[str, Any]:
    """The options given, else the recipe's own defaults, else :class:`RecipeConfig`'s."""
    from gpuspark.train import recipes

    defaults = recipes.get_recipe(recipe).defaults
    out = {k: defaults[k] for k in given if k in defaults}
    out.update({k: v for k, v in given.items() if v is not None})
    return out


def _window(text: str | None) -> tuple[float, float] | None:
    """``LEVEL,WIDTH`` in HU: the training-time re-window of prepared uint8 volumes."""
    form = "LEVEL,WIDTH in HU with WIDTH > 0, e.g. 100,100"
    pair = parse_numbers(text, float, 2, "--window", form)
    if pair is not None and pair[1] <= 0:
        raise typer.BadParameter(f"expected {form}, got {text!r}", param_hint="--window")
    return None if pair is None else (pair[0], pair[1])


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


def _score(m: dict[str, Any]) -> str:
    """The recipe's validation scores (``val_<metric>``) of an epoch or of the best one."""
    skip = {"val_samples", "val_s"}
    scores = [(k[4:], v) for k, v in m.items() if k.startswith("val_") and k not in skip]
    return ", ".join(f"{k} {v:.3f}" for k, v in scores if v is not None)


def register(app: typer.Typer) -> None:
    """Add ``gpuspark train``."""
    app.command("train")(train)
