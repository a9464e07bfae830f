"""The prep job base: everything a prep job does besides reading its source.

A job module (``images.py``, ``dicom.py``, ``text.py``, ``parquet.py``) checks its own source
and options on the driver, then hands :func:`run_prep` its input and its body. The input is a
:class:`~gpuspark.data.sources.Source` (images, DICOM: the body calls its methods in the
Spark tasks, :meth:`PrepRun.require_source`; :mod:`~gpuspark.data.prep.grouped` is a body
for any source) or a path that Spark's own readers read (text, Parquet). The base owns the
rest:

- the destination (refused now, not after the Spark job: :func:`check_destination`);
- the job's team and session, through the one submit path
  (:func:`gpuspark.cluster.submit.prepare_job`; the spec is read once), the progress line
  while the session starts, and the team's directories removed again if the job fails. Prep
  jobs use only the DataFrame API, so the session may be a Spark Connect client's (a
  ``sc://`` master, or the embedded cluster's Connect server);
- the counters (rows, quarantined) and the progress :class:`Watcher` (:meth:`PrepRun.watching`):
  accumulators the tasks add to on a classic session; over Spark Connect, which has no
  accumulators, the counts the driver learns from the rows the tasks return
  (:meth:`PrepRun.counted`);
- the outcome check (:meth:`PrepRun.check_outcome`: no records, nothing committed), the
  writers' common arguments (:meth:`PrepRun.write_args`) and the :class:`PrepResult`
  (:meth:`PrepRun.result`), with its warnings (:func:`outcome_warnings`: a split asked for
  that came out empty, a classification dataset of one class).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpuspark import storage
from gpuspark.cluster.session import JobKind, job_session
from gpuspark.cluster.submit import prepare_job
from gpuspark.data.checks import SPLIT_NAMES
from gpuspark.data.prep.common import (
    PrepResult,
    WriteOptions,
    by_reason,
    check_destination,
    check_outcome,
    quarantine_path,
    split_counts,
)
from gpuspark.data.prep.progress import Progress, Watcher, announce
from gpuspark.data.sources import Source
from gpuspark.schedulers.connect import is_connect_session

__all__ = ["DriverCount", "PrepRun", "Where", "outcome_warnings", "run_prep"]

log = logging.getLogger(__name__)
_FALLBACK = {
    "train": "--train-split all",
    "val": "--val-split none",
    "test": "no --test-split",
}
"""What ``gpuspark train`` needs when a split it reads by default or by name is empty."""


class DriverCount:
    """A counter the driver keeps (Spark Connect has no accumulators): ``add`` and ``value``
    as an accumulator's. A copy sent to a task counts only there, so the driver adds what it
    learns from the rows the tasks return (:meth:`PrepRun.counted`)."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> None:
        """Add ``n`` (on the driver: the job's count; in a task: that copy's only)."""
        self.value += n


@dataclass
class PrepRun:
    """One prep job on the driver: its kind, source, destination and write options."""

    kind: str
    """``images``, ``dicom``, ``text``, ``parquet``: the job is ``prep <kind>``."""
    src: str
    """The source as errors and provenance name it (a source's ``root``)."""
    root: str
    write: WriteOptions
    progress: Progress | None = None
    t0: float = field(default_factory=time.monotonic)
    counters: dict[str, Any] = field(default_factory=dict)
    """``rows`` and ``quarantined``: accumulators (a classic session) or :class:`DriverCount`
    (Spark Connect), made by :meth:`watching`."""
    timings: dict[str, float] = field(default_factory=dict)
    source: Source | None = None
    """The job's input as a :class:`Source`; None for a job that reads ``src`` with Spark's
    own readers."""
    remote: bool = False
    """Whether the session is a Spark Connect client's (set by :meth:`watching`)."""

    @property
    def job(self) -> str:
        """``prep <kind>``: how errors and provenance name the job."""
        return f"prep {self.kind}"

    def require_source(self) -> Source:
        """The job's :class:`Source` (a body that reads through one was started with one)."""
        if self.source is None:
            raise TypeError(f"{self.job} was started without a Source")
        return self.source

    @contextmanager
    def watching(self, spark: Any, phase: str = "listing") -> Iterator[Watcher]:
        """The job's counters and its progress :class:`Watcher`; its phase timings are kept
        for :meth:`result`."""
        self.remote = is_connect_session(spark)
        if self.remote:
            self.counters = {"rows": DriverCount(), "quarantined": DriverCount()}
        else:
            sc = spark.sparkContext
            self.counters = {"rows": sc.accumulator(0), "quarantined": sc.accumulator(0)}
        with Watcher(spark, self.progress, self.counters, phase=phase) as watch:
            yield watch
        self.timings = watch.timings

    def counted(self, rows: int = 0, quarantined: int = 0) -> None:
        """Counts the driver learned from the rows the tasks returned: the progress's figures
        over Spark Connect, where tasks cannot add to the counters (on a classic session
        their accumulators already hold them, so nothing is added)."""
        if self.remote:
            self.counters["rows"].add(rows)
            self.counters["quarantined"].add(quarantined)

    def check_outcome(self, inputs: int, rows: int, q_rows: list[dict[str, Any]]) -> None:
        """Refuse a job that made no records (nothing is committed); warn when most inputs
        were quarantined."""
        check_outcome(self.job, self.src, self.root, inputs, rows, q_rows)

    def write_args(self, split_col: str | None = "split") -> dict[str, Any]:
        """What every writer is given: layout, overwrite, codec, provenance; ``split_col``
        only when the job splits."""
        w = self.write
        return {
            "world_size": w.world_size,
            "num_shards": w.num_shards,
            "split_col": split_col if w.fractions else None,
            "overwrite": w.overwrite,
            "compression": w.compression,
            "provenance": {"source": self.src, "job": self.job},
        }

    def result(
        self,
        manifest: Any,
        *,
        inputs: int,
        files_in_rows: int,
        q_rows: list[dict[str, Any]],
        quarantined_items: int | None = None,
        label_map: dict[str, str] | None = None,
    ) -> PrepResult:
        """The job's :class:`PrepResult` from its committed manifest, with its
        :func:`outcome_warnings` (each also logged)."""
        splits = split_counts(manifest)
        warnings = outcome_warnings(self.job, self.src, self.write.fractions, splits, label_map)
        for line in warnings:
            log.warning("%s", line)
        return PrepResult(
            dataset=self.root,
            kind=self.kind,
            inputs=inputs,
            rows=manifest.total_records,
            files_in_rows=files_in_rows,
            quarantined=len(q_rows),
            quarantined_items=len(q_rows) if quarantined_items is None else quarantined_items,
            by_reason=by_reason(q_rows),
            splits=splits,
            shards=len(manifest.shards),
            bytes=sum(s.bytes for s in manifest.shards),
            seconds=round(time.monotonic() - self.t0, 3),
            quarantine_path=quarantine_path(self.root, manifest),
            label_map=label_map or {},
            timings=self.timings,
            warnings=warnings,
        )


