"""MLflow tracking of training (:mod:`gpuspark.train.tracking`): the URI rules, what an epoch
logs, the one-line error without the ``[mlflow]`` extra, ``train --mlflow [URI]`` parsing, and
``fit(..., tracking=...)`` on one real gloo rank in its own process, read back from a real
MLflow file store and a SQLite store with ``MlflowClient`` (no server).

The recipe path (``gpuspark train tabular --mlflow``: parameters, per-epoch validation AUC,
report, checkpoint, registered model) is checked on the run the acceptance test trains:
``tests/infer/test_mlflow_predict.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpuspark.errors import GpusparkError
from gpuspark.train import tracking as tracked


def test_tracking_uri_defaults_to_the_env_then_mlruns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracked.tracking_uri(None) == str(tmp_path / "mlruns")
    assert tracked.tracking_uri("") == str(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert tracked.tracking_uri(None) == "http://mlflow.example:5000"
    assert tracked.tracking_uri("runs") == str(tmp_path / "runs")  # a value wins over the env


def test_tracking_uri_makes_local_stores_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert tracked.tracking_uri("file:./mlruns") == str(tmp_path / "mlruns")
    assert tracked.tracking_uri("file:///srv/mlruns") == "/srv/mlruns"
    assert tracked.tracking_uri("sqlite:///m.db") == f"sqlite:///{tmp_path / 'm.db'}"
    assert tracked.tracking_uri("sqlite:////srv/m.db") == "sqlite:////srv/m.db"
    for uri in ("http://h:5000", "https://h", "databricks", "postgresql://u@h/db"):
        assert tracked.tracking_uri(uri) == uri
    assert tracked.is_file_store(tracked.tracking_uri("./mlruns"))
    assert not tracked.is_file_store(tracked.tracking_uri("sqlite:///m.db"))


def test_epoch_values_are_the_reports_numbers() -> None:
    m = {
        "epoch": 3,
        "loss": 0.5,
        "samples_per_s": 120.0,
        "bytes_raw": 1000,
        "bytes_sent": 250,
        "fractions": {"compute": 0.7, "data_wait": 0.1},
        "memory": {"params": 64},
        "val_auc": 0.81,
        "val_pr_auc": None,
        "restarts": 0,
        "flag": True,
        "note": "text",
        "nan": float("nan"),
    }
    assert tracked.epoch_values(m) == {
        "loss": 0.5,
        "samples_per_s": 120.0,
        "bytes_raw": 1000.0,
        "bytes_sent": 250.0,
        "bytes_saved": 750.0,
        "fraction_compute": 0.7,
        "fraction_data_wait": 0.1,
        "memory_params": 64.0,
        "val_auc": 0.81,
        "restarts": 0.0,
    }


def test_flat_params_name_nested_options_by_path() -> None:
    params = tracked.flat_params(
        {
            "recipe": "tabular",
            "config": {"optim": {"lr": 0.001}, "model": {"options": {}}},
            "splits": ["a", "b"],
            "none": None,
        }
    )
    assert params == {"recipe": "tabular", "config.optim.lr": "0.001", "splits": '["a", "b"]'}


def test_missing_mlflow_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` fails as if not installed
    with pytest.raises(GpusparkError) as err:
        tracked.prepare("./mlruns", model_name="tabular")
    assert str(err.value) == (
        "train --mlflow needs the [mlflow] extra: mlflow is not installed "
        "(pip install 'gpuspark[mlflow]')"
    )


def test_cli_mlflow_takes_an_optional_uri() -> None:
    from gpuspark.cli.cmd_train import _tracking

    assert _tracking(False, None, []) is None
    assert _tracking(True, None, []) == tracked.Tracking()
    assert _tracking(True, "risk", ["sqlite:///m.db"]) == tracked.Tracking(
        uri="sqlite:///m.db", model_name="risk"
    )
    with pytest.raises(Exception, match="unexpected argument"):
        _tracking(False, None, ["./mlruns"])
    with pytest.raises(Exception, match="unexpected argument"):
        _tracking(True, None, ["a", "b"])
    with pytest.raises(Exception, match="--mlflow-model needs --mlflow"):
        _tracking(False, "risk", [])


# -- fit(..., tracking=...) against a real store -----------------------------------------------

FIT_SCRIPT = textwrap.dedent(
    """
    import os, socket, sys
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    import torch
    from gpuspark.train import fit, prepare
    from gpuspark.train.loop import FitConfig
    from gpuspark.train.tracking import Tracking

    torch.manual_seed(0)
    xs = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(4)]
    m = prepare(torch.nn.Linear(4, 2), compression="fp16")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    # argv: URI CHECKPOINT_DIR [EPOCHS [new|resume [EXPERIMENT]]]
    more = sys.argv[3:] + ["2", "new", "fit-test"][len(sys.argv) - 3:]
    cfg = FitConfig(epochs=int(more[0]), log=None, metrics_port=0, checkpoint_dir=sys.argv[2],
                    resume=more[1] == "resume")
    fit(m, opt, torch.nn.functional.cross_entropy, xs, config=cfg,
        tracking=Tracking(uri=sys.argv[1], experiment=more[2]))
    """
)


def _fit_run(tmp_path: Path, uri: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run the script in its own process; the MLflow run it logged (read back here)."""
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # what use_store sets, undone after
    from mlflow import MlflowClient

    script = tmp_path / "run.py"
    script.write_text(FIT_SCRIPT)
    argv = [sys.executable, str(script), uri, str(tmp_path / "ckpt")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    local = tmp_path / "mlruns" if uri == "./mlruns" else f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracked.use_store(str(local))
    client = MlflowClient()
    experiment = client.get_experiment_by_name("fit-test")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    return client, runs[0]


@pytest.mark.parametrize("store", ["file", "sqlite"])
def test_fit_logs_params_epochs_and_the_checkpoint(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if store == "sqlite":
        pytest.importorskip("sqlalchemy")
        pytest.importorskip("alembic")
    uri = "./mlruns" if store == "file" else "sqlite:///mlflow.db"
    client, run = _fit_run(tmp_path, uri, monkeypatch)
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["epochs"] == "2" and params["world_size"] == "1"
    assert params["compression"] == "fp16" and params["accum_steps"] == "1"
    loss = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in loss] == [0, 1] and all(m.value > 0 for m in loss)
    for name in ("samples_per_s", "compute_s", "fraction_compute", "bytes_raw", "bytes_saved"):
        assert len(client.get_metric_history(run.info.run_id, name)) == 2, name
    raw = client.get_metric_history(run.info.run_id, "bytes_raw")[-1].value
    saved = client.get_metric_history(run.info.run_id, "bytes_saved")[-1].value
    assert raw > 0 and saved == raw / 2  # fp16: half the gradient bytes not sent
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoint")]
    newest = sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name.startswith("step"))
    assert artifacts == [f"checkpoint/{newest[-1]}"]
    target = tmp_path / "mlruns" if store == "file" else tmp_path / "mlflow.db"
    assert target.exists()  # the relative store, made absolute against the run's directory
