"""SIGTERM and SIGHUP as an exception, so that a stopped job cleans up as on Ctrl-C.

Python's default for SIGTERM and SIGHUP ends the process at once: no ``finally`` runs, and
what the job started in processes of their own (the embedded cluster's master and workers,
in their own sessions) or on disk (staging folders) stays behind. Within
:func:`terminate_raises` either signal raises :class:`Terminated` in the main thread instead,
where the job is: the same path as Ctrl-C's ``KeyboardInterrupt`` (py4j, PySpark and the CLI
treat both alike), so every ``finally`` and context manager runs.

The handler only raises: nothing else is safe to do at an arbitrary point of the main
thread. It raises once; the signals that come while the first one unwinds are ignored, so
they cannot cut the clean-up short (GNU ``timeout`` sends SIGTERM to the command and then to
its whole process group: the command gets it twice).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

__all__ = ["TERMINATING", "Caught", "Terminated", "by_interrupt", "terminate_raises"]

TERMINATING = (signal.SIGTERM, signal.SIGHUP)
"""The signals :func:`terminate_raises` turns into :class:`Terminated`."""


class Terminated(KeyboardInterrupt):
    """The process was told to stop by ``signum`` (SIGTERM, SIGHUP).

    A ``KeyboardInterrupt`` so that everything that stops cleanly on Ctrl-C does so here too:
    py4j drops the connection a call was waiting on, PySpark's and gpuspark's handlers of an
    interrupt apply, and ``except Exception`` does not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Caught:
    """What :func:`terminate_raises` caught."""

    signum: int | None = None
    """The signal that raised :class:`Terminated` (``None``: none came)."""


@contextlib.contextmanager
def terminate_raises() -> Iterator[Caught]:
    """Within: SIGTERM and SIGHUP raise :class:`Terminated` (once); after, the old handlers.

    Only a signal whose handler is the default one is taken over: a handler of the
    application stays, and so does an ignored signal (``nohup`` ignores SIGHUP). Nested uses
    therefore leave the outer one in charge. Outside the main thread (where Python cannot
    set handlers) nothing changes.
    """
    caught = Caught()
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def _raise(signum: int, _frame: FrameType | None) -> None:
        if caught.signum is None:  # later ones: the first is unwinding, let it finish
            caught.signum = signum
            raise Terminated(signum)

    old = {s: signal.signal(s, _raise) for s in TERMINATING if _is_default(s)}
    try:
        yield caught
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _is_default(sig: signal.Signals) -> bool:
    return signal.getsignal(sig) is signal.SIG_DFL


def by_interrupt(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a Ctrl-C or a :class:`Terminated`, or was raised while one was being
    handled (along ``__cause__``, else ``__context__``), such as the py4j error that the
    clean-up meets when the same SIGTERM stopped the driver JVM too."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
