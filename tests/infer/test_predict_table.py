"""``gpuspark.infer.predict`` on a real Spark cluster: a synthetic risk table, prepared with
``prep parquet``, a ``tabular`` model trained 1 epoch on 2 local ranks, then scored through
Spark and compared, row by row, with the same network run in this process on the rows the prep
job wrote (so the serving encoding is the training encoding); an unseen category, NaN, infinite
and non-numeric values; the model loaded once per Python worker; the destination's rules; a
model/table mismatch refused before any Spark job.

The session is the shared cluster's with 2 executors of 1 GPU and 2 cores, 0.5 GPU per task:
4 Python workers at most (more tasks than workers, and a light load on a small machine)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuspark.errors import CheckpointError, DatasetExistsError, RecipeError
from gpuspark.infer import MARKER, QUARANTINE_DIR, load_model, predict

# ~60 s of set-up (synthetic table, prep, a 1-epoch training) before the first prediction: an
# end-to-end path, so `make test-all`; tests/infer/test_predict_parts.py runs by default.
pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 2000
SESSION = {
    "spark.executor.resource.gpu.amount": "1",
    "spark.task.resource.gpu.amount": "0.5",
    "spark.executor.cores": "2",
    "spark.cores.max": "4",
    "spark.sql.shuffle.partitions": "4",  # prep's aggregations: 2,000 rows
}
NOT_FEATURES = ("customer_id", "default", "row_id")


@pytest.fixture(scope="module")
def spark_half(spark_factory: Any) -> Any:
    return spark_factory.get(**SESSION)


@pytest.fixture(scope="module")
def trained(spark_half: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Source table, its prepared dataset and ``best.pt``, with the timings of each step."""
    from pyspark.sql import functions as F

    from gpuspark.data.prep import prep_parquet
    from gpuspark.demo.synth_risk import risk_frame
    from gpuspark.train import recipes

    tmp = tmp_path_factory.mktemp("predict")
    times: dict[str, float] = {}
    t0 = time.monotonic()
    spark_half.range(1).count()  # the session's executors are up
    times["session"] = time.monotonic() - t0
    t0 = time.monotonic()
    df = risk_frame(spark_half, ROWS, 3, 1).withColumn(
        "row_id", F.concat_ws("-", "customer_id", F.col("month").cast("string"))
    )
    src = str(tmp / "risk.parquet")
    df.write.parquet(src)
    features = [c for c in df.columns if c not in NOT_FEATURES]
    times["synth"] = time.monotonic() - t0
    t0 = time.monotonic()
    shards = str(tmp / "shards")
    prep = prep_parquet(
        src, shards, label="default", id="row_id", features=features, spark=spark_half
    )
    assert prep.rows == ROWS and prep.quarantined == 0
    times["prep"] = time.monotonic() - t0
    times.update({f"prep {k}": v for k, v in prep.timings.items()})
    t0 = time.monotonic()
    cfg = recipes.RecipeConfig(
        data=shards, epochs=1, batch_size=256, threads=1, out=str(tmp / "run")
    )
    recipes.run("tabular", cfg, num_processes=2, local=True, timeout=120)
    times["train"] = time.monotonic() - t0
    best = tmp / "run" / "best.pt"
    assert best.is_file()
    return {"tmp": tmp, "src": src, "shards": shards, "best": str(best), "times": times}


def _network(trained: dict[str, Any]) -> Any:
    """The trained network as the recipe builds it from the dataset, with best.pt's weights."""
    import torch

    from gpuspark.train import recipes

    payload = torch.load(trained["best"], map_location="cpu", weights_only=False)
    opts = payload["config"]["model"]["options"]["tabular"]
    cfg = recipes.RecipeConfig(data=trained["shards"], hidden=opts["hidden"], layers=opts["layers"])
    net = recipes.build_tabular(cfg, 2)
    net.load_state_dict(payload["model"])
    return net.eval()


