"""The progress of a prep job, reported on a thread: tasks from Spark's status tracker (a
classic session) or from the progress a Spark Connect server sends its client (pyspark 4.0+,
``SparkSession.registerProgressHandler``; a 3.5 Connect client reports phases only)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuspark._util.signals import by_interrupt
from gpuspark._util.spark_compat import missing
from gpuspark.schedulers.connect import is_connect_session

__all__ = ["STARTING", "Progress", "Watcher", "announce"]

log = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any]], None]
"""Called about twice a second with ``phase``, ``tasks_done``, ``tasks_total``, ``rows``,
``quarantined``, ``rows_per_s`` and ``elapsed_s``."""

STARTING = "starting Spark"
"""The first phase of a job: the session (and an embedded cluster, if none runs) is starting;
no Spark job is submitted yet."""


def announce(progress: Progress | None, phase: str = STARTING) -> None:
    """Report ``phase`` before any Spark task exists (e.g. while the session starts)."""
    if progress is not None:
        progress(
            {
                "phase": phase,
                "tasks_done": 0,
                "tasks_total": 0,
                "rows": 0,
                "quarantined": 0,
                "rows_per_s": 0.0,
                "elapsed_s": 0.0,
            }
        )


class _ConnectStages:
    """The stages a Spark Connect server reported to its client: a progress handler's
    ``{stage id: (tasks, completed tasks)}``."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.latest: dict[int, tuple[int, int]] = {}
        self.registered = False

    def __call__(
        self,
        stages: Any = None,
        inflight_tasks: int = 0,
        operation_id: Any = None,
        done: Any = False,
    ) -> None:
        """pyspark's ``ProgressHandler``: called with the current operation's stages. When the
        operation is done, its stages that never finished are dropped: Spark skipped them
        (adaptive execution re-planned, or their output was reused), and the status tracker
        of a classic session, which lists only stages that ran, never shows them either."""
        for stage in stages or ():
            if done and not getattr(stage, "done", True):
                self.latest.pop(stage.stage_id, None)
            else:
                self.latest[stage.stage_id] = (stage.num_tasks, stage.num_completed_tasks)

    def start(self) -> None:
        problem = missing("connect-progress")
        if problem is not None:  # pyspark 3.5: the phases only
            log.info("%s: the progress shows phases, not tasks", problem)
            return
        self.spark.registerProgressHandler(self)
        self.registered = True

    def stop(self) -> None:
        if self.registered:
            with contextlib.suppress(Exception):
                self.spark.removeProgressHandler(self)
            self.registered = False


class Watcher:
    """Reports tasks done/total (Spark's status tracker; over Spark Connect, what the server
    reports) and the job's counters on a thread; times the phases of the job (``timings``)."""

    def __init__(
        self,
        spark: Any,
        progress: Progress | None,
        counters: dict[str, Any],
        phase: str = "listing",
    ) -> None:
        self._connect = _ConnectStages(spark) if is_connect_session(spark) else None
        self.sc = None if self._connect is not None else spark.sparkContext
        self.progress = progress
        self.counters = counters
        self.stages: dict[int, tuple[int, int]] = {}
        self._open: set[int] = set()
        self._phase = phase
        self.t0 = time.monotonic()
        self._t_phase = self.t0
        self.timings: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._last: dict[str, Any] | None = None

    @property
    def phase(self) -> str:
        """The current phase: headers, series+write (DICOM); listing, images, write (images)."""
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        now = time.monotonic()
        self.timings[self._phase] = round(now - self._t_phase, 3)
        self._phase, self._t_phase = value, now

    def __enter__(self) -> Watcher:
        if self.progress is not None:
            if self._connect is not None:
                self._connect.start()
            self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, *_: object
    ) -> None:
        self._stop.set()
        if self._connect is not None:
            self._connect.stop()
        if exc_type is None:
            self.phase = "done"
            if self._thread.is_alive():
                self._thread.join(timeout=5)
                self._report()
            return
        # A failed or interrupted job: the bar must not say "done". Spark may be going away
        # (Ctrl-C), so the last figures are repeated under the new phase without asking it.
        self.phase = "interrupted" if by_interrupt(exc) else "failed"
        if self._thread.is_alive():  # never started without a progress callback
            self._thread.join(timeout=5)
        if self.progress is not None and self._last is not None:
            with contextlib.suppress(Exception):
                self.progress({**self._last, "phase": self._phase})

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):
                self._report()

    def _poll_tracker(self) -> None:
        assert self.sc is not None
        tracker = self.sc.statusTracker()
        active = set(tracker.getActiveStageIds())
        # one more look at stages that just finished, then they are final
        for sid in active | (self._open - active):
            info = tracker.getStageInfo(sid)
            if info is not None:
                self.stages[sid] = (info.numTasks, info.numCompletedTasks)
        self._open = active

    def _report(self) -> None:
        if self._connect is not None:
            self.stages = dict(self._connect.latest)
        else:
            self._poll_tracker()
        total = sum(n for n, _ in self.stages.values())
        done = sum(d for _, d in self.stages.values())
        elapsed = time.monotonic() - self.t0
        rows = self.counters["rows"].value
        assert self.progress is not None
        self._last = {
            "phase": self._phase,
            "tasks_done": done,
            "tasks_total": total,
            "rows": rows,
            "quarantined": self.counters["quarantined"].value,
            "rows_per_s": rows / elapsed if elapsed > 0 else 0.0,
            "elapsed_s": elapsed,
        }
        self.progress(self._last)
