"""What both prep jobs share: checks made on the driver before any Spark work, write
options, the quarantine table, the outcome check and the result."""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark.data.checks import parse_split
from gpuspark.data.sources import read_labels
from gpuspark.errors import GpusparkError, LabelsError, PrepError
from gpuspark.schedulers.connect import is_connect_session

__all__ = [
    "QUARANTINE_FILE",
    "SHARD_BYTES",
    "PrepResult",
    "Shared",
    "WriteOptions",
    "arrow_schema",
    "by_reason",
    "check_destination",
    "check_outcome",
    "check_source",
    "check_split",
    "check_world",
    "connect_cores",
    "cores",
    "quarantine_path",
    "quarantine_table",
    "read_label_table",
    "record_batches",
    "shared",
    "split_counts",
    "task_count",
]

log = logging.getLogger(__name__)

QUARANTINE_FILE = "quarantine.parquet"
"""The quarantine table's name in ``files=``; committed as ``quarantine-<write id>.parquet``
(``manifest.extra["files"]["quarantine.parquet"]`` names it)."""
SHARD_BYTES = 128 << 20
MOSTLY_QUARANTINED = 0.5
"""Above this share of quarantined inputs a prep job logs a warning."""


@dataclass
class PrepResult:
    """What a prep job did. ``inputs == files_in_rows + quarantined`` always holds."""

    dataset: str
    kind: str
    inputs: int
    rows: int
    files_in_rows: int
    quarantined: int
    quarantined_items: int
    by_reason: dict[str, int]
    splits: dict[str, int]
    shards: int
    bytes: int
    seconds: float
    quarantine_path: str | None
    label_map: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    """One line each: what the dataset lacks that training will notice (an empty split, a
    single class); also logged as warnings."""

    def as_dict(self) -> dict[str, Any]:
        """Plain-data view (for ``--json``)."""
        return asdict(self)


@dataclass(frozen=True)
class WriteOptions:
    """How a prep job's rows become shards (passed through to the writers)."""

    fractions: tuple[float, ...] | None
    world_size: int | None
    num_shards: int | None
    overwrite: bool
    compression: str | None


# --------------------------------------------------------------------------- driver checks


def check_source(src: str | os.PathLike[str]) -> str:
    """The source folder as an absolute path (a remote URL as given): it must exist, be a
    directory and be readable."""
    text = os.fspath(src)
    if storage.is_url(text):
        return text
    p = Path(storage.local_path(text)).expanduser()
    if not p.exists():
        raise PrepError(f"source {text} does not exist", remedy="check the path")
    if not p.is_dir():
        raise PrepError(
            f"source {text} is not a directory", remedy="pass the folder holding the files"
        )
    if not os.access(p, os.R_OK | os.X_OK):
        raise PrepError(f"source {text} is not readable", remedy="check its permissions")
    if not _holds_a_file(p):
        raise PrepError(
            f"source {text} holds no files (it and its subfolders are empty)",
            remedy="pass the folder that holds the input files",
        )
    links = folder_link_problems(p, text)
    if links:
        raise PrepError(
            f"source {text} has {len(links)} link{'s' if len(links) > 1 else ''} to folders "
            f"that would read files more than once: {'; '.join(links)}",
            remedy="remove those links (a link to a file is fine), or pass a source without them",
        )
    return str(p.resolve())


def folder_link_problems(root: Path, shown: str | None = None) -> list[str]:
    """The symbolic links to folders below ``root`` that would make a recursive listing read
    files more than once (Spark's follows links): a link to one of its own parent folders (a
    loop: endless) or to a folder the tree already holds. Each as ``link -> target (why)``,
    paths relative to ``root`` (shown as ``shown``). Links to folders outside the tree are
    walked like the tree; links to files are fine (each is read once, under its own path)."""
    seen: dict[tuple[int, int], str] = {}
    links: list[str] = []

    def rel(path: str) -> str:
        text = os.path.relpath(path, root)
        return (shown or str(root)) if text == "." else text

    def walk(top: str) -> None:  # the real folders below top (links not followed)
        for here, dirs, _files in os.walk(top):
            st = os.stat(here)
            seen.setdefault((st.st_dev, st.st_ino), rel(here))
            links.extend(
                os.path.join(here, d) for d in sorted(dirs) if os.path.islink(os.path.join(here, d))
            )

    walk(str(root))
    found = []
    for link in links:  # grows while links to outside folders are walked
        try:
            st = os.stat(link)
            target = os.readlink(link)
        except OSError:  # a broken link: no folder, nothing read twice
            continue
        key = (st.st_dev, st.st_ino)
        if key not in seen:
            walk(link)
            continue
        real, home = Path(os.path.realpath(link)), Path(os.path.realpath(os.path.dirname(link)))
        why = "leads back to" if home.is_relative_to(real) else "the tree already holds it as"
        found.append(f"{rel(link)} -> {target} ({why} {seen[key]})")
    return found