def _prepared_rows(trained: dict[str, Any]) -> Any:
    """The prep job's rows (``id``, ``x``, ``c``) in blocks."""
    from gpuspark.data.load import TableDataset, World

    ds = TableDataset(
        trained["shards"], columns=["id", "x", "c"], shuffle=False, drop_last=False, world=World()
    )
    return ds.loader(512, pin_memory=False)


@pytest.fixture(scope="module")
def reference(trained: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every prepared row's probabilities from the trained network in this process, by id."""
    import torch

    from gpuspark.train import recipes

    net, out = _network(trained), {}
    with torch.no_grad():
        for batch in _prepared_rows(trained):
            x, _ = recipes.tabular_batch({**batch, "label": np.zeros(len(batch["id"]))})
            out.update(zip((str(i) for i in batch["id"]), net(x).softmax(1).numpy(), strict=True))
    return out


@pytest.fixture(scope="module")
def first(trained: dict[str, Any], spark_half: Any) -> dict[str, Any]:
    out = trained["tmp"] / "predictions"
    t0 = time.monotonic()
    res = predict(
        trained["src"],
        trained["best"],
        out,
        id="row_id",
        batch_size=32,
        partitions=8,
        spark=spark_half,
    )
    return {"res": res, "out": out, "seconds": time.monotonic() - t0}


def _read(folder: Path) -> Any:
    import pyarrow.dataset as ds

    return ds.dataset(str(folder), format="parquet").to_table().sort_by("row_id").to_pylist()


def test_every_row_matches_the_model_in_one_process(
    first: dict[str, Any], reference: dict[str, np.ndarray], trained: dict[str, Any]
) -> None:
    res, rows = first["res"], _read(first["out"])
    print(f"\ntimings {trained['times']}, predict {first['seconds']:.1f} s: {res.as_dict()}")
    assert res.rows == ROWS == len(rows) == len(reference) and res.quarantined == 0
    assert res.columns == ["row_id", "prob_0", "prob_1", "prediction"]
    assert [r["row_id"] for r in rows] == sorted(reference)  # every row once, in id order
    got = np.array([[r["prob_0"], r["prob_1"]] for r in rows])
    want = np.stack([reference[r["row_id"]] for r in rows])
    assert np.abs(got - want).max() <= 1e-6
    assert [r["prediction"] for r in rows] == want.argmax(1).tolist()  # label values 0, 1
    assert res.devices == {"cpu": ROWS}  # simulated GPU slots: no CUDA, the CPU
    marker = json.loads((first["out"] / MARKER).read_text())
    assert marker["rows"] == ROWS and marker["model"] == trained["best"]


def test_model_is_loaded_once_per_python_worker(first: dict[str, Any]) -> None:
    res = first["res"]
    assert res.tasks == 8 and res.batches >= ROWS // 32
    assert res.max_loads_per_worker == 1 and res.model_loads == res.workers
    assert res.workers < res.tasks  # workers were reused across tasks (and batches)
    assert res.rows_per_s > 0


def test_unseen_category_nan_and_text_rows(
    first: dict[str, Any],
    reference: dict[str, np.ndarray],
    trained: dict[str, Any],
    spark_half: Any,
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(trained["src"]).sort_by("row_id").slice(0, 40)
    rows = table.to_pylist()
    unseen, nan, text, inf = (rows[i]["row_id"] for i in (1, 2, 3, 4))
    rows[1]["region"] = "region_99"  # no training row had it: code 0, scored
    rows[2]["income"] = math.nan
    rows[3]["age"] = "abc"
    rows[4]["income"] = math.inf
    for r in rows[:3] + rows[4:]:
        r["age"] = str(r["age"])  # a text column: numbers in it parse, as in prep
    schema = table.schema.set(table.schema.get_field_index("age"), pa.field("age", pa.string()))
    schema = schema.remove_metadata()  # else Spark reads the source's own schema (age: int)
    small = trained["tmp"] / "odd.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), small)
    out = trained["tmp"] / "odd-predictions"
    res = predict(small, trained["best"], out, id="row_id", batch_size=8, spark=spark_half)
    assert res.rows == 37 and res.quarantined == 3
    assert res.max_loads_per_worker <= 1  # a reused worker has the model already
    got = {r["row_id"]: r for r in _read(out)}
    assert set(got) == {r["row_id"] for r in rows} - {nan, text, inf}
    for rid, row in got.items():
        want = reference[rid] if rid != unseen else _with_region_unseen(trained, rid)
        assert abs(row["prob_1"] - want[1]) <= 1e-6, rid
    assert abs(got[unseen]["prob_1"] - reference[unseen][1]) > 0  # the code did change
    quarantined = {r["row_id"]: r["reason"] for r in _read(out / QUARANTINE_DIR)}
    assert quarantined == {
        nan: "column income: NaN value",
        text: "column age: not a number: 'abc'",
        inf: "column income: infinite value",
    }
    assert res.by_reason == {
        "column income: NaN value": 1,
        "column age: not a number": 1,
        "column income: infinite value": 1,
    }


def _with_region_unseen(trained: dict[str, Any], rid: str) -> np.ndarray:
    """The reference row ``rid`` with its ``region`` code set to 0 (not in the vocabulary)."""
    import torch

    from gpuspark.data import format as fmt
    from gpuspark.train import recipes

    tab = fmt.load_manifest(trained["shards"]).extra["tabular"]
    net = _network(trained)
    for batch in _prepared_rows(trained):
        ids = [str(i) for i in batch["id"]]
        if rid in ids:
            k = ids.index(rid)
            c = np.array(batch["c"][k : k + 1], dtype=np.int32)
            c[0, tab["categorical"].index("region")] = 0
            x, _ = recipes.tabular_batch({"x": batch["x"][k : k + 1], "c": c, "label": [0]})
            with torch.no_grad():
                return net(x).softmax(1).numpy()[0]
    raise AssertionError(rid)


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def test_existing_destination_is_refused_and_untouched(
    first: dict[str, Any], trained: dict[str, Any], spark_half: Any
) -> None:
    out = first["out"]
    before = _tree(out)
    with pytest.raises(DatasetExistsError, match=r"already exists.*--overwrite"):
        predict(trained["src"], trained["best"], out, spark=spark_half)
    mine = trained["tmp"] / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    with pytest.raises(DatasetExistsError, match="not written by gpuspark predict"):
        predict(trained["src"], trained["best"], mine, overwrite=True, spark=spark_half)
    assert _tree(out) == before and (mine / "notes.txt").read_text() == "keep me\n"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".predictions.")]