def outcome_warnings(
    job: str,
    src: str,
    fractions: tuple[float, ...] | None,
    splits: dict[str, int],
    label_map: dict[str, str] | None = None,
) -> list[str]:
    """One line per thing a committed dataset lacks that training will trip on: the splits
    asked for (a fraction above 0 in ``fractions``, named train, val, test) that hold no
    records in ``splits``, and a ``label_map`` of a single class."""
    out = []
    asked = [(name, f) for name, f in zip(SPLIT_NAMES, fractions or (), strict=False) if f > 0]
    empty = [(name, f) for name, f in asked if not splits.get(name)]
    if empty:
        what = " and ".join(f"{name} ({f:g} asked)" for name, f in empty)
        needs = " and ".join(_FALLBACK[name] for name, _ in empty if name != "test")
        out.append(
            f"{job} of {src}: split {what} came out empty: records are split by a hash of"
            " their id (file path, patient, --id column), so too few distinct ids leave a split"
            " empty" + (f"; gpuspark train needs {needs}" if needs else "")
        )
    if label_map is not None and len(label_map) == 1:
        [name] = label_map.values()
        out.append(
            f"{job} of {src}: one class only ('{name}'): a classifier trained on it learns"
            " nothing; check the labels (or the class folders)"
        )
    return out


@dataclass(frozen=True)
class Where:
    """Where a prep job runs and who it runs for: the arguments every prep entry point takes
    besides its source, destination and options."""

    spark: Any = None
    master: str | None = None
    spec: Any = None
    team: str | None = None
    progress: Progress | None = None
    t0: float = field(default_factory=time.monotonic)
    """When the entry point was called (its checks count in the job's seconds)."""


def run_prep(
    kind: str,
    src: str | Source,
    dst: Any,
    write: WriteOptions,
    body: Callable[[PrepRun, Any], PrepResult],
    where: Where,
) -> PrepResult:
    """Run ``body(run, session)`` as prep job ``kind`` reading ``src`` (a :class:`Source`,
    or a path for Spark's own readers) and writing ``dst`` (see the module's docstring);
    ``write.overwrite`` decides whether an existing dataset may be replaced."""
    # the team first: a destination in another team's root is refused without touching it
    # (for a URL, before the write probe that needs the store's credentials)
    job = prepare_job(
        JobKind.DATA,
        spec=where.spec,
        master=where.master,
        team=where.team,
        app_name=f"gpuspark-prep-{kind}",
        writes=[_absolute(dst)],
    )
    source = None if isinstance(src, str) else src
    path = src if isinstance(src, str) else src.root
    root = check_destination(dst, write.overwrite, path)
    run = PrepRun(kind, path, root, write, where.progress, where.t0, source=source)
    announce(where.progress)  # starting a session (and a cluster) takes seconds: say so
    args = job.session_args()
    with job.discard_on_error(), job_session(spark=where.spark, dataframe_only=True, **args) as s:
        return body(run, s)


def _absolute(dst: Any) -> str:
    """The destination as the team check compares it: a URL as given, a local path absolute."""
    text = os.fspath(dst)
    if storage.is_url(text):
        return text
    return os.path.abspath(os.path.expanduser(storage.local_path(text)))
