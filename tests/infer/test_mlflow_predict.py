"""The acceptance flow of MLflow tracking: ``gpuspark datasets synth-risk`` -> ``prep parquet``
-> ``train tabular --mlflow ./mlruns`` -> ``predict risk.parquet --model models:/tabular/1``,
each the CLI command in this process, in a fresh working directory, on the shared cluster
(the session of ``test_predict_table.py``, so neither module rebuilds it; the ranks are local
processes, as there). Then, read back with ``MlflowClient`` from the real file store: the run's
parameters, per-epoch metrics, report and checkpoint artifacts and the registered model; the
predictions equal the registered ``best.pt``'s network run in this process on the prep job's
own encoded rows; ``runs:/RUN_ID/model`` names the same checkpoint; the ``python_function``
flavour scores a pandas DataFrame through ``gpuspark.infer``.

Without Spark: a model URI that is not a gpuspark model, one that is not in the store, a
store that does not exist (nothing is created), a tracking server that is not there, and no
``mlflow`` installed are each one line."""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_predict_table import SESSION, _network, _prepared_rows  # tests/infer is on sys.path

from gpuspark.errors import CheckpointError, GpusparkError

ROWS = 2000
EPOCHS = 2


@pytest.fixture(scope="module")
def flow(spark_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The four commands, run as the docs give them (plus --local and small sizes)."""
    pytest.importorskip("mlflow")
    from gpuspark.cli.main import main

    spark = spark_factory.get(**SESSION)  # the active session: the commands reuse it
    work = tmp_path_factory.mktemp("mlflow-flow")
    mp = pytest.MonkeyPatch()
    mp.chdir(work)
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)
    mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # what gpuspark sets for a folder, undone after
    times: dict[str, float] = {}
    train = [
        "train", "tabular", "--data", "risk-shards", "-n", "2", "--epochs", str(EPOCHS),
        "--batch-size", "256", "--checkpoint-dir", "risk-run", "--test-split", "test",
        "--local", "--threads", "1", "--metrics-port", "0", "--mlflow", "./mlruns",
    ]  # fmt: skip
    steps = {
        "synth": ["datasets", "synth-risk", "risk.parquet", "--rows", str(ROWS)],
        "prep": ["prep", "parquet", "risk.parquet", "risk-shards", "--label", "default",
                 "--id", "customer_id"],
        "train": train,
        "predict": ["predict", "risk.parquet", "--model", "models:/tabular/1", "-o", "scores"],
    }  # fmt: skip
    try:
        for name, argv in steps.items():
            t0 = time.monotonic()
            assert main(argv) == 0, name
            times[name] = time.monotonic() - t0
        yield {"work": work, "spark": spark, "times": times, "store": str(work / "mlruns")}
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def client(flow: dict[str, Any]) -> Any:
    from mlflow import MlflowClient

    from gpuspark.train.tracking import use_store

    use_store(flow["store"])
    return MlflowClient(tracking_uri=flow["store"], registry_uri=flow["store"])


@pytest.fixture(scope="module")
def run(client: Any) -> Any:
    version = client.get_model_version("tabular", "1")
    return client.get_run(version.run_id)


def _by_id(ids: Any, probs: Any) -> dict[str, list[tuple[float, ...]]]:
    """id -> its rows' probabilities, sorted (a customer has one row per month)."""
    out: dict[str, list[tuple[float, ...]]] = defaultdict(list)
    for i, p in zip(ids, probs, strict=True):
        out[str(i)].append(tuple(float(v) for v in p))
    return {k: sorted(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def reference(flow: dict[str, Any]) -> dict[str, list[tuple[float, ...]]]:
    """Every prepared row's probabilities from the run's best.pt, in this process."""
    import torch

    from gpuspark.train import recipes

    trained = {"best": str(flow["work"] / "risk-run" / "best.pt"),
               "shards": str(flow["work"] / "risk-shards")}  # fmt: skip
    net = _network(trained)
    ids, probs = [], []
    with torch.no_grad():
        for batch in _prepared_rows(trained):
            x, _ = recipes.tabular_batch({**batch, "label": np.zeros(len(batch["id"]))})
            ids += [str(i) for i in batch["id"]]
            probs += list(net(x).softmax(1).numpy())
    return _by_id(ids, probs)


def _close(got: dict[str, Any], want: dict[str, Any]) -> float:
    assert got.keys() == want.keys()
    assert all(len(got[k]) == len(want[k]) for k in want)
    return max(
        abs(a - b) for k in want for g, w in zip(got[k], want[k], strict=True)
        for a, b in zip(g, w, strict=True)
    )  # fmt: skip


@pytest.mark.spark
@pytest.mark.slow  # the README flow through 4 CLI commands (~2 min); make test-all
def test_predict_models_uri_matches_the_model_in_one_process(
    flow: dict[str, Any], reference: dict[str, Any]
) -> None:
    import pyarrow.dataset as ds

    print(f"\nacceptance flow timings (s): {flow['times']}")
    table = ds.dataset(str(flow["work"] / "scores"), format="parquet").to_table()
    assert table.num_rows == ROWS == sum(len(v) for v in reference.values())
    probs = zip(table["prob_0"].to_pylist(), table["prob_1"].to_pylist(), strict=True)
    got = _by_id(table["customer_id"].to_pylist(), probs)
    assert _close(got, reference) <= 1e-6
    marker = json.loads((flow["work"] / "scores" / "_gpuspark-predict.json").read_text())
    assert marker["model"] == "models:/tabular/1"


def _per_step(client: Any, run_id: str, name: str) -> dict[int, float]:
    """A metric's value per step. MLflow 3 links the run's metrics of the model's step to the
    logged model, and its file store then lists that step's value once more: one per step."""
    out: dict[int, float] = {}
    for m in client.get_metric_history(run_id, name):
        assert out.get(m.step, m.value) == m.value, (name, m.step)
        out[m.step] = m.value
    return out


@pytest.mark.spark
@pytest.mark.slow  # the README flow through 4 CLI commands (~2 min); make test-all
def test_run_holds_params_epoch_metrics_and_artifacts(
    flow: dict[str, Any], client: Any, run: Any
) -> None:
    from gpuspark.spec import resolve_spec

    assert run.info.status == "FINISHED"
    p = run.data.params
    assert (p["recipe"], p["world_size"], p["compression"]) == ("tabular", "2", "none")
    assert p["spec"] == resolve_spec(None).name
    assert p["config.optim.epochs"] == str(EPOCHS) and p["config.optim.batch_size"] == "256"
    assert p["config.dataset.data"] == str(flow["work"] / "risk-shards")
    rid = run.info.run_id
    history = json.loads((flow["work"] / "risk-run" / "history.json").read_text())["history"]
    for name in ("loss", "val_auc", "samples_per_s", "bytes_saved", "fraction_compute"):
        assert sorted(_per_step(client, rid, name)) == list(range(EPOCHS)), name
    loss = _per_step(client, rid, "loss")
    assert [loss[e] for e in range(EPOCHS)] == pytest.approx([h["loss"] for h in history])
    val_auc = _per_step(client, rid, "val_auc")
    assert [val_auc[e] for e in range(EPOCHS)] == pytest.approx([h["val_auc"] for h in history])
    assert _per_step(client, rid, "bytes_saved") == dict.fromkeys(range(EPOCHS), 0.0)
    assert 0.5 < run.data.metrics["test_auc"] <= 1.0
    assert run.data.metrics["best_val_auc"] == pytest.approx(max(val_auc.values()))
    top = {a.path for a in client.list_artifacts(rid)}
    assert {"report.json", "checkpoint"} <= top  # the model: MLflow 3 keeps it apart
    local = Path(client.download_artifacts(rid, "report.json", str(flow["work"] / "dl")))
    report = json.loads(local.read_text())
    assert report["recipe"] == "tabular" and len(report["history"]) == EPOCHS
    assert report["test"]["auc"] == pytest.approx(run.data.metrics["test_auc"])
    ckpts = [a.path for a in client.list_artifacts(rid, "checkpoint")]
    newest = sorted(p.name for p in (flow["work"] / "risk-run").glob("step-*.pt"))[-1]
    assert ckpts == [f"checkpoint/{newest}"]


@pytest.mark.spark
@pytest.mark.slow  # the README flow through 4 CLI commands (~2 min); make test-all
def test_registered_model_is_the_runs_best_pt(flow: dict[str, Any], client: Any, run: Any) -> None:
    from gpuspark.infer.mlflow_model import read_model

    best = (flow["work"] / "risk-run" / "best.pt").read_bytes()
    by_name = read_model("models:/tabular/1", flow["store"])
    by_run = read_model(f"runs:/{run.info.run_id}/model", flow["store"])
    assert by_name.data == by_run.data == best
    assert str(by_name.path) == "models:/tabular/1" and by_name.recipe == "tabular"
    assert client.get_model_version("tabular", "1").status == "READY"


@pytest.mark.spark
@pytest.mark.slow  # the README flow through 4 CLI commands (~2 min); make test-all
def test_pyfunc_flavour_scores_a_pandas_frame_through_gpuspark_infer(
    flow: dict[str, Any], reference: dict[str, Any]
) -> None:
    import mlflow.pyfunc
    import pyarrow.parquet as pq

    from gpuspark.train.tracking import use_store

    use_store(flow["store"])
    frame = pq.read_table(str(flow["work"] / "risk.parquet")).to_pandas().head(50)
    model = mlflow.pyfunc.load_model("models:/tabular/1")
    out = model.predict(frame)
    assert len(out) == 50 and {"customer_id", "prob_0", "prob_1", "prediction"} <= set(out)
    got = _by_id(out["customer_id"], zip(out["prob_0"], out["prob_1"], strict=True))
    for cid, probs in got.items():  # each row is one of its customer's reference rows
        for row in probs:
            assert min(max(abs(a - b) for a, b in zip(row, ref, strict=True))
                       for ref in reference[cid]) <= 1e-6  # fmt: skip


# -- without Spark -------------------------------------------------------------------------------


def test_a_model_that_is_not_gpuspark_is_one_line(tmp_path: Path) -> None:
    from gpuspark.infer.mlflow_model import model_checkpoint

    (tmp_path / "MLmodel").write_text(
        "flavors:\n  python_function:\n    loader_module: mlflow.sklearn\n    data: model.pkl\n"
        "  sklearn:\n    pickled_model: model.pkl\n"
    )
    with pytest.raises(CheckpointError, match=r"is not a gpuspark model \(flavours: "
                       r"python_function, sklearn\)"):  # fmt: skip
        model_checkpoint(tmp_path, "models:/other/3")
    with pytest.raises(CheckpointError, match="is not an MLflow model"):
        model_checkpoint(tmp_path / "missing", "runs:/abc/model")


def test_an_unknown_model_uri_is_one_line_before_any_spark_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    from gpuspark.infer import predict

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    (tmp_path / "mlruns").mkdir()  # a store without that model (a missing store: below)
    with pytest.raises(CheckpointError, match=r"model models:/nope/1 cannot be found in MLflow"):
        predict(tmp_path / "t.parquet", "models:/nope/1", tmp_path / "out",
                mlflow=str(tmp_path / "mlruns"))  # fmt: skip
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("given", "store"), [(None, "{cwd}/mlruns"), ("sqlite:///m.db", "sqlite:///{cwd}/m.db")]
)
def test_predict_from_a_store_that_does_not_exist_creates_nothing(
    given: str | None,
    store: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Hardening issue, case 15: ``predict --model models:/x/1`` with no store left an empty
    ``./mlruns`` (MLflow's file store creates its folder) in the working directory."""
    from gpuspark.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    argv = ["predict", "t.parquet", "--model", "models:/x/1", "-o", "out"]
    assert main(argv + (["--mlflow", given] if given else [])) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [
        f"error: model models:/x/1 cannot be found: MLflow store {store.format(cwd=tmp_path)} "
        "does not exist (pass --mlflow URI or set MLFLOW_TRACKING_URI: the store "
        "`train --mlflow` used)"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(60)  # before the fix MLflow's client retried for minutes
def test_predict_from_a_server_that_is_not_there_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    from gpuspark.cli.main import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed when the block ends
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    assert main(["predict", "t.parquet", "--model", "models:/x/1", "-o", "out"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(
        f"error: MLflow tracking server {url} is not reachable: connection refused"
    )
    assert list(tmp_path.iterdir()) == []


def test_model_uri_without_mlflow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuspark.infer import predict

    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` fails as if not installed
    with pytest.raises(GpusparkError) as err:
        predict(tmp_path / "t.parquet", "models:/risk/2", tmp_path / "out")
    assert str(err.value) == (
        "--model models:/risk/2 needs the [mlflow] extra: mlflow is not installed "
        "(pip install 'gpuspark[mlflow]')"
    )


@pytest.mark.spark
@pytest.mark.slow  # one more training run of the flow; last in this module: it adds a version
def test_train_resume_continues_the_same_mlflow_run(
    flow: dict[str, Any], client: Any, run: Any
) -> None:
    """``train --resume --mlflow`` into the flow's checkpoint folder: the epochs after the
    checkpoint go on in the run of ``models:/tabular/1`` (mlflow-run.json in the folder), at
    their own steps, not in a new run."""
    from gpuspark.cli.main import main

    rid = run.info.run_id
    record = json.loads((flow["work"] / "risk-run" / "mlflow-run.json").read_text())
    assert record["run_id"] == rid
    mp = pytest.MonkeyPatch()
    mp.chdir(flow["work"])
    mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    try:
        argv = [
            "train", "tabular", "--data", "risk-shards", "-n", "2", "--epochs", str(EPOCHS + 1),
            "--batch-size", "256", "--checkpoint-dir", "risk-run", "--test-split", "test",
            "--local", "--threads", "1", "--metrics-port", "0", "--mlflow", "./mlruns",
            "--resume",
        ]  # fmt: skip
        assert main(argv) == 0
    finally:
        mp.undo()
    again = client.get_run(rid)
    assert again.info.status == "FINISHED" and again.data.tags["gpuspark.resumes"] == "1"
    assert sorted(_per_step(client, rid, "loss")) == list(range(EPOCHS + 1))
    runs = client.search_runs([again.info.experiment_id])
    assert [r.info.run_id for r in runs] == [rid]  # no second run
    assert client.get_model_version("tabular", "2").run_id == rid
