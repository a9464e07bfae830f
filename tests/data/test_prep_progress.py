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
