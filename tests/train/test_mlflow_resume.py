"""A resumed training run continues its MLflow run (:mod:`gpuspark.train.tracking`): the run
is recorded in the checkpoint directory, a resume reopens it, the resumed epochs log at their
own steps, new parameters are added and changed ones noted; real MLflow stores (file, SQLite),
no server. ``fit(..., tracking=...)`` is resumed end to end in its own processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_mlflow import FIT_SCRIPT  # tests/train is on sys.path

from gpuspark.train import tracking as tracked

pytest.importorskip("mlflow")


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh tracking URI: a file store folder or a SQLite file."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # what use_store sets, undone after
    if request.param == "sqlite":
        pytest.importorskip("sqlalchemy")
        pytest.importorskip("alembic")
        return f"sqlite:///{tmp_path / 'mlflow.db'}"
    return str(tmp_path / "mlruns")


def _client(uri: str) -> Any:
    return tracked.use_store(uri).MlflowClient()


def _epochs(run: tracked.TrackedRun, epochs: range) -> None:
    for e in epochs:
        run.log_epoch({"epoch": e, "loss": 1.0 / (e + 1)})


@pytest.mark.parametrize("store", ["file", "sqlite"], indirect=True)
def test_a_resume_continues_the_recorded_run(store: str, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    tracking = tracked.Tracking(uri=store, experiment="resume-test")
    first = tracked.start(tracking, {"epochs": 2, "config": {"lr": 0.1}}, folder=ckpt)
    assert tracked.recorded_run(ckpt) == {
        "uri": store,
        "experiment_id": _client(store).get_run(first.run_id).info.experiment_id,
        "run_id": first.run_id,
    }
    _epochs(first, range(2))
    first.end("FAILED")  # the first attempt died after epoch 1

    params = {"epochs": 4, "config": {"lr": 0.1}, "world_size": 2}
    again = tracked.start(tracking, params, folder=ckpt, resume=True)
    assert again.run_id == first.run_id and again.resumed
    client = _client(store)
    assert client.get_run(again.run_id).info.status == "RUNNING"
    _epochs(again, range(2, 4))
    again.end()

    experiment = client.get_experiment_by_name("resume-test")
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs] == [first.run_id]  # one run, not two
    run = runs[0]
    assert run.info.status == "FINISHED"
    loss = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in loss) == [0, 1, 2, 3]
    assert {m.step: m.value for m in loss}[3] == pytest.approx(0.25)
    # MLflow never changes a parameter: the first value stays, the resume's is a tag
    assert run.data.params["epochs"] == "2" and run.data.params["config.lr"] == "0.1"
    assert run.data.params["world_size"] == "2"  # new on resume: added
    assert run.data.tags["gpuspark.resumed.epochs"] == "4"
    assert "gpuspark.resumed.config.lr" not in run.data.tags  # unchanged: no tag
    assert run.data.tags["gpuspark.resumes"] == "1"
    assert again.summary()["resumed"] is True

    third = tracked.start(tracking, params, folder=ckpt, resume=True)
    assert third.run_id == first.run_id
    assert _client(store).get_run(third.run_id).data.tags["gpuspark.resumes"] == "2"
    third.end()


@pytest.mark.parametrize("store", ["file"], indirect=True)
def test_a_new_run_or_a_lost_record_opens_a_new_run(
    store: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = tmp_path / "ckpt"
    tracking = tracked.Tracking(uri=store, experiment="resume-test")
    first = tracked.start(tracking, {"epochs": 2}, folder=ckpt)
    first.end()

    fresh = tracked.start(tracking, {"epochs": 2}, folder=ckpt)  # not a resume: a new run
    fresh.end()
    assert fresh.run_id != first.run_id and not fresh.resumed
    assert tracked.recorded_run(ckpt)["run_id"] == fresh.run_id  # the newest run is recorded

    other = tracked.Tracking(uri=str(tmp_path / "other-store"), experiment="resume-test")
    moved = tracked.start(other, {"epochs": 2}, folder=ckpt, resume=True)
    moved.end()
    assert moved.run_id not in (first.run_id, fresh.run_id) and not moved.resumed
    assert "not resuming run" in caplog.text and str(tmp_path / "mlruns") in caplog.text

    back = tracked.start(tracking, {"epochs": 2}, folder=ckpt, resume=True)  # the record
    back.end()  # names the other store now: a new run here, and recorded
    assert not back.resumed and tracked.recorded_run(ckpt)["run_id"] == back.run_id
    _client(store).delete_run(back.run_id)
    caplog.clear()
    gone = tracked.start(tracking, {"epochs": 2}, folder=ckpt, resume=True)
    gone.end()
    assert gone.run_id != back.run_id and "it was deleted" in caplog.text

    (ckpt / tracked.RUN_FILE).write_text("{not json")
    assert tracked.recorded_run(ckpt) is None
    unreadable = tracked.start(tracking, {}, folder=ckpt, resume=True)
    unreadable.end()
    assert not unreadable.resumed
    assert tracked.recorded_run(tmp_path / "nowhere") is None
    written = json.loads((ckpt / tracked.RUN_FILE).read_text())
    assert set(written) == {"uri", "experiment_id", "run_id"}


# -- fit(..., tracking=...) stopped after 2 epochs, resumed to 4 ------------------------------


def _fit(tmp_path: Path, uri: str, epochs: int, mode: str) -> None:
    script = tmp_path / "run.py"
    script.write_text(FIT_SCRIPT)  # test_mlflow's: a 1-rank fit with fp16 compression
    argv = [sys.executable, str(script), uri, str(tmp_path / "ckpt"), str(epochs), mode,
            "fit-resume"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_fit_resumed_logs_into_the_same_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    _fit(tmp_path, "./mlruns", 2, "new")
    _fit(tmp_path, "./mlruns", 4, "resume")
    client = _client(str(tmp_path / "mlruns"))
    runs = client.search_runs([client.get_experiment_by_name("fit-resume").experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert tracked.recorded_run(tmp_path / "ckpt")["run_id"] == run.info.run_id
    loss = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in loss) == [0, 1, 2, 3]  # epochs 2 and 3 after the resume
    assert run.data.params["epochs"] == "2"
    assert run.data.tags["gpuspark.resumed.epochs"] == "4"
    assert run.data.tags["gpuspark.resumes"] == "1"
    newest = sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name.startswith("step"))
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoint")]
    assert f"checkpoint/{newest[-1]}" in artifacts