def _jobs(spark: Any) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup())


def test_model_table_mismatch_fails_before_any_spark_job(
    trained: dict[str, Any], spark_half: Any
) -> None:
    import pyarrow.parquet as pq

    spark = spark_half
    lacking = trained["tmp"] / "lacking.parquet"
    pq.write_table(pq.read_table(trained["src"]).drop_columns(["income", "region"]), lacking)
    frame = spark.read.parquet(trained["src"]).drop("income")
    jobs = _jobs(spark)
    with pytest.raises(RecipeError, match=r"lacks 2 feature column\(s\) of model .*income, region"):
        predict(lacking, trained["best"], trained["tmp"] / "x", spark=spark)
    with pytest.raises(RecipeError, match=r"lacks 1 feature column.*: income"):
        predict(frame, trained["best"], trained["tmp"] / "y")
    assert _jobs(spark) == jobs
    assert not (trained["tmp"] / "x").exists() and not (trained["tmp"] / "y").exists()


def test_checkpoint_records_the_preprocessing(trained: dict[str, Any], tmp_path: Path) -> None:
    """``best.pt`` carries the prep's vocabularies; an older one without them reads the
    dataset's manifest; a training checkpoint or another recipe's is refused in one line."""
    import torch

    from gpuspark.data import format as fmt

    loaded = load_model(trained["best"])
    tab = fmt.load_manifest(trained["shards"]).extra["tabular"]
    assert loaded.serving.numeric == tuple(tab["numeric"])
    region = tab["categorical"].index("region")
    assert loaded.serving.vocab[region] == tuple(tab["stats"]["categorical"]["region"]["vocab"])
    assert loaded.serving.dataset == trained["shards"] and load_model(Path(trained["best"]).parent)
    payload = torch.load(trained["best"], map_location="cpu", weights_only=False)
    old = dict(payload)
    del old["dataset"]
    torch.save(old, tmp_path / "best.pt")
    assert load_model(tmp_path / "best.pt").serving == loaded.serving  # from the manifest
    torch.save({**old, "recipe": "bert"}, tmp_path / "other.pt")
    with pytest.raises(RecipeError, match=r"recipe 'bert'; predict serves tabular \(tables\)"):
        load_model(tmp_path / "other.pt")
    torch.save({**old, "recipe": "resnet3d"}, tmp_path / "ct.pt")
    with pytest.raises(RecipeError, match="recipe 'resnet3d', which scores DICOM studies"):
        load_model(tmp_path / "ct.pt")
    (tmp_path / "step-000000001.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="training checkpoint"):
        load_model(tmp_path / "step-000000001.pt")


def test_cli_mismatch_is_one_line_before_spark(
    trained: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import pyarrow.parquet as pq

    from _no_work import refuse_work  # tests/_no_work.py
    from gpuspark.cli.main import main

    lacking = tmp_path / "lacking.parquet"
    pq.write_table(pq.read_table(trained["src"]).drop_columns(["age"]), lacking)
    refuse_work(monkeypatch, tmp_path, tmp_path)  # starting Spark would raise Started
    argv = ["predict", str(lacking), "--model", trained["best"], "-o", str(tmp_path / "out")]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lacks 1 feature column(s)" in err[0] and ": age" in err[0]
    assert not (tmp_path / "out").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".out.")]


