"""``gpuspark prep``: image folders, DICOM series, Parquet tables and text to training shards,
on Spark."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Annotated, Any

import typer

from gpuspark.cli._common import (
    SPLIT_FORM,
    ConfOpt,
    JsonOpt,
    MasterOpt,
    SpecOpt,
    deprecated,
    new_app,
    parse_numbers,
    parse_split,
    print_json,
    print_table,
    spec_with_conf,
)
from gpuspark.data.checks import WINDOW_NAMES  # window presets and raw HU; no numpy

SrcArg = Annotated[str, typer.Argument(help="Source folder (or URL Spark can read).")]
DstArg = Annotated[str, typer.Argument(help="Dataset directory to write.")]
WorldOpt = Annotated[
    int | None, typer.Option("--world-size", min=1, help="Balance shards for this many ranks.")
]
ShardsOpt = Annotated[int | None, typer.Option("--num-shards", min=1, help="Shards per split.")]
TeamOpt = Annotated[
    str | None,
    typer.Option(
        "--team",
        help="Submit under this team of the spec (its queue or caps) [default: your team "
        "per the spec's members].",
    ),
]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace an existing dataset.")]


def register(app: typer.Typer) -> None:
    """Add the ``prep`` command group to ``app``."""
    prep = new_app(help="Preprocess raw data into shards with Spark.", no_args_is_help=True)
    prep.command("images")(images)
    prep.command("dicom")(dicom)
    prep.command("parquet")(parquet)
    prep.command("text")(text)
    app.add_typer(prep, name="prep")


@contextmanager
def _progress_bar(enabled: bool) -> Any:
    """A rich progress bar fed by the job's progress callback (tasks done / total)."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("tasks  {task.fields[rows]} rows ({task.fields[rate]:.1f}/s)"),
        TextColumn("{task.fields[quarantined]} quarantined"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        # The job's first update ("starting Spark") replaces this at once.
        task = bar.add_task("starting", total=None, rows=0, rate=0.0, quarantined=0)

        def update(info: dict[str, Any]) -> None:
            bar.update(
                task,
                description=info["phase"],
                completed=info["tasks_done"],
                total=info["tasks_total"] or None,  # no task yet: "0/?", not "0/1"
                rows=info["rows"],
                rate=info["rows_per_s"],
                quarantined=info["quarantined"],
            )

        try:
            yield update
        except KeyboardInterrupt:  # the bar's last line says so, then stops cleanly
            bar.update(task, description="interrupted")
            raise


def _triple(text: str | None, kind: type, option: str) -> Any:
    what = "integers" if kind is int else "numbers"
    form = f"three positive {what} z,y,x (e.g. {'32,48,48' if kind is int else '1,0.8,0.8'})"
    out = parse_numbers(text, kind, 3, option, form)
    if out is not None and min(out) <= 0:
        raise typer.BadParameter(f"expected {form}, got {text!r}", param_hint=option)
    return out


def _split(text: str, option: str = "--split") -> Any:
    return parse_split(text, option)


def _codec(codec: str | None, compression: str | None) -> str | None:
    """``--codec``, or the deprecated ``--compression`` of ``prep parquet`` (a name that means
    gradient compression everywhere else)."""
    if compression is None:
        return codec
    if codec is not None:
        raise typer.BadParameter("give --codec only (--compression is its old name)")
    deprecated(f"prep parquet --compression {compression}", f"--codec {compression}")
    return compression


def _window(text: str) -> Any:
    """A preset name as is (the library names close misses); ``L,W`` -> ``(level, width)``."""
    if text.lower() in WINDOW_NAMES or "," not in text:
        return text
    return parse_numbers(text, float, 2, "--window", "a preset or LEVEL,WIDTH such as 40,400")


def _summary(res: Any, json: bool) -> None:
    if json:
        print_json(res.as_dict())
        return
    # a table's inputs are rows; the file jobs quarantine files (a DICOM file holds items)
    unit = "rows" if res.kind == "parquet" else "files"
    if res.kind == "text":
        unit = "documents"
    quarantined = (
        f"{res.quarantined} rows"
        if unit == "rows"
        else f"{res.quarantined} files ({res.quarantined_items} items)"
    )
    print_table(
        f"prep {res.kind} -> {res.dataset}",
        ["inputs", "rows", "quarantined", "splits", "shards", "bytes", "seconds"],
        [
            [
                res.inputs,
                res.rows,
                quarantined,
                ", ".join(f"{k}={v}" for k, v in sorted(res.splits.items())) or "-",
                res.shards,
                res.bytes,
                res.seconds,
            ]
        ],
    )
    if res.by_reason:
        print_table(
            f"quarantine (see {res.quarantine_path})",
            ["reason", unit],
            list(res.by_reason.items()),
        )


def images(
    src: SrcArg,
    dst: DstArg,
    size: Annotated[
        int, typer.Option(help="Shorter side (resize) or square side (predecode).")
    ] = 224,
    predecode: Annotated[
        bool, typer.Option(help="Store decoded SIZE x SIZE x 3 uint8 arrays.")
    ] = False,
    resize: Annotated[
        bool, typer.Option(help="Re-encode as JPEG with the shorter side = SIZE.")
    ] = False,
    split: Annotated[
        str, typer.Option(help=f"Split by a hash of the path: {SPLIT_FORM}.")
    ] = "train=0.9,val=0.1",
    world_size: WorldOpt = None,
    num_shards: ShardsOpt = None,
    overwrite: OverwriteOpt = False,
    master: MasterOpt = None,
    spec: SpecOpt = None,
    conf: ConfOpt = None,
    team: TeamOpt = None,
    json: JsonOpt = False,
) -> None:
    """Image folder SRC/<label>/<file>.{jpg,png} to shards (original bytes by default)."""
    from gpuspark.data.prep import prep_images

    mode = "predecode" if predecode else "resize" if resize else "keep"
    fractions = _split(split)
    with _progress_bar(not json) as progress:
        res = prep_images(
            src,
            dst,
            mode=mode,
            size=size,
            split=fractions,
            world_size=world_size,
            num_shards=num_shards,
            overwrite=overwrite,
            master=master,
            spec=spec_with_conf(spec, conf),
            progress=progress,
            team=team,
        )
    _summary(res, json)


def dicom(
    src: SrcArg,
    dst: DstArg,
    labels: Annotated[
        str | None, typer.Option(help="CSV with series_uid or patient_id, label.")
    ] = None,
    spacing: Annotated[str | None, typer.Option(help="Target voxel spacing z,y,x in mm.")] = None,
    shape: Annotated[str | None, typer.Option(help="Target shape z,y,x in voxels.")] = None,
    window: Annotated[
        str, typer.Option(help="soft-tissue, lung, bone, LEVEL,WIDTH or hu.")
    ] = "soft-tissue",
    dtype: Annotated[str, typer.Option(help="Windowed output type: uint8 or float16.")] = "uint8",
    split: Annotated[
        str, typer.Option(help=f"Split by patient: {SPLIT_FORM}.")
    ] = "train=0.8,val=0.1,test=0.1",
    world_size: WorldOpt = None,
    num_shards: ShardsOpt = None,
    overwrite: OverwriteOpt = False,
    master: MasterOpt = None,
    spec: SpecOpt = None,
    conf: ConfOpt = None,
    team: TeamOpt = None,
    json: JsonOpt = False,
) -> None:
    """DICOM series below SRC (any names, nested folders) to one 3D volume per series."""
    from gpuspark.data.prep import prep_dicom

    spacing_t = _triple(spacing, float, "--spacing")
    shape_t = _triple(shape, int, "--shape")
    window_v = _window(window)
    fractions = _split(split)
    with _progress_bar(not json) as progress:
        res = prep_dicom(
            src,
            dst,
            labels=labels,
            spacing=spacing_t,
            shape=shape_t,
            window=window_v,
            dtype=dtype,
            split=fractions,
            world_size=world_size,
            num_shards=num_shards,
            overwrite=overwrite,
            master=master,
            spec=spec_with_conf(spec, conf),
            progress=progress,
            team=team,
        )
    _summary(res, json)


def _names(text: str | None, option: str) -> tuple[str, ...] | None:
    """``"a,b,c"`` -> column names; an empty name is a usage error."""
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise typer.BadParameter(f"expected column names a,b,c, got {text!r}", param_hint=option)
    return names


def parquet(
    src: Annotated[str, typer.Argument(help="Parquet file or folder (or URL Spark can read).")],
    dst: DstArg,
    label: Annotated[str, typer.Option(help="Class label column (at most 100 values).")],
    id: Annotated[
        str | None, typer.Option("--id", help="Entity column: splits by its hash.")
    ] = None,
    features: Annotated[
        str | None, typer.Option(help="Feature columns a,b,c [default: all but label and id].")
    ] = None,
    categorical: Annotated[
        str | None,
        typer.Option(help="Categorical columns a,b [default: the string and boolean features]."),
    ] = None,
    split: Annotated[
        str, typer.Option(help=f"Split by a hash of the id: {SPLIT_FORM}.")
    ] = "train=0.8,val=0.1,test=0.1",
    world_size: WorldOpt = None,
    num_shards: ShardsOpt = None,
    block_rows: Annotated[int, typer.Option(min=1, help="Rows per record (block).")] = 4096,
    max_vocab: Annotated[
        int, typer.Option(min=1, help="Most frequent values kept per categorical column.")
    ] = 1000,
    overwrite: OverwriteOpt = False,
    codec: Annotated[str | None, typer.Option(help="Record codec: zstd [default: none].")] = None,
    compression: Annotated[
        str | None,
        typer.Option(hidden=True, help="Deprecated: the record codec; use --codec."),
    ] = None,
    master: MasterOpt = None,
    spec: SpecOpt = None,
    conf: ConfOpt = None,
    team: TeamOpt = None,
    json: JsonOpt = False,
) -> None:
    """Parquet table to a tabular dataset: numeric and categorical features, statistics."""
    from gpuspark.data.prep import prep_parquet

    feature_names = _names(features, "--features")
    categorical_names = _names(categorical, "--categorical")
    fractions = _split(split)
    with _progress_bar(not json) as progress:
        res = prep_parquet(
            src,
            dst,
            label=label,
            id=id,
            features=feature_names,
            categorical=categorical_names,
            split=fractions,
            world_size=world_size,
            num_shards=num_shards,
            block_rows=block_rows,
            max_vocab=max_vocab,
            overwrite=overwrite,
            compression=_codec(codec, compression),
            master=master,
            spec=spec_with_conf(spec, conf),
            progress=progress,
            team=team,
        )
    _summary(res, json)


def text(
    src: Annotated[
        str,
        typer.Argument(help="Folder of .txt files, one .txt file, or Parquet (with --column)."),
    ],
    dst: DstArg,
    column: Annotated[
        str | None, typer.Option(help="Parquet source: the text column (one document a row).")
    ] = None,
    id: Annotated[
        str | None,
        typer.Option("--id", help="Parquet: document id column (default: a hash of the text)."),
    ] = None,
    vocab_size: Annotated[int, typer.Option(min=100, help="WordPiece vocabulary size.")] = 8000,
    seq_len: Annotated[int, typer.Option(min=8, help="Tokens per sequence.")] = 128,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="Folder with tokenizer.json to use instead of training one."),
    ] = None,
    sample_lines: Annotated[
        int, typer.Option(min=1, help="Lines (at most) the tokenizer is trained on.")
    ] = 100_000,
    split: Annotated[
        str,
        typer.Option(help=f"Split by a hash of the document id: {SPLIT_FORM}, or none."),
    ] = "train=0.95,val=0.05",
    world_size: WorldOpt = None,
    num_shards: ShardsOpt = None,
    overwrite: OverwriteOpt = False,
    master: MasterOpt = None,
    spec: SpecOpt = None,
    conf: ConfOpt = None,
    team: TeamOpt = None,
    json: JsonOpt = False,
) -> None:
    """Text to token sequences for masked-LM training: trains a WordPiece tokenizer on the
    corpus (saved with the dataset), tokenises on Spark, packs [CLS] ... [SEP] sequences."""
    from gpuspark.data.prep import prep_text

    fractions = parse_split(split, allow_none=True)
    with _progress_bar(not json) as progress:
        res = prep_text(
            src,
            dst,
            column=column,
            id=id,
            vocab_size=vocab_size,
            seq_len=seq_len,
            tokenizer=tokenizer,
            sample_lines=sample_lines,
            split=fractions,
            world_size=world_size,
            num_shards=num_shards,
            overwrite=overwrite,
            master=master,
            spec=spec_with_conf(spec, conf),
            progress=progress,
            team=team,
        )
    _summary(res, json)