def _holds_a_file(root: Path) -> bool:
    """Whether any file lies below ``root``; stops at the first one (large trees stay cheap)."""
    return any(files for _dir, _subdirs, files in os.walk(root, followlinks=True))


def check_destination(
    dst: str | os.PathLike[str], overwrite: bool, source: str | None = None
) -> str:
    """The dataset directory as an absolute local path (a URL as given), refused now (not
    after the Spark job) when it is, lies in or holds ``source`` (the job's input), when it
    holds a dataset and ``overwrite`` is off, or other files; a URL also when its store's
    client is missing or it cannot be written (a write probe)."""
    from gpuspark.data.write import check_target

    text = os.fspath(dst)
    _check_apart(text, source)
    if storage.is_url(text):
        try:
            storage.check_writable(text, "destination")
        except GpusparkError as exc:
            raise PrepError(exc.message, remedy=exc.remedy) from exc
        check_target(text, overwrite)
        return text
    root = os.path.abspath(os.path.expanduser(storage.local_path(text)))
    _check_creatable(text, root)
    check_target(root, overwrite)
    return root


def _check_apart(dst: str, source: str | None) -> None:
    """Refuse a destination that is the source, lies in it or holds it, as ``predict`` does:
    the staging folders and shards would land among the inputs (a later run reads them), or
    the input among the dataset's files. Symbolic links are followed."""
    if source is None:
        return
    if storage.is_within(dst, source, resolve=True):
        where = "is" if storage.is_within(source, dst, resolve=True) else "lies inside"
        raise PrepError(
            f"destination {dst} {where} the source {source}",
            remedy="write the dataset to a folder outside the source",
        )
    if storage.is_within(source, dst, resolve=True):
        raise PrepError(
            f"source {source} lies inside the destination {dst}",
            remedy="write the dataset to a folder that does not hold the source",
        )


def _check_creatable(text: str, root: str) -> None:
    """``root`` is a directory, or the nearest existing folder above it is a writable one."""
    problem = storage.directory_problem(root)
    if problem is not None:
        raise PrepError(f"destination {text} {problem.text}", remedy=problem.remedy)


def check_world(world_size: int | None, num_shards: int | None) -> None:
    """``world_size`` and ``num_shards`` are at least 1 when given."""
    for name, value in (("world_size", world_size), ("num_shards", num_shards)):
        if value is not None and value < 1:
            raise PrepError(f"{name} must be at least 1, got {value}")


def check_split(split: Sequence[float] | None) -> tuple[float, ...] | None:
    """Split fractions (train, val[, test]) as a tuple (:func:`gpuspark.data.checks.parse_split`);
    text is the CLI's to parse."""
    try:
        return parse_split(split, text=False)
    except ValueError as exc:
        raise PrepError(str(exc)) from exc


def read_label_table(labels: str | os.PathLike[str] | None) -> Any:
    """The labels CSV (read on the driver), or None; an unreadable file is a one-line error."""

    if labels is None:
        return None
    try:
        return read_labels(labels)
    except LabelsError:
        raise
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as exc:
        what = "is not a UTF-8 text file" if isinstance(exc, UnicodeDecodeError) else str(exc)
        raise LabelsError(
            f"labels file {os.fspath(labels)} cannot be read: {what}",
            remedy="pass a CSV file with a header line such as: series_uid,label",
        ) from exc


# --------------------------------------------------------------------------- cluster size


def cores(spark: Any) -> int:
    """Task slots of the cluster: ``defaultParallelism`` / ``spark.task.cpus`` (else 2); over
    Spark Connect, from the server application's settings (:func:`connect_cores`).

    Spark has no public call for the concurrent task slots (its scheduler's
    ``maxNumConcurrentTasks`` is internal). On a standalone cluster ``defaultParallelism`` is
    the total cores of the registered executors when ``spark.default.parallelism`` is unset,
    which the session path leaves unset; divided by the cores each task takes, that is the
    number of tasks that run at once.
    """
    if is_connect_session(spark):
        return connect_cores(spark)
    sc = spark.sparkContext
    try:
        per_task = int(sc.getConf().get("spark.task.cpus", "1") or 1)
        slots = int(sc.defaultParallelism) // max(1, per_task)
    except Exception:  # a session without a usable conf: plan for a small cluster
        slots = 0
    return slots if slots > 0 else 2


_CORE_KEYS = (
    ("spark.default.parallelism",),
    ("spark.cores.max",),  # standalone's cap: the embedded cluster's server sets it to all
    ("spark.executor.instances", "spark.executor.cores"),  # YARN, Kubernetes: static
)