def test_cli_writes_and_prints_the_result(
    trained: dict[str, Any], spark_half: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gpuspark predict ... --json`` (on the active session, as in a notebook), then again
    with ``--overwrite``: the earlier predictions are replaced."""
    from gpuspark.cli.main import main

    out = trained["tmp"] / "cli-predictions"
    argv = ["predict", trained["src"], "--model", str(Path(trained["best"]).parent), "-o", str(out)]
    assert main([*argv, "--id", "row_id", "--batch-size", "500", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    with capsys.disabled():
        rate = f"{res['rows']} rows in {res['predict_s']} s, {res['rows_per_s']} rows/s"
        print(f"\nwarm workers: {rate}")
    assert res["rows"] == ROWS and res["columns"][0] == "row_id" and res["output"] == str(out)
    assert res["max_loads_per_worker"] <= 1 and res["batches"] >= ROWS // 500
    assert main([*argv, "--json"]) == 1  # exists: refused, as one JSON object under --json
    assert "already exists" in json.loads(capsys.readouterr().out)["error"]
    assert main([*argv, "--overwrite"]) == 0
    printed = capsys.readouterr().out
    assert "model loads per worker" in printed and f"predict -> {out}" in " ".join(printed.split())
    assert _read_columns(out)[:3] == ["customer_id", "default", "row_id"]  # every non-feature


def _read_columns(folder: Path) -> list[str]:
    import pyarrow.dataset as ds

    return ds.dataset(str(folder), format="parquet").schema.names


def test_a_torch_export_file_of_best_pt_predicts_the_same(
    first: dict[str, Any], trained: dict[str, Any], spark_half: Any
) -> None:
    """``export_model`` writes best.pt as a .pt2 file (torch.export) with its preprocessing;
    predict serves it like the checkpoint: the same rows and probabilities."""
    from gpuspark.infer import export_model

    pt2 = export_model(trained["best"], trained["tmp"] / "model.pt2", kind="export")
    out = trained["tmp"] / "pt2-predictions"
    res = predict(trained["src"], pt2, out, id="row_id", batch_size=500, spark=spark_half)
    got, want = _read(out), _read(first["out"])
    assert res.rows == ROWS and res.model == str(pt2)
    assert [r["row_id"] for r in got] == [r["row_id"] for r in want]
    diff = max(abs(g["prob_1"] - w["prob_1"]) for g, w in zip(got, want, strict=True))
    assert diff <= 1e-6 and [g["prediction"] for g in got] == [w["prediction"] for w in want]
