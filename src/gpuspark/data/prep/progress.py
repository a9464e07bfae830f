"""The progress of a prep job: Spark's status tracker polled on a thread."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["STARTING", "Progress", "Watcher", "announce"]

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


class Watcher:
    """Polls Spark's status tracker and reports tasks done/total and accumulators; times the
    phases of the job (``timings``)."""

    def __init__(
        self,
        spark: Any,
        progress: Progress | None,
        counters: dict[str, Any],
        phase: str = "listing",
    ) -> None:
        self.sc = spark.sparkContext
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
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._stop.set()
        if exc_type is None:
            self.phase = "done"
            if self._thread.is_alive():
                self._thread.join(timeout=5)
                self._report()
            return
        # A failed or interrupted job: the bar must not say "done". Spark may be going away
        # (Ctrl-C), so the last figures are repeated under the new phase without asking it.
        self.phase = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else "failed"
        if self._thread.is_alive():  # never started without a progress callback
            self._thread.join(timeout=5)
        if self.progress is not None and self._last is not None:
            with contextlib.suppress(Exception):
                self.progress({**self._last, "phase": self._phase})

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):
                self._report()

    def _report(self) -> None:
        tracker = self.sc.statusTracker()
        active = set(tracker.getActiveStageIds())
        # one more look at stages that just finished, then they are final
        for sid in active | (self._open - active):
            info = tracker.getStageInfo(sid)
            if info is not None:
                self.stages[sid] = (info.numTasks, info.numCompletedTasks)
        self._open = active
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
