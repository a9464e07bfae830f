"""Rank output on the driver while the job runs: a tiny line server and its clients.

The driver starts a :class:`LogServer` for each launch attempt; every task connects with a
:class:`SocketSink`, sends its ranks' lines (printed on the driver as ``[rank r] text``) and its
failure report, and listens for ``ABORT`` (sent to every task as soon as one fails, or on
timeout) so healthy ranks do not wait for peers that are gone.

Protocol, one UTF-8 line per message: task -> driver ``HELLO <token> <task>``,
``L <rank> <text>``, ``N <kind> <json>`` (kind ``task``, ``failed``, ``info`` or ``metrics``:
a rank's ``/metrics`` endpoint), ``G <json>`` (the task's part of the exchange
before its ranks start, :mod:`.gather`), ``P`` (a heartbeat, every :data:`HEARTBEAT_S` while
the task runs), ``BYE`` (the task's last word); driver -> task ``ABORT``, ``G <json list>``.
A task whose stream stays open but silent (:meth:`LogServer.silent`) cannot reach the driver:
its host is cut off.

On the driver, a :class:`RankOutput` decides where each rank line goes: the console, and with
a log folder (``gpuspark launch --log-dir``) one file per rank.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Collection
from typing import IO, Any

from gpuspark.errors import LaunchError
from gpuspark.launch._internal.gather import FALLBACK, Gathering

__all__ = ["HEARTBEAT_S", "LogServer", "PrintSink", "RankOutput", "SocketSink", "format_line"]

HEARTBEAT_S = 2.0
"""How often a task says it is alive (``P``) when it has nothing else to send."""

_OPEN_FILES = 64
"""Rank log files kept open at once on the driver (a launch may have thousands of ranks)."""


def format_line(rank: int, text: str) -> str:
    """How a rank's line appears on the driver."""
    return f"[rank {rank}] {text}"


