"""``gpuspark predict dicom``: new DICOM studies scored with a ``resnet3d`` checkpoint.

Without Spark (the default run): the preprocessing read back from a checkpoint's lineage, the
scoring function of the tasks run in this process against the network on volumes made here,
and the checks that refuse a model before any Spark job (a tabular checkpoint, a model that
does not take the recorded volume shape, a dataset not made by ``prep dicom``).

On the shared Spark cluster (``spark``, ``slow``): a synthetic CT cohort prepared with
``prep dicom`` and NON-default options (window 30,300, shape 12x24x24, spacing 6 mm), a
checkpoint recording that dataset's lineage (as ``gpuspark train`` writes it), and the cohort's
DICOM files plus a junk file and a series with a truncated slice, scored through Spark: every
series' probabilities equal the network run in this process on the training shards' own
volumes, in id order; a default-option preprocessing would have given other numbers; the
junk file and the broken series are quarantined with their reasons; the model is loaded once
per Python worker.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuspark.data.sources import DicomOptions, Window, prep_series
from gpuspark.demo import load_cohort, synth_ct
from gpuspark.errors import CheckpointError, RecipeError
from gpuspark.infer import MARKER, QUARANTINE_DIR, load_model, load_volume_model
from gpuspark.infer.dicom import SeriesTask, series_function, volume_input

SHAPE = (12, 24, 24)
WINDOW = (30.0, 300.0)  # not a preset: the default is soft-tissue (40, 400)
SPACING = (6.0, 6.0, 6.0)
RE_WINDOW = (100.0, 100.0)  # the model's own re-window of the stored uint8 volumes (as the demo)


def _prep_record(shape: Any = SHAPE, window: Any = WINDOW, dtype: str = "uint8") -> dict:
    """``manifest.extra["prep"]`` as ``prep dicom`` records it (data/prep/dicom.py)."""
    level, width = window if window is not None else (None, None)
    return {
        "kind": "dicom",
        "source": "/data/ct",
        "spacing": list(SPACING),
        "shape": list(shape) if shape is not None else None,
        "axes": "zyx",
        "window": {"name": "custom" if window else "hu", "level": level, "width": width},
        "dtype": dtype if window is not None else "int16",
        "split": None,
        "split_by": "sha256 of hashed patient id",
        "min_slices": 3,
    }


def _config(data: str, **model: Any) -> Any:
    from gpuspark.train import recipes

    opts = {"depth": 10, "width": 0.25, "stem_stride": 2, "window": RE_WINDOW, **model}
    return recipes.RecipeConfig(data=data, **opts)


def _best_pt(
    folder: Path,
    extra: dict[str, Any],
    cfg: Any,
    recipe: str = "resnet3d",
    seed: int = 0,
    dataset: str = "/data/ct-shards",
) -> Path:
    """A ``best.pt`` as ``gpuspark train`` exports it (train/recipes/rank.py: recipe, epoch,
    score(s), ``asdict`` of the config, the weights, the dataset's lineage), of an untrained
    network of ``recipe`` with seeded weights."""
    import torch

    from gpuspark.train.recipes.registry import get_recipe

    torch.manual_seed(seed)
    net = get_recipe(recipe).build_model(cfg, 2)
    with torch.no_grad():  # spread the outputs a little beyond an untrained net's near-ties
        for p in net.parameters():
            p.mul_(1.5)
    payload = {
        "recipe": recipe,
        "epoch": 0,
        "score": 0.5,
        "scores": {},
        "config": asdict(cfg),
        "model": net.state_dict(),
        "dataset": {"path": dataset, "provenance": {}, "extra": extra},
    }
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(payload, folder / "best.pt")
    return folder / "best.pt"


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ct") / "cohort"
    synth_ct(root, studies=8, seed=7, size=32)
    return root


def _series_files(cohort: Path) -> dict[str, list[str]]:
    return {p.series_uid: [str(cohort / "dicom" / f) for f in p.files] for p in load_cohort(cohort)}


def _truncate_pixels(path: Path) -> None:
    """Cut the end of the file's pixel data (the header stays readable)."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 700])


# ---------------------------------------------------------------------------- no Spark


def test_recorded_preprocessing_is_what_predict_applies(tmp_path: Path) -> None:
    best = _best_pt(tmp_path / "run", {"prep": _prep_record()}, _config("/data/ct-shards"))
    loaded = load_volume_model(tmp_path / "run")  # the run folder holding best.pt
    assert loaded.options == DicomOptions(
        spacing=SPACING, shape=SHAPE, window=Window("custom", *WINDOW), dtype="uint8"
    )
    assert loaded.input_shape == (1, *SHAPE) and loaded.classes == 2
    assert (loaded.recipe, loaded.path, loaded.dataset) == (
        "resnet3d",
        str(best),
        "/data/ct-shards",
    )
    raw = _best_pt(tmp_path / "hu", {"prep": _prep_record(window=None)}, _config("d", window=None))
    assert load_volume_model(raw).options.window.raw  # raw HU (int16), as recorded


def test_tasks_score_series_as_the_network_does_on_prep_series_volumes(
    cohort: Path, tmp_path: Path
) -> None:
    """The ``mapInArrow`` function, run in this process: batches of 3 volumes, one series
    broken (quarantined, the others still scored), every probability equal to the network
    on the volume ``prep_series`` makes with the recorded options."""
    import pyarrow as pa
    import torch

    from gpuspark.infer.volume import build_volume_network

    best = _best_pt(tmp_path / "run", {"prep": _prep_record()}, _config("d"))
    loaded = load_volume_model(best)
    copy = tmp_path / "cohort"
    shutil.copytree(cohort, copy)  # the cohort is the module's: break a copy
    files = _series_files(copy)
    ids = sorted(files)
    broken = Path(files[ids[2]][5])
    _truncate_pixels(broken)
    task = SeriesTask(loaded.key, loaded.options, loaded.decode, ("prob_0", "prob_1"), 3)
    added: dict[str, Any] = {"rows": 0, "quarantined": 0, "bad": []}
    stats: list[dict[str, Any]] = []
    counters = {k: _Acc(added, k) for k in added}
    series = _Value([(i, "?", sorted(files[i])) for i in ids])  # the broadcast list
    batch = pa.RecordBatch.from_pydict({"id": pa.array(range(len(ids)), pa.int64())})
    fn = series_function(task, _Value(loaded.data), series, counters, _Stats(stats))
    out = pa.Table.from_batches(list(fn([batch.slice(0, 4), batch.slice(4)]))).to_pylist()
    assert [r["id"] for r in out] == ids[:2] + ids[3:]  # the scored series in input order
    (bad,) = added.pop("bad")
    assert (bad["id"], bad["stage"], bad["path"]) == (ids[2], "series", str(broken))
    assert "pixel" in bad["reason"].lower(), bad["reason"]
    assert added == {"rows": len(ids) - 1, "quarantined": 1}
    assert stats[0]["batches"] == 3 and stats[0]["rows"] == len(ids) - 1  # 3 + 3 + 1
    net = build_volume_network(loaded.data, loaded.path)
    for row in out:
        x, study = volume_input(loaded.options, loaded.decode, files[row["id"]])
        with torch.no_grad():
            want = net(torch.from_numpy(x[None])).softmax(1).numpy()[0]
        assert np.abs(np.array([row["prob_0"], row["prob_1"]]) - want).max() <= 1e-6
        assert row["prediction"] == int(want.argmax()) and row["study_uid"] == study


class _Acc:
    """An accumulator as a task sees it (``add``)."""

    def __init__(self, into: dict[str, Any], key: str) -> None:
        self.into, self.key = into, key

    def add(self, n: Any) -> None:
        self.into[self.key] += n


class _Stats:
    def __init__(self, into: list[dict[str, Any]]) -> None:
        self.into = into

    def add(self, value: dict[str, dict[str, Any]]) -> None:
        self.into.extend(value.values())


class _Value:
    """A broadcast as a task sees it (``value``)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _one_line_before_spark(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    from _no_work import refuse_work  # tests/_no_work.py
    from gpuspark.cli.main import main

    refuse_work(monkeypatch, tmp_path, tmp_path)  # starting Spark would raise Started
    assert main([*argv, "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not (tmp_path / "out").exists()
    return err[0]


def test_tabular_checkpoint_to_predict_dicom_is_one_line_before_spark(
    cohort: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from test_predict_parts import _best_pt as tabular_best_pt  # tests/infer/

    best = tabular_best_pt(tmp_path)
    argv = ["predict", "dicom", str(cohort / "dicom"), "--model", str(best)]
    line = _one_line_before_spark(argv, tmp_path, monkeypatch, capsys)
    assert "is a 'tabular' checkpoint, which scores tables, not DICOM studies" in line
    assert "predict dicom serves checkpoints of resnet3d" in line


def test_resnet3d_checkpoint_to_table_predict_points_to_predict_dicom(tmp_path: Path) -> None:
    best = _best_pt(tmp_path / "run", {"prep": _prep_record()}, _config("d"))
    with pytest.raises(RecipeError, match=r"recipe 'resnet3d', which scores DICOM studies") as e:
        load_model(best)
    assert "gpuspark predict dicom STUDIES" in str(e.value.remedy)


def _flat3d(cfg: Any, classes: int) -> Any:
    """A network that takes one volume shape only (its linear layer's width)."""
    import torch

    z, y, x = cfg.extra["volume_shape"]
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(z * y * x, classes))


@pytest.fixture
def flat3d() -> Any:
    """A recipe registered in this process: a network with a fixed volume shape."""
    from gpuspark.train.recipes.registry import (
        Recipe,
        get_recipe,
        register_recipe,
        unregister_recipe,
    )
    from gpuspark.train.recipes.resnet3d import binary_classes, binary_metrics, decode_volume

    base = get_recipe("resnet3d")
    recipe = Recipe(
        name="test-flat3d",
        description="a fixed-shape volume network (tests)",
        keys=base.keys,
        build_model=_flat3d,
        decoder=lambda cfg, manifest: decode_volume,
        num_classes=binary_classes,
        metrics=binary_metrics,
        best_by=base.best_by,
        input_kind="volume",
    )
    yield register_recipe(recipe)
    unregister_recipe(recipe.name)


def test_volume_shape_unlike_the_manifest_is_one_line_before_spark(
    flat3d: Any,
    cohort: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gpuspark.train import recipes

    fits = recipes.RecipeConfig(data="d", extra={"volume_shape": list(SHAPE)})
    best = _best_pt(tmp_path / "fits", {"prep": _prep_record()}, fits, recipe=flat3d.name)
    assert load_volume_model(best).input_shape == (1, *SHAPE)  # the same network takes it
    other = recipes.RecipeConfig(data="d", extra={"volume_shape": [16, 24, 24]})
    best = _best_pt(tmp_path / "other", {"prep": _prep_record()}, other, recipe=flat3d.name)
    argv = ["predict", "dicom", str(cohort / "dicom"), "--model", str(best)]
    line = _one_line_before_spark(argv, tmp_path, monkeypatch, capsys)
    assert "does not take the volumes its training dataset's preprocessing makes" in line
    assert "shape [12, 24, 24], model input [1, 12, 24, 24]" in line
    assert "6912" in line and "9216" in line  # torch's own words: 12*24*24 vs 16*24*24


def test_checkpoints_whose_preprocessing_is_unknown_or_unservable_are_refused(
    tmp_path: Path,
) -> None:
    images = {"prep": {"kind": "images", "source": "/data/img"}}
    best = _best_pt(tmp_path / "a", images, _config("d"))
    with pytest.raises(CheckpointError, match=r"not made by `gpuspark prep dicom`.*'images'"):
        load_volume_model(best)
    f16 = _best_pt(tmp_path / "b", {"prep": _prep_record(dtype="float16")}, _config("d"))
    with pytest.raises(RecipeError, match=r"window=\(100.0, 100.0\) needs uint8 volumes"):
        load_volume_model(f16)  # resnet3d's re-window needs the uint8 the prep did not write
    bad_weights = _best_pt(tmp_path / "c", {"prep": _prep_record()}, _config("d", depth=18))
    import torch

    payload = torch.load(bad_weights, weights_only=False)
    payload["config"]["model"]["options"]["resnet3d"]["depth"] = 10
    torch.save(payload, bad_weights)
    with pytest.raises(CheckpointError, match=r"weights do not fit the resnet3d network"):
        load_volume_model(bad_weights)


# ----------------------------------------------------------------------------- on Spark


@pytest.fixture(scope="module")
def spark_half(spark_factory: Any) -> Any:
    """The session of test_predict_table.py (2 executors, 0.5 GPU per task: 4 Python workers
    at most on this small machine)."""
    from test_predict_table import SESSION  # tests/infer/

    return spark_factory.get(**SESSION)


@pytest.fixture(scope="module")
def prepared(spark_half: Any, cohort: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The cohort prepared with non-default options, and a checkpoint of that dataset."""
    from gpuspark.data import format as fmt
    from gpuspark.data.prep import prep_dicom
    from gpuspark.train.recipes.rank import dataset_lineage

    tmp = tmp_path_factory.mktemp("predict-dicom")
    shards = tmp / "shards"
    t0 = time.monotonic()
    spark_half.range(1).count()  # the session's executors are up
    times = {"session": time.monotonic() - t0}
    t0 = time.monotonic()
    res = prep_dicom(
        cohort / "dicom",
        shards,
        labels=cohort / "labels.csv",
        spacing=SPACING,
        shape=SHAPE,
        window=WINDOW,
        split=None,
        spark=spark_half,
    )
    assert res.rows == 8 and res.quarantined == 0
    times["prep"] = time.monotonic() - t0
    cfg = _config(str(shards))
    lineage = dataset_lineage(cfg, fmt.load_manifest(shards))
    best = _best_pt(tmp / "run", lineage["extra"], cfg, dataset=lineage["path"])
    studies = tmp / "studies"
    shutil.copytree(cohort / "dicom", studies)
    (studies / "junk.dcm").write_bytes(b"not a DICOM file at all\n" * 20)
    files = _series_files(cohort)
    broken_id = sorted(files)[3]
    broken = studies / Path(files[broken_id][7]).relative_to(cohort / "dicom")
    _truncate_pixels(broken)
    return {
        "tmp": tmp,
        "shards": shards,
        "best": best,
        "cfg": cfg,
        "studies": studies,
        "broken": (broken_id, str(broken)),
        "times": times,
    }


@pytest.fixture(scope="module")
def reference(prepared: dict) -> dict[str, np.ndarray]:
    """Every training volume's probabilities, in this process: the shards' own volumes, the
    recipe's decoder of the dataset's manifest, the network loaded from best.pt."""
    import torch

    from gpuspark.data import format as fmt
    from gpuspark.data.load import ShardDataset, World
    from gpuspark.train.recipes.resnet3d import build_resnet3d, volume_decoder

    decode = volume_decoder(prepared["cfg"], fmt.load_manifest(prepared["shards"]))
    net = build_resnet3d(prepared["cfg"], 2)
    net.load_state_dict(torch.load(prepared["best"], weights_only=False)["model"])
    net.eval()
    ds = ShardDataset(
        prepared["shards"], decode="raw", shuffle=False, drop_last=False, world=World()
    )
    out = {}
    with torch.no_grad():
        for sample in ds:
            x, _ = decode(sample)
            out[str(sample["id"])] = net(torch.from_numpy(x[None])).softmax(1).numpy()[0]
    return out


@pytest.fixture(scope="module")
def scored(prepared: dict, spark_half: Any) -> dict[str, Any]:
    from gpuspark.infer import predict

    out = prepared["tmp"] / "predictions"
    t0 = time.monotonic()
    res = predict(
        prepared["studies"], prepared["best"], out, kind="dicom", batch_size=3, partitions=3,
        spark=spark_half,
    )  # fmt: skip
    prepared["times"]["predict"] = time.monotonic() - t0
    return {"res": res, "out": out}


def _rows(folder: Path) -> list[dict[str, Any]]:
    """The folder's rows, the part files read in name order (Spark's task order)."""
    import pyarrow.parquet as pq

    files = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith(("_", ".")))
    return [r for f in files for r in pq.read_table(f).to_pylist()]


@pytest.mark.spark
@pytest.mark.slow
def test_every_series_matches_the_model_in_one_process_in_id_order(
    scored: dict[str, Any], reference: dict[str, np.ndarray], prepared: dict, cohort: Path
) -> None:
    res, rows = scored["res"], _rows(scored["out"])
    times = {k: round(v, 1) for k, v in prepared["times"].items()}
    print(f"\ntimings {times}, load {os.getloadavg()[0]:.1f}; predict dicom: {res.as_dict()}")
    broken_id = prepared["broken"][0]
    assert [r["id"] for r in rows] == sorted(set(reference) - {broken_id})  # in id order
    assert res.rows == len(rows) == 7 and res.columns == [
        "id", "study_uid", "prob_0", "prob_1", "prediction",
    ]  # fmt: skip
    got = np.array([[r["prob_0"], r["prob_1"]] for r in rows])
    want = np.stack([reference[r["id"]] for r in rows])
    diff = float(np.abs(got - want).max())
    print(f"max |predict - one process| = {diff:.3g}")
    assert diff <= 1e-6
    assert [r["prediction"] for r in rows] == want.argmax(1).tolist()
    studies = {p.series_uid: p.study_uid for p in load_cohort(cohort)}
    assert [r["study_uid"] for r in rows] == [studies[r["id"]] for r in rows]
    assert res.devices == {"cpu": 7} and res.max_loads_per_worker == 1
    assert res.model_loads == res.workers and res.tasks == 3 and res.batches >= 3
    marker = json.loads((scored["out"] / MARKER).read_text())
    assert marker["input"] == "dicom" and marker["prep"]["window"]["level"] == WINDOW[0]


@pytest.mark.spark
@pytest.mark.slow
def test_predict_follows_the_manifest_not_the_defaults(
    scored: dict[str, Any], reference: dict[str, np.ndarray], prepared: dict, cohort: Path
) -> None:
    """The dataset was prepped with a non-default window, shape and spacing: predict applied
    them (it matches the shards, above), and the defaults would have given other inputs and
    other probabilities."""
    from gpuspark.data import format as fmt
    from gpuspark.infer.volume import build_volume_network

    prep = fmt.load_manifest(prepared["shards"]).extra["prep"]
    assert prep["window"]["level"] == WINDOW[0] and prep["shape"] == list(SHAPE)
    loaded = load_volume_model(prepared["best"])
    rows = {r["id"]: r for r in _rows(scored["out"])}
    files = _series_files(cohort)
    default = DicomOptions(shape=SHAPE)  # the prep defaults (soft-tissue window), same shape
    net = build_volume_network(loaded.data, loaded.path)
    import torch

    moved = 0
    for sid, row in rows.items():
        mine = prep_series(sorted(files[sid]), loaded.options)["volume"]
        other = prep_series(sorted(files[sid]), default)["volume"]
        assert not np.array_equal(mine, other)
        x, _ = loaded.decode({"volume": other, "label": 0})
        with torch.no_grad():
            p_default = net(torch.from_numpy(x[None])).softmax(1).numpy()[0]
        moved += int(abs(p_default[1] - row["prob_1"]) > 1e-4)
        assert abs(reference[sid][1] - row["prob_1"]) <= 1e-6
    assert moved >= len(rows) // 2, f"only {moved} of {len(rows)} series change with defaults"


@pytest.mark.spark
@pytest.mark.slow
def test_junk_file_and_broken_series_are_quarantined_with_reasons(
    scored: dict[str, Any], prepared: dict
) -> None:
    res = scored["res"]
    quarantined = {
        (r["stage"], r["id"]): r for r in _rows(scored["out"] / QUARANTINE_DIR)
    }  # fmt: skip
    broken_id, broken_path = prepared["broken"]
    assert set(quarantined) == {("header", None), ("series", broken_id)}
    junk = quarantined[("header", None)]
    assert junk["path"].endswith("junk.dcm") and junk["reason"] == "not a DICOM file"
    series = quarantined[("series", broken_id)]
    assert "pixel" in series["reason"].lower() and series["path"] == broken_path
    assert res.quarantined == 2 and sum(res.by_reason.values()) == 2
    assert res.inputs == sum(1 for p in prepared["studies"].rglob("*") if p.is_file())


@pytest.mark.spark
@pytest.mark.slow
def test_cli_predict_dicom_json_and_overwrite(
    prepared: dict, spark_half: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuspark.cli.main import main

    out = prepared["tmp"] / "cli"
    argv = ["predict", "dicom", str(prepared["studies"]), "--model", str(prepared["best"].parent)]
    assert main([*argv, "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["rows"] == 7 and res["quarantined"] == 2 and res["input"] == "dicom"
    assert res["max_loads_per_worker"] <= 1  # warm workers from the earlier job may load none
    assert main([*argv, "-o", str(out)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main([*argv, "-o", str(out), "--overwrite", "--batch-size", "8"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "series/s" in printed and f"predict -> {out}" in printed


def test_the_headers_tasks_start_without_torch(tmp_path: Path) -> None:
    """A Python worker imports the module of the function its task runs. The headers job's
    function (many tasks: every file of the input) must not pull torch and the model code,
    which only the scoring tasks need: with it in ``gpuspark.infer``, each of the 16 headers
    tasks of the demo's ``predict dicom`` imported torch (predict 42 s, then 22 s)."""
    import subprocess
    import sys
    from functools import partial

    import cloudpickle

    import gpuspark.infer.dicom as job
    from gpuspark.data.prep.headers import read_headers
    from gpuspark.data.sources import DicomSource

    assert job.read_headers is read_headers  # the function the headers job runs
    task = partial(read_headers, DicomSource(str(tmp_path), DicomOptions()), [[]])
    (tmp_path / "task.pkl").write_bytes(cloudpickle.dumps(task))
    code = (
        "import pickle, sys\n"
        f"pickle.loads(open({str(tmp_path / 'task.pkl')!r}, 'rb').read())\n"
        "print(sorted(m for m in ('torch', 'gpuspark.infer') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
