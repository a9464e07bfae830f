"""The parts of ``gpuspark.infer`` that need no Spark: the destination's commit (a failed run
leaves the old predictions), the per-worker model cache, the input's column checks and the
names of the output columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuspark.errors import DatasetExistsError, GpusparkError, RecipeError
from gpuspark.infer import MARKER, TabularServing, load_model
from gpuspark.infer.features import CATEGORY, NUMBER, OTHER, TEXT, plan_input
from gpuspark.infer.output import check_destination, staged_output, write_marker
from gpuspark.infer.table import prob_columns
from gpuspark.infer.worker import cached_network, load_count

SERVING = TabularServing(
    numeric=("income", "age"),
    categorical=("region",),
    vocab=(("north", "south"),),
    label_values=(0, 1),
    label="default",
    id="customer_id",
)


def _predictions(root: Path, text: str) -> None:
    with staged_output(check_destination(root, True, None), True) as tmp:
        (tmp / "part-0.parquet").write_text(text)
        write_marker(tmp, {"rows": 1})


def test_commit_replaces_earlier_predictions_and_a_failure_keeps_them(tmp_path: Path) -> None:
    root = tmp_path / "out"
    _predictions(root, "old")
    assert (root / "part-0.parquet").read_text() == "old" and (root / MARKER).is_file()
    with pytest.raises(RuntimeError), staged_output(root, True) as tmp:
        (tmp / "part-0.parquet").write_text("half")
        raise RuntimeError("the Spark job failed")
    assert (root / "part-0.parquet").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left
    _predictions(root, "new")
    assert (root / "part-0.parquet").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_destination_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "out"
    _predictions(root, "old")
    with pytest.raises(DatasetExistsError, match="--overwrite"):
        check_destination(root, False, None)
    (root / "notes.txt").write_text("mine")
    with pytest.raises(DatasetExistsError, match=r"did not write \(notes.txt\)"):
        check_destination(root, True, None)
    (tmp_path / "file").write_text("x")
    with pytest.raises(GpusparkError, match="is a file"):
        check_destination(tmp_path / "file", True, None)
    with pytest.raises(GpusparkError, match="overlaps the input"):
        check_destination(tmp_path / "src" / "out", False, str(tmp_path / "src"))
    monkeypatch.chdir(root)
    (root / "notes.txt").unlink()
    with pytest.raises(DatasetExistsError, match="current directory"):
        check_destination(root, True, None)


def _best_pt(tmp_path: Path) -> Path:
    """A ``best.pt`` as ``train tabular`` writes it, of a small untrained network."""
    import torch

    from gpuspark.train.recipes.tabular_model import TabularNet

    net = TabularNet([10.0, 40.0], [2.0, 12.0], [2], 2, hidden=8, layers=1)
    tab = {
        "label": "default",
        "id": "customer_id",
        "classes": 2,
        "label_values": [0, 1],
        "numeric": ["income", "age"],
        "categorical": ["region"],
        "stats": {"numeric": {}, "categorical": {"region": {"vocab": ["north", "south"]}}},
    }
    payload = {
        "recipe": "tabular",
        "epoch": 0,
        "score": 0.5,
        "scores": {},
        "config": {"dataset": {"data": str(tmp_path / "gone")}},
        "model": net.state_dict(),
        "dataset": {"path": str(tmp_path / "gone"), "provenance": {}, "extra": {"tabular": tab}},
    }
    torch.save(payload, tmp_path / "best.pt")
    return tmp_path / "best.pt"


def test_checkpoint_alone_gives_the_encoding_and_the_network(tmp_path: Path) -> None:
    import torch

    best = _best_pt(tmp_path)
    loaded = load_model(tmp_path)  # the run folder holding best.pt
    assert loaded.serving == TabularServing(
        ("income", "age"), ("region",), (("north", "south"),), (0, 1), "default",
        "customer_id", str(tmp_path / "gone"),
    )  # fmt: skip
    assert (loaded.hidden, loaded.layers, loaded.path) == (8, 1, str(best))
    before = load_count()
    key = (loaded.path, loaded.mtime_ns)
    reads: list[int] = []

    def read() -> bytes:
        reads.append(1)
        return loaded.data

    net, fresh = cached_network(key, read, torch.device("cpu"))
    again, cached = cached_network(key, read, torch.device("cpu"))
    assert fresh and not cached and again is net and len(reads) == 1
    assert load_count() == before + 1
    x = torch.tensor([[10.0, float("nan"), 2.0]])
    assert net(x).shape == (1, 2) and not net.training


def test_input_columns_are_checked_against_the_model() -> None:
    kinds = {"customer_id": TEXT, "income": NUMBER, "age": CATEGORY, "region": TEXT}
    plan = plan_input(kinds, SERVING, "best.pt", "in.parquet", None)
    assert plan.keep == ("customer_id",)
    assert plan_input({**kinds, "x": NUMBER}, SERVING, "m", "s", "x").keep == ("x",)
    with pytest.raises(RecipeError, match=r"lacks 1 feature column\(s\) of model m: age"):
        plan_input({k: v for k, v in kinds.items() if k != "age"}, SERVING, "m", "s", None)
    with pytest.raises(RecipeError, match=r"categorical feature 'region'.*neither text"):
        plan_input({**kinds, "region": NUMBER}, SERVING, "m", "s", None)
    with pytest.raises(RecipeError, match=r"numeric feature 'income'.*not a number"):
        plan_input({**kinds, "income": OTHER}, SERVING, "m", "s", None)
    with pytest.raises(GpusparkError, match=r"--id column 'custmer_id'.*customer_id"):
        plan_input(kinds, SERVING, "m", "s", "custmer_id")


def test_probability_columns_are_named_by_class() -> None:
    assert prob_columns(SERVING, ("id",)) == ("prob_0", "prob_1")
    texts = TabularServing((), (), (), ("low risk", "high.risk", True))
    assert prob_columns(texts, ()) == ("prob_low_risk", "prob_high_risk", "prob_true")
    clashing = TabularServing((), (), (), ("a b", "a.b"))
    assert prob_columns(clashing, ()) == ("prob_0", "prob_1")
    with pytest.raises(GpusparkError, match="column 'prediction'"):
        prob_columns(SERVING, ("prediction",))


def test_bad_options_are_refused_before_any_work(tmp_path: Path) -> None:
    from gpuspark.infer import predict

    best = _best_pt(tmp_path)
    kw: dict[str, Any] = {"spark": None}
    with pytest.raises(GpusparkError, match="batch_size must be a positive integer"):
        predict(tmp_path / "in", best, tmp_path / "out", batch_size=0, **kw)
    with pytest.raises(GpusparkError, match=r"input .* does not exist"):
        predict(tmp_path / "in", best, tmp_path / "out", **kw)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.parquet").write_bytes(b"not parquet")
    with pytest.raises(GpusparkError, match="cannot be read as Parquet"):
        predict(tmp_path / "in", best, tmp_path / "out", **kw)


@pytest.mark.parametrize("kind", ["torchscript", "export"])
def test_exported_model_files_score_as_the_checkpoint(tmp_path: Path, kind: str) -> None:
    """A TorchScript file and a ``torch.export`` (.pt2) file of a best.pt carry its
    preprocessing and give the same probabilities, through the tasks' scoring function."""
    import pyarrow as pa

    from gpuspark.infer import export_model
    from gpuspark.infer.features import CODES_COL, NUMBERS_COL, REASON_COL
    from gpuspark.infer.worker import ScoreTask, score_function

    best = _best_pt(tmp_path)
    name = "model.pt" if kind == "torchscript" else "model.pt2"
    exported = export_model(best, tmp_path / name, kind=kind)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", name]  # no temp file left
    from_best, from_file = load_model(best), load_model(exported)
    assert from_file.serving == from_best.serving and from_file.path == str(exported)
    rng = np.random.default_rng(0)
    numbers = rng.normal(20.0, 10.0, size=(50, 2)).astype(np.float32)
    numbers[::7, 1] = np.nan  # missing values
    codes = rng.integers(0, 3, size=(50, 1)).astype(np.int32)
    batch = pa.RecordBatch.from_pydict(
        {
            "customer_id": [f"c{i}" for i in range(50)],
            NUMBERS_COL: pa.array(list(numbers), pa.list_(pa.float32())),
            CODES_COL: pa.array(list(codes), pa.list_(pa.int32())),
            REASON_COL: pa.nulls(50, pa.string()),
        }
    )
    out = {}
    for loaded in (from_best, from_file):
        task = ScoreTask(
            (loaded.path, loaded.mtime_ns), ("customer_id",), ("prob_0", "prob_1"), (0, 1),
            "int64", 16, 2, 1,
        )  # fmt: skip
        counters = {"rows": _Count(), "quarantined": _Count()}
        fn = score_function(task, _Bytes(loaded.data), counters, _Count())
        out[loaded.path] = pa.Table.from_batches(list(fn([batch]))).to_pylist()
    got, want = out[from_file.path], out[from_best.path]
    assert len(got) == 50 and [r["customer_id"] for r in got] == [r["customer_id"] for r in want]
    diff = max(
        abs(g[k] - w[k]) for g, w in zip(got, want, strict=True) for k in ("prob_0", "prob_1")
    )
    assert diff <= 1e-6, diff
    assert [g["prediction"] for g in got] == [w["prediction"] for w in want]


