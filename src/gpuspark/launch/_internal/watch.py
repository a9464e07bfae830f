"""The driver's watch over one attempt's barrier stage: end it as soon as it cannot go on.

Spark notices a host that was cut off only when its worker or executor times out
(``spark.worker.timeout``, 60 s; ``spark.network.timeout``, 120 s), and until then the stage's
``collect`` waits. The tasks' log streams say more, sooner (:class:`~.logs.LogServer`): every
task sends a heartbeat, so a stream that stays open but silent is a task the driver can no
longer hear. :class:`StageWatch` cancels the stage (through ``cancel``) and names that task's
host when

* a rank reported a failure (its collective with a peer failed: the peers of a cut host fail
  within the collective timeout) and a task has been silent longer than ``silent_after``, or
* no rank reported anything, but a task has been silent longer than the collective timeout.

A failure with every task still heard is an ordinary failure: the tasks stop their ranks and
report, as before; only if the stage has not ended ``grace`` s later is it cancelled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuspark.launch._internal.logs import HEARTBEAT_S, LogServer

__all__ = ["FAILURE_GRACE_S", "SILENT_AFTER_S", "Lost", "StageWatch"]

SILENT_AFTER_S = 7.5 * HEARTBEAT_S
"""Silence (no line, no heartbeat) after which a task counts as cut off once a rank failed."""
FAILURE_GRACE_S = 30.0
"""After a rank's failure, how long the tasks have to stop and report before the stage is
cancelled anyway."""


@dataclass(frozen=True)
class Lost:
    """A task the driver stopped hearing: its host, and for how long it had been silent."""

    task: int
    host: str
    silent_s: float


class StageWatch:
    """Watch ``server`` while one stage runs; ``cancel()`` the stage when it cannot go on.

    :attr:`lost` says which task's host was cut off (``None``: none was). Use as a context
    manager around the stage's ``collect``.
    """

    def __init__(
        self,
        server: LogServer,
        cancel: Callable[[], None],
        collective_timeout: float | None,
        *,
        silent_after: float = SILENT_AFTER_S,
        grace: float = FAILURE_GRACE_S,
        tick: float = 0.5,
    ) -> None:
        self.server = server
        self.cancel = cancel
        self.collective_timeout = collective_timeout
        self.silent_after = silent_after
        self.grace = grace
        self.tick = tick
        self.lost: Lost | None = None
        self.cancelled = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuspark-watch", daemon=True)

    def __enter__(self) -> StageWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    @property
    def lost_tasks(self) -> tuple[int, ...]:
        """The task that was cut off, if one was (its stream may never end)."""
        return () if self.lost is None else (self.lost.task,)

    def _run(self) -> None:
        while not self._stop.wait(self.tick):
            if self.check():
                return

    def check(self, now: float | None = None) -> bool:
        """Look once; cancel the stage if it cannot go on. True when it was cancelled."""
        now = time.monotonic() if now is None else now
        failed_at = self.server.first_failure
        limit = self.silent_after if failed_at is not None else self._silence_limit()
        silent = [] if limit is None else self.server.silent(limit, now)
        if silent:
            task = silent[0]
            quiet = now - self.server.heard.get(task, now)
            self.lost = Lost(task, self.server.host_of(task), quiet)
            self.server.abort("host lost")
            return self._cancel()
        if failed_at is not None and now - failed_at > self.grace:
            return self._cancel()
        return False

    def _silence_limit(self) -> float | None:
        """Before any failure: silent past the collective timeout (a peer's collective with
        that task would have failed by then, had its report been able to arrive)."""
        if self.collective_timeout is None:
            return None
        return self.collective_timeout + self.silent_after

    def _cancel(self) -> bool:
        self.cancelled = True
        try:
            self.cancel()
        except Exception:  # cancelling never hides the launch's own error
            pass
        return True