def connect_cores(spark: Any) -> int:
    """Task slots of a Spark Connect server's application, read from its settings (a client
    cannot ask its scheduler): ``spark.default.parallelism``, else ``spark.cores.max``, else
    executors x cores each, divided by ``spark.task.cpus``; else 2 (plan for a small cluster)."""
    conf = _server_conf(spark, {k for keys in _CORE_KEYS for k in keys} | {"spark.task.cpus"})
    per_task = max(1, int(conf.get("spark.task.cpus") or 1))
    for keys in _CORE_KEYS:
        values = [conf.get(k) for k in keys]
        if all(v and v.isdigit() and int(v) > 0 for v in values):
            total = 1
            for v in values:
                total *= int(v or 1)
            return max(1, total // per_task)
    return 2


def _server_conf(spark: Any, keys: set[str]) -> dict[str, str]:
    """The settings ``keys`` of the session's application that are set."""
    out = {}
    for key in sorted(keys):
        with contextlib.suppress(Exception):  # a server that refuses to tell: not set
            value = spark.conf.get(key, None)
            if value is not None:
                out[key] = str(value)
    return out


class Shared:
    """A value the tasks read as ``.value``, like a broadcast variable (Spark Connect has no
    broadcast variables: it travels with the task's function)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def shared(spark: Any, value: Any) -> Any:
    """``value`` for the tasks: a broadcast variable on a classic session, a :class:`Shared`
    over Spark Connect; the tasks read ``.value`` either way."""
    if is_connect_session(spark):
        return Shared(value)
    return spark.sparkContext.broadcast(value)


def task_count(spark: Any, items: int, per_task: int, per_core: int = 4) -> int:
    """Enough tasks to balance the cores, but at least ``per_task`` items per task."""
    return max(1, min(-(-items // per_task), cores(spark) * per_core))


# --------------------------------------------------------------------------- Arrow rows


def record_batches(rows: Iterable[dict[str, Any]], ddl: str, size: int) -> Iterator[Any]:
    """``rows`` as Arrow record batches of ``size`` rows (the last one shorter)."""
    import pyarrow as pa

    schema = arrow_schema(ddl)
    it = iter(rows)
    while chunk := list(itertools.islice(it, size)):
        yield pa.RecordBatch.from_pylist(chunk, schema=schema)


def arrow_schema(ddl: str) -> Any:
    """The pyarrow schema of a Spark DDL string made of the few types used here."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "long": pa.int64(),
        "int": pa.int32(),
        "binary": pa.binary(),
        "array<int>": pa.list_(pa.int32()),
        "array<double>": pa.list_(pa.float64()),
        "array<string>": pa.list_(pa.string()),
    }
    return pa.schema([(n, types[t]) for n, t in (c.split(" ", 1) for c in ddl.split(", "))])


# --------------------------------------------------------------------------- quarantine, result


def quarantine_table(rows: list[dict[str, Any]]) -> dict[str, bytes]:
    """The quarantine table (path, series_uid, reason, error_type, stage) as the ``files=``
    of a write: Parquet bytes committed with the shards, before the manifest (always, even
    when empty, so that no older table outlives the dataset it belonged to)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [(n, pa.string()) for n in ("path", "series_uid", "reason", "error_type", "stage")]
    )
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buf)
    return {QUARANTINE_FILE: buf.getvalue()}


def quarantine_path(root: str, manifest: Any) -> str | None:
    """Where the committed dataset's quarantine table is."""
    name = (manifest.extra.get("files") or {}).get(QUARANTINE_FILE)
    return storage.join(root, name) if name else None


def by_reason(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Quarantined inputs per reason (its text up to the first ':'), most frequent first."""
    out: dict[str, int] = {}
    for r in rows:
        key = r["reason"].split(":")[0][:80]
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def check_outcome(job: str, src: str, dst: str, inputs: int, rows: int, q_rows: list) -> None:
    """Refuse a job that made no records (nothing is committed); warn when most inputs
    were quarantined."""
    reasons = ", ".join(f"{k} ({v})" for k, v in list(by_reason(q_rows).items())[:3])
    if rows == 0:
        raise PrepError(
            f"{job} of {src} produced no records: {len(q_rows)} of {inputs} inputs were "
            f"quarantined (top reasons: {reasons or 'none'})",
            remedy=f"fix the inputs or the options; nothing was written to {dst}",
        )
    if inputs and len(q_rows) / inputs > MOSTLY_QUARANTINED:
        log.warning(
            "%s of %s: %d of %d inputs were quarantined (top reasons: %s)",
            job,
            src,
            len(q_rows),
            inputs,
            reasons,
        )


def split_counts(manifest: Any) -> dict[str, int]:
    """Records per split of a manifest."""
    records = {s.path: s.records for s in manifest.shards}
    return {name: sum(records[p] for p in paths) for name, paths in manifest.splits.items()}