def test_exported_files_without_preprocessing_or_of_another_width_are_refused(
    tmp_path: Path,
) -> None:
    import torch

    from gpuspark.errors import CheckpointError
    from gpuspark.train.recipes.tabular_model import TabularNet

    net = TabularNet([0.0], [1.0], [], 2, hidden=4, layers=1).eval()
    plain = tmp_path / "plain.pt"
    torch.jit.save(torch.jit.trace(net, torch.zeros(2, 1)), str(plain))
    with pytest.raises(CheckpointError, match=r"TorchScript file without gpuspark's prepro"):
        load_model(plain)
    best = _best_pt(tmp_path)
    meta = load_model(best)
    import json

    from gpuspark.infer.model import SERVING_FILE

    lineage = torch.load(best, weights_only=False)["dataset"]
    files = {SERVING_FILE: json.dumps({"recipe": "tabular", "dataset": lineage})}
    narrow = tmp_path / "narrow.pt2"  # a network of 1 input column; the encoding makes 3
    program = torch.export.export(net, (torch.zeros(2, 1),))
    torch.export.save(program, str(narrow), extra_files=files)
    with pytest.raises(CheckpointError, match=r"does not score rows of its 3 encoded columns"):
        load_model(narrow)
    assert meta.serving.features == ("income", "age", "region")


