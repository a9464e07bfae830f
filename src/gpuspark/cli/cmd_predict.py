"""``gpuspark predict``: score a table with a trained model as a Spark job
(:func:`gpuspark.infer.predict`)."""

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
    src: Annotated[str, typer.Argument(help="Parquet file or folder (or URL Spark can read).")],
    model: Annotated[
        str, typer.Option("--model", help="best.pt of a `train tabular` run, or its folder.")
    ],
    output: Annotated[
        str, typer.Option("-o", "--output", help="Folder to write the predictions (Parquet).")
    ],
    id: Annotated[
        str | None,
        typer.Option("--id", help="Column kept with the predictions [default: every non-feature]."),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Rows per model call.")
    ] = 4096,
    partitions: Annotated[
        int | None,
        typer.Option(min=1, help="Repartition the input into N tasks [default: as read]."),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace earlier predictions in the folder.")
    ] = False,
    master: MasterOpt = None,
    spec: SpecOpt = None,
    team: Annotated[
        str | None, typer.Option("--team", help="Submit under this team of the spec.")
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Score a table with a trained model on Spark: prob_<class> and prediction per row."""
    from gpuspark.infer import predict as run_predict

    on_interrupt(lambda: f"nothing was written; {output}, if it held predictions, is unchanged")
    with _progress_bar(not json) as progress:
        res = run_predict(
            src,
            model,
            output,
            id=id,
            batch_size=batch_size,
            partitions=partitions,
            overwrite=overwrite,
            master=master,
            spec=spec,
            team=team,
            progress=progress,
        )
    if json:
        print_json(res.as_dict())
        return
    loads = (
        f"{res.loads_per_worker:.2f} ({res.model_loads} loads, {res.workers} workers, "
        f"{res.tasks} tasks)"
    )
    print_table(
        f"predict -> {res.output}",
        ["rows", "quarantined", "rows/s", "seconds", "model loads per worker"],
        [[res.rows, res.quarantined, f"{res.rows_per_s:,.0f}", res.seconds, loads]],
    )
    if res.by_reason:
        print_table(
            f"quarantine (see {res.quarantine})", ["reason", "rows"], list(res.by_reason.items())
        )
