"""The first thing a prep job reports is that Spark is starting (before the session exists)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuspark.data.prep import dicom, images, progress
from gpuspark.data.prep import job as prep_job


class _Stop(Exception):
    pass


def _session_that_records(calls: list[dict[str, Any]], seen: list[list[str]]) -> Any:
    @contextlib.contextmanager
    def job_session(*_a: Any, **_kw: Any) -> Iterator[Any]:
        seen.append([c["phase"] for c in calls])  # what the user saw while Spark started
        raise _Stop
        yield  # pragma: no cover

    return job_session


@pytest.mark.parametrize("module", [images, dicom])
def test_first_update_says_spark_is_starting(
    module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "x.jpg").write_bytes(b"x")
    calls: list[dict[str, Any]] = []
    seen: list[list[str]] = []
    monkeypatch.setattr(prep_job, "job_session", _session_that_records(calls, seen))
    run = images.prep_images if module is images else dicom.prep_dicom
    with pytest.raises(_Stop):
        run(str(tmp_path / "src"), str(tmp_path / "dst"), progress=calls.append)
    assert seen == [[progress.STARTING]] and progress.STARTING == "starting Spark"
    first = calls[0]
    assert first["tasks_total"] == 0 and first["rows"] == 0 and first["quarantined"] == 0


class _Acc:
    value = 3


class _Tracker:
    def getActiveStageIds(self) -> list[int]:
        return [1]

    def getStageInfo(self, _sid: int) -> Any:
        return type("Info", (), {"numTasks": 28, "numCompletedTasks": 20})()


class _Spark:
    class sparkContext:
        @staticmethod
        def statusTracker() -> _Tracker:
            return _Tracker()


def test_an_interrupted_job_does_not_end_done() -> None:
    calls: list[dict[str, Any]] = []
    counters = {"rows": _Acc(), "quarantined": _Acc()}
    with pytest.raises(KeyboardInterrupt), progress.Watcher(_Spark(), calls.append, counters) as w:
        w._report()
        raise KeyboardInterrupt
    assert calls[-1]["phase"] == "interrupted" and calls[-1]["tasks_done"] == 20
    assert all(c["phase"] != "done" for c in calls)
    with progress.Watcher(_Spark(), calls.append, counters):
        pass
    assert calls[-1]["phase"] == "done"


def test_an_error_met_while_a_sigterm_unwinds_is_an_interrupt() -> None:
    """A group SIGTERM stops the driver JVM too: the clean-up meets a py4j error raised while
    :class:`Terminated` is handled. The bar says interrupted, as the CLI's last line does."""
    import signal

    from gpuspark._util.signals import Terminated

    calls: list[dict[str, Any]] = []
    counters = {"rows": _Acc(), "quarantined": _Acc()}
    with pytest.raises(ConnectionError), progress.Watcher(_Spark(), calls.append, counters) as w:
        w._report()
        try:
            raise Terminated(signal.SIGTERM)
        finally:
            raise ConnectionError("Answer from Java side is empty")
    assert calls[-1]["phase"] == "interrupted"
    with pytest.raises(_Stop), progress.Watcher(_Spark(), calls.append, counters) as w:
        w._report()
        raise _Stop
    assert calls[-1]["phase"] == "failed"


class _Stage:
    def __init__(self, stage_id: int, tasks: int, completed: int, done: bool = True) -> None:
        self.stage_id, self.num_tasks, self.num_completed_tasks = stage_id, tasks, completed
        self.done = done


class _ConnectSpark:
    """Stands for a Spark Connect client's session (told by its class's module)."""

    __module__ = "pyspark.sql.connect.session"

    def __init__(self) -> None:
        self.handlers: list[Any] = []

    def registerProgressHandler(self, handler: Any) -> None:
        self.handlers.append(handler)

    def removeProgressHandler(self, handler: Any) -> None:
        self.handlers.remove(handler)


def test_over_connect_the_tasks_come_from_the_servers_progress() -> None:
    calls: list[dict[str, Any]] = []
    spark = _ConnectSpark()
    counters = {"rows": prep_job.DriverCount(), "quarantined": prep_job.DriverCount()}
    with progress.Watcher(spark, calls.append, counters) as w:
        (handler,) = spark.handlers
        handler(stages=[_Stage(4, 8, 3)], inflight_tasks=5, operation_id="op", done=False)
        counters["rows"].add(7)
        w._report()
        assert (calls[-1]["tasks_done"], calls[-1]["tasks_total"], calls[-1]["rows"]) == (3, 8, 7)
        handler(stages=[_Stage(6, 5, 0, done=False)], inflight_tasks=3, done=False)
        w._report()
        assert calls[-1]["tasks_total"] == 13
        last = [_Stage(4, 8, 8), _Stage(5, 2, 2), _Stage(6, 5, 0, done=False)]  # 6: skipped
        handler(stages=last, inflight_tasks=0, operation_id="op", done=True)
    assert spark.handlers == []  # removed again
    assert calls[-1]["phase"] == "done" and calls[-1]["tasks_done"] == calls[-1]["tasks_total"]
    assert calls[-1]["tasks_total"] == 10


def test_a_connect_client_without_progress_reports_phases(monkeypatch: pytest.MonkeyPatch) -> None:
    line = "a data job's task progress over Spark Connect needs pyspark >= 4.0.0 (...)"
    monkeypatch.setattr(progress, "missing", lambda feature: line)
    calls: list[dict[str, Any]] = []
    spark = _ConnectSpark()
    counters = {"rows": prep_job.DriverCount(), "quarantined": prep_job.DriverCount()}
    with progress.Watcher(spark, calls.append, counters, phase="images") as w:
        assert spark.handlers == []
        w._report()
    assert [c["phase"] for c in calls][-2:] == ["images", "done"]
    assert all(c["tasks_total"] == 0 for c in calls)
