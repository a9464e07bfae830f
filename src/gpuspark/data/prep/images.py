"""The image job: an image folder ``src/<label>/<file>.{jpg,jpeg,png}`` to image shards.

Spark's ``binaryFile`` source lists the files (only ``path`` and ``length``; hidden files are
not listed); executor tasks read and convert them through the job's
:class:`~gpuspark.data.sources.ImageSource` (the header of a file is its class and relative
path, its sample key that path, one image a sample);
:func:`gpuspark.data.write.write_dataframe` writes them, balanced for the training world
size, with the quarantine table committed beside the shards.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from gpuspark._util.extras import check_extras
from gpuspark._util.spark_compat import sql_functions
from gpuspark.data.prep.common import (
    PrepResult,
    WriteOptions,
    by_reason,
    check_source,
    check_split,
    check_world,
    quarantine_table,
    record_batches,
    split_counts,
    task_count,
)
from gpuspark.data.prep.job import PrepRun, Where, run_prep
from gpuspark.data.prep.progress import Progress
from gpuspark.data.sources import (
    IMAGE_EXTENSIONS,
    SPLIT_NAMES,
    ImageOptions,
    ImageSource,
    Source,
    assign_split,
)
from gpuspark.errors import PrepError, QuarantineError

log = logging.getLogger(__name__)

__all__ = ["prep_images"]

_IMAGE_DDL = (
    "status string, id string, label int, label_name string, split string, image binary, "
    "format string, shape array<int>, width int, height int, path string, reason string, "
    "error_type string"
)


def prep_images(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    mode: str = "keep",
    size: int = 224,
    split: Sequence[float] | None = None,
    world_size: int | None = None,
    num_shards: int | None = None,
    overwrite: bool = False,
    compression: str | None = None,
    spark: Any = None,
    master: str | None = None,
    spec: Any = None,
    progress: Progress | None = None,
    team: str | None = None,
) -> PrepResult:
    """An image folder ``src/<label>/<file>.{jpg,jpeg,png}`` to an image dataset.

    ``mode``: ``keep`` (original bytes), ``resize`` (JPEG, shorter side = ``size``) or
    ``predecode`` (``size`` x ``size`` x 3 uint8). Labels are the sorted folder names
    (``extra["label_map"]``). ``split``: train/val[/test] fractions such as ``(0.9, 0.1)``,
    assigned by a stable hash of each file's path relative to ``src``; None: no splits.
    Checks made on the driver come before a cluster starts; a job that makes no record
    fails with :class:`PrepError` and commits nothing.
    ``team``: submit under that team of the spec (default: the user's team per ``members``;
    its queue, labels or caps, see :func:`gpuspark.quota.team.team_conf`).
    """

    t0 = time.monotonic()
    check_extras("prep images", ("PIL", "images"))
    src_s = check_source(src)
    check_world(world_size, num_shards)
    try:
        options = ImageOptions(mode=mode, size=size)
    except ValueError as exc:
        raise PrepError(str(exc)) from exc
    write = WriteOptions(check_split(split), world_size, num_shards, overwrite, compression)

    where = Where(spark, master, spec, team, progress, t0)
    source = ImageSource(src_s, options)
    return run_prep("images", source, dst, write, partial(_run_images, options=options), where)


def _list_classes(spark: Any, src: str, source: Source) -> tuple[Any, int, list[str]]:
    """The persisted file listing of ``src`` (path, length; contents are not read), its size,
    and the class names of its images; refuses an empty source.

    One Spark job that runs no Python: the listing counted per folder and per "has an image
    extension", with one path of each such group. A file's class depends on its folder and
    extension only (:func:`~gpuspark.data.sources.images.class_of`), so the header of that
    one path (``source.read_header``) names the class of its whole group; files off the
    layout are quarantined later, by the image tasks.
    """
    F = sql_functions(spark)
    reader = spark.read.format("binaryFile").option("recursiveFileLookup", "true")
    files = reader.load(src).select("path", "length").persist()
    image = "|".join(e.lstrip(".") for e in IMAGE_EXTENSIONS)
    groups = (
        files.groupBy(
            F.regexp_extract("path", r"^(.*)/[^/]*$", 1).alias("folder"),
            F.lower("path").rlike(rf"\.({image})$").alias("image"),
        )
        .agg(F.count(F.lit(1)).alias("files"), F.min("path").alias("path"))
        .collect()
    )
    n_files = sum(int(g["files"]) for g in groups)
    if n_files == 0:
        files.unpersist()
        raise PrepError(f"source {src} holds no files", remedy="check the path")
    names: set[str] = set()
    for g in groups:
        if g["image"]:
            with contextlib.suppress(QuarantineError):
                names.add(source.read_header(g["path"])[0])
    return files, n_files, sorted(names)


def _image_fn(
    source: Source, index: dict[str, int], split: Any, rows_acc: Any, q_acc: Any
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def images(batches: Iterator[Any]) -> Iterator[Any]:
        rows = (
            _one_image(path, source, index, split, rows_acc, q_acc)
            for batch in batches
            for path in batch.column("path").to_pylist()
        )
        return record_batches(rows, _IMAGE_DDL, 64)

    return images


def _one_image(
    path: str,
    source: Source,
    index: dict[str, int],
    split: Any,
    rows_acc: Any,
    q_acc: Any,
) -> dict[str, Any]:
    """One file through the source: its header names its class, its key is its id (and
    decides its split), its sample is the image."""
    rec: dict[str, Any] = {"path": path}
    try:
        header = source.read_header(path)
        name, key = header[0], source.sample_key(path, header)
        row = source.read_sample([path])
        img = row.pop("image")
        rec.update(row, status="ok", id=key, label=index[name], label_name=name)
        if hasattr(img, "shape"):
            rec.update(image=img.tobytes(), shape=list(img.shape))
        else:
            rec["image"] = img
        if split is not None:
            rec["split"] = assign_split(key, split)
        rows_acc.add(1)
    except Exception as e:
        qe = QuarantineError.wrap(e, "image failed", path)
        rec.update(status="quarantined", reason=qe.reason, error_type=qe.error_type)
        q_acc.add(1)
    return rec


def _image_sample(row: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from gpuspark.data.format import EncodedImage

    if row["format"] == "raw":
        image: Any = np.frombuffer(row["image"], dtype=np.uint8).reshape(row["shape"])
    else:
        image = EncodedImage(row["image"], row["format"])
    return {
        "image": image,
        "label": int(row["label"]),
        "label_name": row["label_name"],
        "id": row["id"],
        "width": int(row["width"]),
        "height": int(row["height"]),
    }


def _images_extra(
    src: str, options: Any, fractions: Any, label_map: dict[str, str], n_files: int, q_rows: list
) -> dict[str, Any]:
    return {
        "prep": {
            "kind": "images",
            "source": src,
            "mode": options.mode,
            "size": options.size,
            "split": list(fractions) if fractions else None,
            "split_by": "relative path",
        },
        "label_map": label_map,
        "quarantine": {
            "inputs": n_files,
            "rows": n_files - len(q_rows),
            "files": len(q_rows),
            "by_reason": by_reason(q_rows),
        },
    }


def _run_images(run: PrepRun, spark: Any, options: ImageOptions) -> PrepResult:
    from pyspark import StorageLevel

    from gpuspark.data.write import write_dataframe

    F = sql_functions(spark)

    source, src, fractions = run.require_source(), run.src, run.write.fractions
    with run.watching(spark) as watch:
        files, n_files, names = _list_classes(spark, src, source)
        if not names:
            files.unpersist()
            raise PrepError(
                f"source {src} has no class folders with images",
                remedy="use the layout SRC/<label>/<file>.jpg",
            )
        index = {n: i for i, n in enumerate(names)}
        watch.phase = "images"
        fn = _image_fn(source, index, fractions, *run.counters.values())
        out = (
            files.repartition(task_count(spark, n_files, 32))
            .mapInArrow(fn, _IMAGE_DDL)
            .persist(StorageLevel.DISK_ONLY)
        )
        try:
            q_rows = [
                {**r.asDict(), "series_uid": None, "stage": "image"}
                for r in out.filter(F.col("status") == "quarantined")
                .select("path", "reason", "error_type")
                .collect()
            ]
            run.counted(rows=n_files - len(q_rows), quarantined=len(q_rows))
            run.check_outcome(n_files, n_files - len(q_rows), q_rows)
            watch.phase = "write"
            label_map = {str(i): n for n, i in index.items()}
            manifest = write_dataframe(
                out.filter(F.col("status") == "ok").drop("status", "reason", "error_type", "path"),
                run.root,
                **run.write_args(),
                extra=_images_extra(src, options, fractions, label_map, n_files, q_rows),
                sample_fn=_image_sample,
                files=quarantine_table(q_rows),
            )
        finally:
            out.unpersist()
            files.unpersist()
    _warn_empty_splits(src, fractions, split_counts(manifest))
    return run.result(
        manifest,
        inputs=n_files,
        files_in_rows=manifest.total_records,
        q_rows=q_rows,
        label_map=label_map,
    )


def _warn_empty_splits(src: str, fractions: Any, counts: dict[str, int]) -> None:
    """A split asked for that got no image (a small folder): training needs ``val``."""

    empty = [n for n, f in zip(SPLIT_NAMES, fractions or (), strict=False) if f and n not in counts]
    if empty:
        log.warning(
            "prep images of %s: split %s got no images (fractions %s, by a hash of each path); "
            "add images or change the split",
            src,
            ", ".join(empty),
            ",".join(f"{f:g}" for f in fractions),
        )
