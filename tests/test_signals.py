"""SIGTERM and SIGHUP raise :class:`Terminated` within ``terminate_raises`` (once), and only
where Python's default would end the process; the handlers are restored after."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from gpuspark._util.signals import TERMINATING, Terminated, by_interrupt, terminate_raises


@pytest.fixture(autouse=True)
def default_handlers() -> Iterator[None]:
    """Each test starts with Python's defaults for the two signals, and leaves them so."""
    old = {s: signal.signal(s, signal.SIG_DFL) for s in TERMINATING}
    yield
    for sig, handler in old.items():
        signal.signal(sig, handler)


def _kill_self(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(5)  # the handler raises before this ends


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_raises_terminated_within_only(sig: int) -> None:
    with pytest.raises(Terminated) as info, terminate_raises() as caught:
        _kill_self(sig)
    assert info.value.signum == sig and caught.signum == sig
    assert isinstance(info.value, KeyboardInterrupt)  # the clean-up path of Ctrl-C
    assert str(info.value) == signal.Signals(sig).name
    assert signal.getsignal(sig) is signal.SIG_DFL


def test_raises_once_so_a_second_signal_does_not_cut_the_clean_up_short() -> None:
    cleaned = False
    with pytest.raises(Terminated), terminate_raises():
        try:
            _kill_self(signal.SIGTERM)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # GNU timeout: to the command, then its group
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
            cleaned = True
    assert cleaned


def test_leaves_ignored_signals_and_handlers_of_the_application() -> None:
    def own(_signum: int, _frame: object) -> None:
        pass

    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    signal.signal(signal.SIGTERM, own)
    with terminate_raises() as caught:
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is own
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.05)
    assert caught.signum is None


def test_nested_uses_leave_the_outer_one_in_charge() -> None:
    with pytest.raises(Terminated), terminate_raises() as outer:
        handler = signal.getsignal(signal.SIGTERM)
        with terminate_raises() as inner:
            assert signal.getsignal(signal.SIGTERM) is handler
        assert signal.getsignal(signal.SIGTERM) is handler  # the inner one restored nothing
        _kill_self(signal.SIGTERM)
    assert outer.signum == signal.SIGTERM and inner.signum is None


def test_nothing_changes_outside_the_main_thread() -> None:
    seen: list[object] = []

    def run() -> None:
        with terminate_raises() as caught:
            seen.append(signal.getsignal(signal.SIGTERM))
        seen.append(caught.signum)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [signal.SIG_DFL, None]


def _raised_while(handled: BaseException, exc: BaseException) -> BaseException:
    try:
        try:
            raise handled
        finally:
            raise exc
    except BaseException as out:
        return out


def test_by_interrupt_follows_the_chain() -> None:
    assert by_interrupt(KeyboardInterrupt()) and by_interrupt(Terminated(signal.SIGHUP))
    assert by_interrupt(_raised_while(Terminated(signal.SIGTERM), OSError("JVM gone")))
    assert not by_interrupt(_raised_while(ValueError(), OSError("JVM gone")))
    assert not by_interrupt(None)