def _write_stdout(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class RankOutput:
    """Where the driver puts the ranks' lines, for the whole launch (attempts, restarts).

    Without a log folder: the console, ``[rank r] text``. With ``log_dir``: each line as the
    rank printed it in ``<log_dir>/rank_<r>.log`` (stdout and stderr, one stream: the rank
    writes both to one file descriptor), and on the console rank 0's lines only, or every
    rank's with ``tee`` (torchrun ``--log-dir D -r 3 -t 0:3`` and ``-t 3``). Notes of the
    launcher itself (``[gpuspark] ...``) always go to the console.
    """

    def __init__(
        self,
        log_dir: str | None = None,
        tee: bool = False,
        ranks: int = 0,
        write: Callable[[str], None] = _write_stdout,
    ) -> None:
        self.log_dir = log_dir
        self.tee = tee
        self.ranks = ranks
        self.write = write
        self._files: dict[int, IO[str]] = {}
        self._lock = threading.Lock()

    def path(self, rank: int) -> str:
        """The log file of ``rank`` (only meaningful with a log folder)."""
        return os.path.join(self.log_dir or "", f"rank_{rank}.log")

    def open(self) -> None:
        """Make the log folder and one empty file per rank (an earlier launch's are replaced,
        so every file holds this launch's output)."""
        if self.log_dir is None:
            return
        try:
            os.makedirs(self.log_dir, exist_ok=True)
            for rank in range(self.ranks):
                with open(self.path(rank), "w", encoding="utf-8"):
                    pass
        except OSError as exc:
            raise LaunchError(
                f"--log-dir {self.log_dir} (log_dir): cannot write the rank log files "
                f"({exc.strerror or exc})",
                remedy="name a folder you can write to",
            ) from None

    def line(self, rank: int, text: str) -> None:
        """One line rank ``rank`` printed."""
        if self.log_dir is None:
            self.write(format_line(rank, text))
            return
        with self._lock:
            self._file(rank).write(text + "\n")
        if self.tee or rank == 0:
            self.write(format_line(rank, text))

    def _file(self, rank: int) -> IO[str]:
        fh = self._files.pop(rank, None)
        if fh is None:
            if len(self._files) >= _OPEN_FILES:  # the least recently written one
                self._files.pop(next(iter(self._files))).close()
            fh = open(self.path(rank), "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._files[rank] = fh  # most recently written last
        return fh

    def close(self) -> None:
        """Close the files (what was written is there already: line buffered)."""
        with self._lock:
            for fh in self._files.values():
                with contextlib.suppress(OSError):
                    fh.close()
            self._files.clear()

    def __enter__(self) -> RankOutput:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PrintSink:
    """Local mode: lines go straight to this process's stdout (through ``output``)."""

    def __init__(
        self,
        write: Callable[[str], None] = _write_stdout,
        on_metrics: Callable[[dict[str, Any]], None] | None = None,
        output: RankOutput | None = None,
    ) -> None:
        self.write = write
        self.on_metrics = on_metrics
        self.output = output or RankOutput(write=write)
        self.notices: list[tuple[str, dict[str, Any]]] = []

    def line(self, rank: int, text: str) -> None:
        self.output.line(rank, text)

    def notice(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "metrics" and self.on_metrics is not None:
            self.on_metrics(payload)
            return
        self.notices.append((kind, payload))

    def aborted(self) -> bool:
        return False


class LogServer:
    """Driver side: accept task connections, print their lines, broadcast ``ABORT``."""

    def __init__(
        self,
        token: str,
        host: str = "127.0.0.1",
        write: Callable[[str], None] = _write_stdout,
        on_failure: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.token = token
        self.write = write
        self.on_failure = on_failure
        self.on_metrics: Callable[[dict[str, Any]], None] | None = None
        """Called with each rank's ``/metrics`` endpoint (``N metrics {...}``)."""
        self.output = RankOutput(write=write)
        """Where rank lines go (the console; files with a log folder)."""
        self.show_info = True
        self.failures: list[dict[str, Any]] = []
        self.infos: list[dict[str, Any]] = []
        self.abort_reason: str | None = None
        self.hosts: dict[int, str] = {}
        """Each task's host, as the task reported it (``N task {...}``)."""
        self.vanished: list[int] = []
        """Tasks whose stream ended without their ``BYE``: killed with their executor or host
        (a task that finishes or fails says goodbye), in the order the driver saw it."""
        self.heard: dict[int, float] = {}
        """When (``time.monotonic()``) each task's last message arrived."""
        self.finished: set[int] = set()
        """Tasks that said ``BYE``."""
        self.first_failure: float | None = None
        """When (``time.monotonic()``) the first failure report arrived."""
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._open: list[int] = []
        """Tasks whose stream is being read now."""
        self._active = 0
        self._idle = threading.Condition(self._lock)
        self.gathering = Gathering(self._lock)
        """The tasks' exchange; its ``size`` (the launch's task count) turns it on."""
        self._sock = socket.create_server((host, 0))
        self.host = host
        self.port = int(self._sock.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, name="gpuspark-logs", daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        """Where tasks connect."""
        return self.host, self.port

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._active += 1  # counted before the thread runs, so drain() waits for it
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._serve_lines(conn)
        finally:
            with self._lock:
                self._active -= 1
                with contextlib.suppress(ValueError):
                    self._conns.remove(conn)
                self._idle.notify_all()

    def _serve_lines(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn, conn.makefile("r", encoding="utf-8") as lines:
            hello = lines.readline().split()
            if len(hello) != 3 or hello[0] != "HELLO" or hello[1] != self.token:
                return
            task = int(hello[2]) if hello[2].isdigit() else None
            self._heard(task)
            with self._lock:
                self._conns.append(conn)
                if task is not None:
                    self._open.append(task)
                if self.abort_reason is not None:
                    self._send(conn)
            said_bye = False
            try:
                for raw in lines:
                    self._heard(task)
                    said_bye = raw.rstrip("\n") == "BYE"
                    if raw.startswith("G "):
                        self.gathering.add(conn, task, raw[2:].rstrip("\n"))
                    elif not said_bye:
                        self._handle(raw.rstrip("\n"))
            finally:
                self.gathering.gone(conn)
                self._ended(task, said_bye)

    def _ended(self, task: int | None, said_bye: bool) -> None:
        """A task's stream ended: with its ``BYE``, or without (the task vanished)."""
        if task is None:
            return
        with self._lock:
            self._open.remove(task)
            if said_bye:
                self.finished.add(task)
            else:
                self.vanished.append(task)

    def _heard(self, task: int | None) -> None:
        if task is not None:
            with self._lock:
                self.heard[task] = time.monotonic()

    def _handle(self, msg: str) -> None:
        kind, _, rest = msg.partition(" ")
        if kind == "L":
            rank, _, text = rest.partition(" ")
            self.output.line(int(rank), text)
        elif kind == "N":
            what, _, body = rest.partition(" ")
            payload = json.loads(body)
            if what == "failed":
                if self.first_failure is None:
                    self.first_failure = time.monotonic()
                self.failures.append(payload)
                if self.on_failure is not None:
                    self.on_failure(payload)
            elif what == "task":
                self.hosts[int(payload["task"])] = str(payload["host"])
            elif what == "metrics":
                if self.on_metrics is not None:
                    with contextlib.suppress(Exception):  # target files never fail a launch
                        self.on_metrics(payload)
            else:
                self.infos.append(payload)
                if self.show_info and len(self.infos) == 1:
                    self.write(f"[gpuspark] {payload.get('text')}")

    @staticmethod
    def _send(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(b"ABORT\n")

    def abort(self, reason: str) -> None:
        """Tell every task (connected now or later) to stop its ranks."""
        with self._lock:
            if self.abort_reason is None:
                self.abort_reason = reason
            for conn in self._conns:
                self._send(conn)

    def lost_host(self, wait: float = 3.0) -> str | None:
        """The host of the first task that vanished, if one did (waiting up to ``wait`` s
        for a stream to end: the driver can hear of a lost executor before the task's
        connection drops). Tasks Spark kills after that one vanish too; they are not lost."""
        deadline = time.monotonic() + wait
        while not self.vanished and time.monotonic() < deadline:
            time.sleep(0.1)
        with self._lock:
            first = self.vanished[0] if self.vanished else None
        return None if first is None else self.host_of(first)

    def silent(self, after: float, now: float | None = None) -> list[int]:
        """Tasks still connected (no ``BYE``, stream not ended) from which nothing, not even
        a heartbeat, arrived for more than ``after`` s: the longest silent first."""
        now = time.monotonic() if now is None else now
        with self._lock:
            done = self.finished | set(self.vanished)
            quiet = [
                (at, task)
                for task, at in self.heard.items()
                if task not in done and now - at > after
            ]
        return [task for _, task in sorted(quiet)]

    def host_of(self, task: int) -> str:
        """The host task ``task`` reported (``N task``), or a phrase naming the task."""
        return self.hosts.get(task, f"the host of task {task}")

    def drain(self, timeout: float, skip: Collection[int] = ()) -> None:
        """Wait (at most ``timeout`` s) until every task's stream has been read to its end,
        but those of the tasks in ``skip`` (cut off: their streams may never end)."""

        def done() -> bool:
            return self._active <= sum(1 for task in self._open if task in skip)

        with self._idle:
            self._idle.wait_for(done, timeout=timeout)

    def close(self) -> None:
        """Stop accepting; connections end when their tasks do."""
        self._closed = True
        self.gathering.close()
        with contextlib.suppress(OSError):
            self._sock.close()


SEND_GIVE_UP_S = 30
"""Seconds sent bytes may stay unacknowledged before the task's log connection is dropped
(``TCP_USER_TIMEOUT``): a task cut off from the driver does not block on a full send buffer
(its lines then go to the executor log)."""


def _give_up_unacked(sock: socket.socket) -> None:
    """Set :data:`SEND_GIVE_UP_S` on ``sock`` where the platform has ``TCP_USER_TIMEOUT``."""
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if option is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, option, SEND_GIVE_UP_S * 1000)


class SocketSink:
    """Task side: send lines and notices to the driver; watch for ``ABORT``.

    If the driver cannot be reached, lines go to this task's stderr (the executor log) and the
    launch goes on: logging never fails a job.
    """

    def __init__(self, host: str, port: int, token: str, task: int) -> None:
        self._lock = threading.Lock()
        self._abort = threading.Event()
        self._closed = threading.Event()
        self._answer: str | None = None
        self._answered = threading.Event()
        """Set by the driver's ``G`` answer, or when the driver's stream ends."""
        self._sock: socket.socket | None = None
        try:
            self._sock = socket.create_connection((host, port), timeout=10)
            self._sock.settimeout(None)
            _give_up_unacked(self._sock)
            self._sock.sendall(f"HELLO {token} {task}\n".encode())
        except OSError as exc:
            sys.stderr.write(f"gpuspark: cannot reach the driver's log server: {exc}\n")
            self._sock = None
            return
        threading.Thread(target=self._listen, name="gpuspark-abort", daemon=True).start()
        threading.Thread(target=self._beat, name="gpuspark-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        """``P`` every :data:`HEARTBEAT_S` until closed: the driver tells a quiet task from
        one it can no longer hear."""
        while not self._closed.wait(HEARTBEAT_S):
            with self._lock:
                if self._sock is None:
                    return
                try:
                    self._sock.sendall(b"P\n")
                except OSError:
                    self._sock = None
                    return

    def _listen(self) -> None:
        assert self._sock is not None
        with contextlib.suppress(OSError), self._sock.makefile("r", encoding="utf-8") as fh:
            for raw in fh:
                if raw.strip() == "ABORT":
                    self._abort.set()
                elif raw.startswith("G "):
                    self._answer = raw[2:].strip()
                    self._answered.set()
        self._answered.set()  # the driver is gone: nobody will answer

    def _send(self, msg: str) -> None:
        data = (msg.replace("\n", " ") + "\n").encode("utf-8", "replace")
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.sendall(data)
                    return
                except OSError:
                    self._sock = None
            sys.stderr.write(msg + "\n")

    def line(self, rank: int, text: str) -> None:
        self._send(f"L {rank} {text}")

    def notice(self, kind: str, payload: dict[str, Any]) -> None:
        self._send(f"N {kind} {json.dumps(payload, default=str)}")

    def aborted(self) -> bool:
        return self._abort.is_set()

    def gather(self, part: dict[str, Any]) -> list[Any] | None:
        """Every task's ``part`` in task order, through the driver (:mod:`.gather`); None:
        use ``BarrierTaskContext.allGather`` (the driver said so, or it cannot be reached).
        Raises :class:`LaunchError` if the launch is stopped or the driver lost meanwhile."""
        with self._lock:
            connected = self._sock is not None
        if not connected:
            return None
        self._send(f"G {json.dumps(part)}")
        with self._lock:
            if self._sock is None:  # not sent: the driver's wait sends the others to allGather
                return None
        while not self._answered.wait(0.2):
            if self._abort.is_set():
                raise LaunchError("the launch was stopped before its tasks met")
        if self._answer is None:
            raise LaunchError("lost the driver's log server before the tasks met")
        return None if self._answer == FALLBACK else list(json.loads(self._answer))

    def close(self) -> None:
        """Say goodbye and close the connection (the driver sees the end of this task's
        stream, and that the task was not lost)."""
        self._closed.set()
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.sendall(b"BYE\n")
                    self._sock.shutdown(socket.SHUT_RDWR)
                    self._sock.close()
                self._sock = None
