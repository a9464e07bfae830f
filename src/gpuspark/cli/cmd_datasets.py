"""``gpuspark datasets``: demo data (synthetic CT cohort as DICOM, JPEG image folders, a
credit-risk table as Parquet, a real English text corpus from CPython's help topics)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from gpuspark.cli._common import JsonOpt, MasterOpt, new_app, print_json, print_table

DstArg = Annotated[str, typer.Argument(help="Directory to create.")]
SeedOpt = Annotated[int, typer.Option(help="Random seed (same seed, same files).")]
OverwriteOpt = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace DST when it is an earlier output of a datasets command, holding only the "
        "files it wrote; any other folder is refused.",
    ),
]


def register(app: typer.Typer) -> None:
    """Add the ``datasets`` command group to ``app``."""
    ds = new_app(help="Generate demo data sets.", no_args_is_help=True)
    ds.command("synth-ct")(synth_ct)
    ds.command("synth-images")(synth_images)
    ds.command("synth-risk")(synth_risk)
    ds.command("pydoc-text")(pydoc_text)
    app.add_typer(ds, name="datasets")


def synth_ct(
    dst: DstArg,
    studies: Annotated[
        int, typer.Option(help="Number of studies (one CT series each).", min=1)
    ] = 20,
    seed: SeedOpt = 0,
    size: Annotated[int, typer.Option(help="Rows and columns per slice.", min=8)] = 96,
    overwrite: OverwriteOpt = False,
    json: JsonOpt = False,
) -> None:
    """Synthetic CT cohort: DST/dicom/ series, DST/labels.csv (1 = lesion), DST/cohort.json."""
    from gpuspark import demo

    res = demo.synth_ct(dst, studies, seed, size=size, overwrite=overwrite)
    if json:
        print_json(asdict(res))
        return
    print_table(
        f"synthetic CT cohort -> {res.path}",
        ["studies", "patients", "lesions", "files", "bytes", "labels"],
        [[res.studies, res.patients, res.lesions, res.files, res.bytes, res.labels_csv]],
    )


def synth_images(
    dst: DstArg,
    classes: Annotated[int, typer.Option(help="Number of classes (folders).", min=1)] = 4,
    per_class: Annotated[int, typer.Option(help="Images per class.", min=1)] = 25,
    seed: SeedOpt = 0,
    overwrite: OverwriteOpt = False,
    json: JsonOpt = False,
) -> None:
    """Image folder DST/<class>/<file>.jpg|png with one shape and hue per class."""
    from gpuspark import demo

    res = demo.synth_images(dst, classes, per_class, seed, overwrite=overwrite)
    if json:
        print_json(asdict(res))
        return
    print_table(
        f"synthetic images -> {res.path}",
        ["classes", "images", "bytes"],
        [[len(res.classes), res.images, res.bytes]],
    )


def synth_risk(
    dst: Annotated[str, typer.Argument(help="Parquet folder to create.")],
    rows: Annotated[int, typer.Option(min=1, help="Rows (monthly snapshots) to generate.")] = (
        100_000
    ),
    seed: SeedOpt = 0,
    partitions: Annotated[
        int | None,
        typer.Option(min=1, help="Spark partitions (Parquet files) [default: rows/250k]."),
    ] = None,
    bad_rows: Annotated[
        float,
        typer.Option(
            "--bad-rows", min=0.0, max=0.99, help="Fraction of rows with a value prep quarantines."
        ),
    ] = 0.0,
    overwrite: OverwriteOpt = False,
    master: MasterOpt = None,
    json: JsonOpt = False,
) -> None:
    """Synthetic credit-risk table (about 3% defaults) written as Parquet by Spark."""
    from gpuspark import demo

    res = demo.synth_risk(
        dst,
        rows,
        seed,
        partitions=partitions,
        overwrite=overwrite,
        bad_rows=bad_rows,
        master=master,
    )
    if json:
        print_json(asdict(res))
        return
    print_table(
        f"synthetic credit-risk table -> {res.path}",
        ["rows", "customers", "positives", "positive rate", "files", "bytes", "seconds"],
        [
            [
                res.rows,
                res.customers,
                res.positives,
                f"{res.positive_rate:.2%}",
                res.files,
                res.bytes,
                res.seconds,
            ]
        ],
    )


def pydoc_text(
    dst: DstArg,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Only the first N topics [default: all].")
    ] = None,
    overwrite: OverwriteOpt = False,
    json: JsonOpt = False,
) -> None:
    """CPython's help topics (pydoc_data.topics, real English, offline) as DST/<topic>.txt."""
    from gpuspark import demo

    res = demo.pydoc_text(dst, limit=limit, overwrite=overwrite)
    if json:
        print_json(asdict(res))
        return
    print_table(
        f"pydoc help topics -> {res.path}",
        ["files", "words", "bytes", "seconds"],
        [[res.files, res.words, res.bytes, res.seconds]],
    )