class _Count:
    def __init__(self) -> None:
        self.value: Any = 0

    def add(self, n: Any) -> None:
        self.value = n if isinstance(n, dict) else self.value + n


class _Bytes:
    def __init__(self, value: bytes) -> None:
        self.value = value


def test_scoring_tasks_report_where_their_time_went(tmp_path: Path) -> None:
    """Each task's phases (wall and CPU seconds, :class:`TaskClock`) reach the job's
    statistics: summed per worker by the accumulator, over the workers in the result."""
    import pyarrow as pa

    from gpuspark.infer.features import CODES_COL, NUMBERS_COL, REASON_COL
    from gpuspark.infer.result import worker_fields
    from gpuspark.infer.worker import ScoreTask, TaskClock, WorkerStatsParam, score_function

    loaded = load_model(_best_pt(tmp_path))
    rng = np.random.default_rng(1)
    batch = pa.RecordBatch.from_pydict(
        {
            "customer_id": [f"c{i}" for i in range(40)],
            NUMBERS_COL: pa.array(list(rng.normal(size=(40, 2)).astype(np.float32)),
                                  pa.list_(pa.float32())),
            CODES_COL: pa.array(list(rng.integers(0, 3, size=(40, 1)).astype(np.int32)),
                                pa.list_(pa.int32())),
            REASON_COL: pa.nulls(40, pa.string()),
        }
    )  # fmt: skip
    task = ScoreTask(
        (loaded.path, loaded.mtime_ns), ("customer_id",), ("prob_0", "prob_1"), (0, 1),
        "int64", 16, 2, 1,
    )  # fmt: skip
    stats = _Count()
    counters = {"rows": _Count(), "quarantined": _Count()}
    out = list(score_function(task, _Bytes(loaded.data), counters, stats)([batch]))
    assert [b.num_rows for b in out] == [16, 16, 8] and counters["rows"].value == 40
    (report,) = stats.value.values()
    assert report["batches"] == 3 and report["rows"] == 40 and report["tasks"] == 1
    phases = (*TaskClock.PHASES, *(f"{p}_cpu" for p in TaskClock.PHASES))
    assert set(report["seconds"]) == set(phases)
    assert all(v >= 0 for v in report["seconds"].values()) and report["seconds"]["model"] > 0

    param = WorkerStatsParam()
    merged = param.addInPlace(param.addInPlace({}, {"w1": report}), {"w1": report})
    assert merged["w1"]["tasks"] == 2
    assert merged["w1"]["seconds"]["model"] == pytest.approx(2 * report["seconds"]["model"])
    fields = worker_fields({**merged, "w2": report})
    assert fields["tasks"] == 3 and fields["workers"] == 2
    assert fields["task_seconds"]["model"] == pytest.approx(
        3 * report["seconds"]["model"], abs=1e-3
    )
