"""The tasks' one exchange before their ranks start, through the driver's log server.

Every task of a launch tells the others its host, task 0 its store's port, each its GPUs and
its Python. ``BarrierTaskContext.allGather`` can carry that, but Spark's task thread looks for
the coordinator's answer once a second (``Thread.sleep(1000)`` in ``runBarrier``), so every
launch waited a whole second there with all tasks already in. Each task is already connected
to the driver's :class:`~gpuspark.launch._internal.logs.LogServer`, so the exchange goes there:
a task sends ``G <json>``; once every task of the stage has, the driver answers each
``G <json list>`` (in task order), at once.

The driver decides alone, so the tasks never split between two ways of meeting: if the parts
are not all in :data:`GATHER_WAIT_S` after the first arrived (a task that cannot reach the log
server, which never fails a launch, uses ``allGather`` straight away), or the launch did not
say how many tasks it has, every task, waiting or still to come, is answered ``G -``: use
``allGather``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from typing import Any

__all__ = ["FALLBACK", "GATHER_WAIT_S", "Gathering"]

GATHER_WAIT_S = 30.0
"""Seconds the first tasks wait for the rest before all of them use ``allGather``."""
FALLBACK = "-"
"""The driver's answer that sends a task to ``allGather``."""


class _Round:
    """The tasks that have sent their part for one run of the stage."""

    def __init__(self) -> None:
        self.parts: dict[int, tuple[socket.socket, Any]] = {}
        self.done = False
        self.timer: threading.Timer | None = None


class Gathering:
    """Driver side: collects the tasks' parts and answers when all are in.

    When Spark runs the barrier stage again (a task failed), the new tasks meet among
    themselves: the killed tasks' parts leave the round with their connections (:meth:`gone`),
    and a part from a task whose index already sent one starts a new round.
    """

    def __init__(self, lock: threading.Lock, wait_s: float = GATHER_WAIT_S) -> None:
        self.size: int | None = None
        """Tasks in the stage; None answers every task :data:`FALLBACK`."""
        self.wait_s = wait_s
        self.fallen_back = False
        """True once a round was not complete in time: every later part is answered
        :data:`FALLBACK` too."""
        self._round = _Round()
        self._lock = lock
        """The log server's: nothing else writes to a task's connection meanwhile."""

    def add(self, conn: socket.socket, task: int | None, body: str) -> None:
        """Handle ``G <body>`` from ``task`` on ``conn``."""
        try:
            part = json.loads(body)
        except ValueError:
            return
        if task is None:
            return
        with self._lock:
            if self.size is None or self.fallen_back:
                _answer([conn], FALLBACK)
                return
            if task in self._round.parts:
                self._stop_timer()
                self._round = _Round()
            current = self._round
            current.parts[task] = (conn, part)
            if current.timer is None:
                current.timer = threading.Timer(self.wait_s, self._give_up, args=(current,))
                current.timer.daemon = True
                current.timer.start()
            if len(current.parts) >= self.size and not current.done:
                current.done = True
                self._stop_timer()
                parts = [current.parts[t][1] for t in sorted(current.parts)]
                _answer([c for c, _ in current.parts.values()], json.dumps(parts))

    def gone(self, conn: socket.socket) -> None:
        """``conn``'s task ended: its part leaves the round not yet answered."""
        with self._lock:
            if not self._round.done:
                parts = self._round.parts
                for task in [t for t, (c, _) in parts.items() if c is conn]:
                    del parts[task]

    def _give_up(self, late: _Round) -> None:
        with self._lock:
            if late.done or late is not self._round:
                return
            late.done = self.fallen_back = True
            _answer([c for c, _ in late.parts.values()], FALLBACK)

    def _stop_timer(self) -> None:
        if self._round.timer is not None:
            self._round.timer.cancel()

    def close(self) -> None:
        """Stop the timer (the launch attempt is over)."""
        with self._lock:
            self._stop_timer()


def _answer(conns: list[socket.socket], text: str) -> None:
    data = f"G {text}\n".encode()
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.sendall(data)
