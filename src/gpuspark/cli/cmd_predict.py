"""``gpuspark predict``: score a table, or new DICOM studies (``gpuspark predict dicom
STUDIES``), with a trained model as a Spark job (:func:`gpuspark.infer.predict`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from gpuspark.cli._common import (
    JsonOpt,
    MasterOpt,
    SpecOpt,
    on_interrupt,
    print_json,
    print_table,
)


def register(app: typer.Typer) -> None:
    """Add the ``predict`` command to ``app``."""
    app.command("predict")(predict)


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Any]:
    """A rich progress line fed by the job's progress callback (tasks, rows, rows/s), shown
    from the first report on: checks that fail before the job print their line alone."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("tasks  {task.fields[rows]} rows ({task.fields[rate]:.0f}/s)"),
        TextColumn("{task.fields[quarantined]} quarantined"),
        TimeElapsedColumn(),
    )
    bar = Progress(*columns, transient=False)
    task = bar.add_task("starting", total=None, rows=0, rate=0.0, quarantined=0)

    def update(info: dict[str, Any]) -> None:
        if not bar.live.is_started:
            bar.start()
        bar.update(
            task,
            description=info["phase"],
            completed=info["tasks_done"],
            total=info["tasks_total"] or None,
            rows=info["rows"],
            rate=info["rows_per_s"],
            quarantined=info["quarantined"],
        )

    try:
        yield update
    finally:
        if bar.live.is_started:
            bar.stop()


def predict(
    src: Annotated[
        str,
        typer.Argument(
            help="Parquet file or folder (or URL Spark can read); or the word `dicom`, "
            "then STUDIES.",
            metavar="SRC",
        ),
    ],
    studies: Annotated[
        str | None,
        typer.Argument(help="After `dicom`: a folder of DICOM studies.", metavar="STUDIES"),
    ] = None,
    *,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="best.pt of a `train tabular` (tables) or `train resnet3d` run, or an MLflow "
            "model URI (models:/NAME/VERSION, runs:/RUN_ID/model) of `train --mlflow`.",
        ),
    ],
    output: Annotated[
        str, typer.Option("-o", "--output", help="Folder to write the predictions (Parquet).")
    ],
    id: Annotated[
        str | None,
        typer.Option("--id", help="Column kept with the predictions [default: every non-feature]."),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size", min=1, help="Rows (volumes) per model call [default: 4096; dicom: 8]."
        ),
    ] = None,
    partitions: Annotated[
        int | None,
        typer.Option(min=1, help="Tasks: repartition the input into N [default: as read]."),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace earlier predictions in the folder.")
    ] = False,
    master: MasterOpt = None,
    spec: SpecOpt = None,
    team: Annotated[
        str | None, typer.Option("--team", help="Submit under this team of the spec.")
    ] = None,
    mlflow: Annotated[
        str | None,
        typer.Option(
            "--mlflow",
            metavar="URI",
            help="MLflow store a models:/ or runs:/ --model is found in [default: "
            "MLFLOW_TRACKING_URI, else ./mlruns].",
        ),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Score a table (or DICOM studies) with a trained model on Spark: prob_<class> and
    prediction per row (per series)."""
    from gpuspark.infer import predict as run_predict

    kind, source = _input(src, studies)
    on_interrupt(lambda: f"nothing was written; {output}, if it held predictions, is unchanged")
    with _progress_bar(not json) as progress:
        res = run_predict(
            source,
            model,
            output,
            kind=kind,
            id=id,
            batch_size=batch_size,
            partitions=partitions,
            overwrite=overwrite,
            master=master,
            spec=spec,
            team=team,
            progress=progress,
            mlflow=mlflow,
        )
    if json:
        print_json(res.as_dict())
        return
    _print_result(res)


def _input(src: str, studies: str | None) -> tuple[str | None, str]:
    """``(kind, source)``: ``dicom STUDIES`` or a table ``SRC``."""
    from gpuspark.errors import GpusparkError

    if src == "dicom":
        if studies is None:
            raise GpusparkError(
                "predict dicom needs the folder of DICOM studies",
                remedy="gpuspark predict dicom STUDIES --model best.pt -o OUT",
            )
        return "dicom", studies
    if studies is not None:
        raise GpusparkError(
            f"predict takes one input, got {src!r} and {studies!r}",
            remedy="gpuspark predict TABLE ... or gpuspark predict dicom STUDIES ...",
        )
    return None, src


def _print_result(res: Any) -> None:
    loads = (
        f"{res.loads_per_worker:.2f} ({res.model_loads} loads, {res.workers} workers, "
        f"{res.tasks} tasks)"
    )
    unit = "series" if res.input == "dicom" else "rows"
    print_table(
        f"predict -> {res.output}",
        [unit, "quarantined", f"{unit}/s", "seconds", "model loads per worker"],
        [[res.rows, res.quarantined, f"{res.rows_per_s:,.1f}", res.seconds, loads]],
    )
    if res.by_reason:
        print_table(
            f"quarantine (see {res.quarantine})", ["reason", "rows"], list(res.by_reason.items())
        )
