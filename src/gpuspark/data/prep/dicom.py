"""The DICOM job: files below a folder (any names, nested, mixed series) to volume shards.

A :class:`~gpuspark.data.sources.DicomSource` (a header per file, one sample per series, split
by patient) run by the grouped body (:mod:`gpuspark.data.prep.grouped`): tasks list the files
and read their headers, then one task per planned shard assembles its series one at a time
and writes them. This module checks the options and says what of a series is written and
what the manifest records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from gpuspark._util.extras import check_extras
from gpuspark.data.checks import zyx
from gpuspark.data.prep.common import (
    PrepResult,
    WriteOptions,
    by_reason,
    check_source,
    check_split,
    check_world,
    read_label_table,
)
from gpuspark.data.prep.grouped import GroupedJob, run_grouped
from gpuspark.data.prep.headers import HEADER_ERROR
from gpuspark.data.prep.job import Where, run_prep
from gpuspark.data.prep.progress import Progress
from gpuspark.data.sources import DicomOptions, DicomSource, Window, parse_window
from gpuspark.errors import PrepError, WindowError

__all__ = ["prep_dicom"]


def prep_dicom(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    labels: str | os.PathLike[str] | None = None,
    spacing: Sequence[float] | None = None,
    shape: Sequence[int] | None = None,
    window: Window | tuple[float, float] | str | None = "soft-tissue",
    dtype: str = "uint8",
    split: Sequence[float] | None = (0.8, 0.1, 0.1),
    world_size: int | None = None,
    num_shards: int | None = None,
    min_slices: int = 3,
    salt: str = "",
    overwrite: bool = False,
    compression: str | None = None,
    spark: Any = None,
    master: str | None = None,
    spec: Any = None,
    progress: Progress | None = None,
    team: str | None = None,
) -> PrepResult:
    """DICOM files below ``src`` (any names, nested folders, mixed series) to a volume dataset.

    One sample per series: ``volume`` (``(z, y, x)``, uint8/float16 windowed or int16 HU),
    ``label`` (from the ``labels`` CSV, keyed by series UID or patient id), hashed patient id,
    UIDs, modality, original and output spacing/shape. ``spacing`` (mm) and ``shape``
    (voxels) are ``(z, y, x)``; ``window`` is a preset name (``soft-tissue``, ``lung``,
    ``bone``), ``(level, width)``, a :class:`~gpuspark.data.sources.Window`, or ``hu``/None
    for raw HU; ``split`` the train/val/test fractions, by a stable hash of the patient id.

    Everything that can be checked on the driver is checked before a cluster starts. A job
    that makes no record fails with :class:`PrepError` and commits nothing. Runs on
    ``spark``, else on ``master`` or the spec's master, see
    :func:`gpuspark.cluster.session.job_session`.
    ``team``: submit under that team of the spec (default: the user's team per ``members``;
    its queue, labels or caps, see :func:`gpuspark.quota.team.team_conf`).
    """

    t0 = time.monotonic()
    check_extras("prep dicom", ("pydicom", "dicom"))
    src_s = check_source(src)
    check_world(world_size, num_shards)
    try:
        options = DicomOptions(
            spacing=zyx(spacing, float, "spacing"),
            shape=zyx(shape, int, "shape"),
            window=parse_window(window, text_pairs=False),  # text is the CLI's to parse
            dtype=dtype,
            min_slices=min_slices,
            salt=salt,
        )
    except WindowError as exc:
        raise PrepError(exc.message, remedy=exc.remedy) from exc
    except ValueError as exc:
        raise PrepError(str(exc)) from exc
    write = WriteOptions(check_split(split), world_size, num_shards, overwrite, compression)
    table = read_label_table(labels)
    source = DicomSource(src_s, options, table, write.fractions)
    job = GroupedJob(
        split_of=source.split_of,
        to_sample=_dicom_sample,
        extra=partial(_dicom_extra, src_s, options, table, write.fractions),
        header_error=HEADER_ERROR,
        sample_error="series failed",
        split_error="files of the series name different patients",
        phase="series+write",
        stage="series",
    )
    where = Where(spark, master, spec, team, progress, t0)
    return run_prep("dicom", source, dst, write, partial(run_grouped, job=job), where)


_SAMPLE_KEYS = (
    "volume",
    "id",
    "series_uid",
    "study_uid",
    "patient_hash",
    "modality",
    "spacing",
    "orig_spacing",
    "orig_shape",
    "slices",
)


def _dicom_sample(row: dict[str, Any]) -> dict[str, Any]:
    """``prep_series`` row -> shard sample."""
    sample = {key: row[key] for key in _SAMPLE_KEYS}
    if row.get("label") is not None:
        sample["label"] = int(row["label"])
    return sample


def _dicom_extra(
    src: str, options: Any, table: Any, fractions: Any, n_files: int, done: dict[str, Any]
) -> dict[str, Any]:
    w = options.window
    q_rows = done["q_rows"]
    extra: dict[str, Any] = {
        "prep": {
            "kind": "dicom",
            "source": src,
            "spacing": list(options.spacing) if options.spacing else None,
            "shape": list(options.shape) if options.shape else None,
            "axes": "zyx",
            "window": {"name": w.name, "level": w.level, "width": w.width},
            "dtype": options.out_dtype,
            "split": list(fractions) if fractions else None,
            "split_by": "sha256 of hashed patient id",
            "min_slices": options.min_slices,
        },
        "quarantine": {
            "inputs": n_files,
            "rows": int(done["rows"]),
            "files_in_rows": int(done["files_in_rows"]),
            "files": len(q_rows),
            "series": int(done["samples_quarantined"]),
            "by_reason": by_reason(q_rows),
        },
    }
    if table is not None:
        extra["label_map"] = {str(k): v for k, v in table.names.items()}
        extra["labels"] = {"source": table.source, "key": table.key}
    return extra
