"""The ``tabular`` recipe: normalisation from the manifest, NaN handling, class weights,
AUC / PR AUC, the up-front dataset checks, and a 2-rank run on a known logistic signal.

The datasets are written without Spark: :class:`ShardWriter` records of
:func:`gpuspark.data.format.table.encode_block` blocks, with ``extra["table"]`` and
``extra["tabular"]`` as ``gpuspark prep parquet`` writes them (issue 19 contract).
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuspark.data import format as fmt
from gpuspark.data.format.table import TableColumn, TableInfo, encode_block
from gpuspark.data.write import ShardWriter
from gpuspark.train import recipes
from gpuspark.train.recipes import RecipeConfig, RecipeError

NUMERIC = ["income", "debt_ratio", "age", "noise1", "noise2"]
CATEGORICAL = {
    "region": ["north", "south", "east", "west"],
    "product": ["card", "loan", "mortgage"],
}
COLUMNS = [
    TableColumn("id", "string"),
    TableColumn("label", "number", "int64"),
    TableColumn("x", "array", "float32"),
    TableColumn("c", "array", "int32"),
]


def _synth(rows: int, seed: int = 7) -> dict[str, Any]:
    """Rows with a known logistic signal: ~3-4% positives, 10% of ``income`` missing."""
    rng = np.random.default_rng(seed)
    x = np.column_stack(
        [
            rng.lognormal(10.5, 0.6, rows),  # income: skewed, large scale
            rng.beta(2, 5, rows),  # debt ratio
            rng.normal(45, 12, rows),  # age
            rng.normal(0, 1, rows),
            rng.normal(0, 1, rows),
        ]
    ).astype(np.float32)
    c = np.column_stack([rng.integers(1, 5, rows), rng.integers(1, 4, rows)]).astype(np.int32)
    z = (
        -5.6
        - 1.6 * (np.log(x[:, 0]) - 10.5) / 0.6
        + 9.0 * (x[:, 1] - 0.29)
        - 0.04 * (x[:, 2] - 45)
        + np.array([0, -0.8, 0.6, 0.0, 1.2])[c[:, 0]]
        + np.array([0, -0.6, 0.9, -0.3])[c[:, 1]]
    )
    y = (rng.random(rows) < 1 / (1 + np.exp(-z))).astype(np.int64)
    x[rng.random(rows) < 0.1, 0] = np.nan
    c[rng.random(rows) < 0.05, 1] = 0  # missing category
    ids = [f"cust-{i}" for i in range(rows)]
    return {"id": ids, "x": x, "c": c, "label": y, "logit": z}


def _stats(x: np.ndarray, c: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    numeric = {}
    for j, name in enumerate(NUMERIC):
        col = x[:, j].astype(np.float64)
        ok = col[~np.isnan(col)]
        numeric[name] = {
            "count": len(ok),
            "missing": int(len(col) - len(ok)),
            "mean": float(ok.mean()),
            "std": float(ok.std()),
            "min": float(ok.min()),
            "max": float(ok.max()),
        }
    categorical = {}
    for j, (name, vocab) in enumerate(CATEGORICAL.items()):
        counts = np.bincount(c[:, j], minlength=len(vocab) + 1)
        categorical[name] = {
            "vocab": vocab,
            "counts": [int(v) for v in counts[1:]],
            "missing": int(counts[0]),
            "other": 0,
        }
    return {
        "label": "default",
        "id": "customer_id",
        "task": "binary",
        "classes": 2,
        "label_values": [0, 1],
        "numeric": NUMERIC,
        "categorical": list(CATEGORICAL),
        "stats_split": "train",
        "stats": {"numeric": numeric, "categorical": categorical},
        "label_counts": [int(v) for v in np.bincount(y, minlength=2)],
    }


def write_tabular(path: Path, rows: int, *, block_rows: int = 1024, seed: int = 7) -> str:
    """A tabular dataset of ``rows`` synthetic rows, 80/20 train/val split by a hash of id."""
    import pyarrow as pa

    data = _synth(rows, seed)
    val = np.array([zlib.crc32(i.encode()) % 5 == 0 for i in data["id"]])
    extra = {"tabular": _stats(data["x"][~val], data["c"][~val], data["label"][~val])}
    split_rows: dict[str, int] = {}
    with ShardWriter(path, extra=extra) as w:
        for split, mask in (("train", ~val), ("val", val)):
            idx = np.flatnonzero(mask)
            split_rows[split] = len(idx)
            for start in range(0, len(idx), block_rows):
                rows_ = idx[start : start + block_rows]
                batch = pa.RecordBatch.from_pydict(
                    {
                        "id": [data["id"][i] for i in rows_],
                        "label": pa.array(data["label"][rows_], pa.int64()),
                        "x": pa.array(list(data["x"][rows_]), pa.list_(pa.float32())),
                        "c": pa.array(list(data["c"][rows_]), pa.list_(pa.int32())),
                    }
                )
                w.write(encode_block(batch, COLUMNS), split=split)
    manifest = w.manifest
    assert manifest is not None
    shard_rows = {manifest.splits[s][0]: n for s, n in split_rows.items()}
    assert all(len(v) == 1 for v in manifest.splits.values())
    manifest.extra["table"] = TableInfo(block_rows, tuple(COLUMNS), shard_rows).as_dict()
    fmt.write_manifest(str(path), manifest)
    return str(path)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_tabular(tmp_path_factory.mktemp("tab") / "small", 3000, block_rows=256)


# -- metrics -------------------------------------------------------------------------------


def test_auc_and_average_precision_match_hand_computation() -> None:
    scores, labels = [0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]
    # pairs (pos, neg): 0.35>0.1, 0.35<0.4, 0.8>0.1, 0.8>0.4 -> 3 of 4
    assert recipes.roc_auc(scores, labels) == pytest.approx(0.75)
    # thresholds 0.8 (P=1, R=.5), 0.4 (P=.5, R=.5), 0.35 (P=2/3, R=1), 0.1
    assert recipes.pr_auc(scores, labels) == pytest.approx(0.5 * 1 + 0.5 * (2 / 3))
    # a tie group enters at once: P = 1/2 at R = 1
    assert recipes.pr_auc([0.5, 0.5], [0, 1]) == pytest.approx(0.5)
    assert recipes.roc_auc([0.5, 0.5], [0, 1]) == pytest.approx(0.5)
    assert recipes.pr_auc([0.2, 0.3], [0, 0]) is None


def test_rank_auc_equals_pairwise_on_ties() -> None:
    rng = np.random.default_rng(1)
    s, y = rng.integers(0, 6, 400) / 5, rng.random(400) < 0.1
    pos, neg = s[y], s[~y]
    pairwise = ((pos[:, None] > neg).sum() + 0.5 * (pos[:, None] == neg).sum()) / (
        len(pos) * len(neg)
    )
    assert recipes.roc_auc(s, y) == pytest.approx(pairwise)


def test_tabular_metrics_binary_multiclass_and_one_class() -> None:
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.65, 0.35], [0.2, 0.8]])
    m = recipes.tabular_metrics(probs, np.array([0, 0, 1, 1]))
    assert m == pytest.approx({"auc": 0.75, "pr_auc": 0.5 + 1 / 3, "acc": 0.75})
    one = recipes.tabular_metrics(probs, np.zeros(4, dtype=int))
    assert one["auc"] is None and one["pr_auc"] is None and one["acc"] == 0.75
    perfect = np.eye(3)[[0, 1, 2, 1]] * 0.8 + 0.2 / 3
    m3 = recipes.tabular_metrics(perfect, np.array([0, 1, 2, 1]))
    assert m3 == pytest.approx({"auc": 1.0, "pr_auc": 1.0, "acc": 1.0})


# -- model, batches, weights ---------------------------------------------------------------


def test_class_weights_inverse_frequency_mean_one() -> None:
    w = recipes.class_weights([960, 40], 2)
    assert w == pytest.approx([2 * 40 / 1000, 2 * 960 / 1000])
    assert w.mean() == pytest.approx(1.0)
    assert recipes.class_weights([], 3) == pytest.approx([1, 1, 1])
    # a class without rows weighs as the rarest one present
    assert recipes.class_weights([90, 10, 0], 3) == pytest.approx(
        np.array([1 / 90, 1 / 10, 1 / 10]) / np.mean([1 / 90, 1 / 10, 1 / 10])
    )


def test_loss_uses_class_weights(small: str) -> None:
    import torch

    manifest = fmt.load_manifest(small)
    counts = manifest.extra["tabular"]["label_counts"]
    make_loss = recipes.get_recipe("tabular").loss
    assert make_loss is not None
    loss = make_loss(RecipeConfig(data=small), manifest)
    assert loss.weights[1] / loss.weights[0] == pytest.approx(counts[0] / counts[1], rel=1e-5)
    logits, y = torch.zeros(2, 2), torch.tensor([0, 1])
    expected = torch.nn.functional.cross_entropy(logits, y, weight=torch.tensor(loss.weights))
    assert float(loss(logits, y)) == pytest.approx(float(expected))
    flat = make_loss(RecipeConfig(data=small, class_weights=False), manifest)
    assert flat.weights == pytest.approx([1.0, 1.0])


def test_batch_appends_codes_as_floats() -> None:
    x = np.array([[1.5, np.nan], [3.0, 4.0]], dtype=np.float32)
    c = np.array([[2, 0], [1, 16_000_000]], dtype=np.int32)
    xb, yb = recipes.tabular_batch({"x": x, "c": c, "label": np.array([1, 0])})
    assert xb.dtype.is_floating_point and tuple(xb.shape) == (2, 4)
    assert str(yb.dtype) == "torch.int64" and yb.tolist() == [1, 0]
    assert xb[1, 3].item() == 16_000_000 and np.isnan(xb[0, 1].item())
    xn, _ = recipes.tabular_batch({"x": x, "label": np.array([1, 0])})  # no categoricals
    assert tuple(xn.shape) == (2, 2)


def test_model_normalises_with_manifest_stats_and_handles_nan(small: str) -> None:
    import torch

    cfg = RecipeConfig(data=small, hidden=16, layers=3)
    net = recipes.build_tabular(cfg, 2)
    spec = recipes.tabular_spec(fmt.load_manifest(small))
    income = fmt.load_manifest(small).extra["tabular"]["stats"]["numeric"]["income"]
    assert net.mean[0].item() == pytest.approx(income["mean"], rel=1e-6)
    assert net.std[0].item() == pytest.approx(income["std"], rel=1e-6)
    assert [e.num_embeddings for e in net.embeddings] == [5, 4]  # vocab + 1 (code 0)
    assert [e.embedding_dim for e in net.embeddings] == [3, 3]  # min(16, (n+1)//2+1)
    assert sum(isinstance(m, torch.nn.Linear) for m in net.mlp) == 4  # 3 hidden + output
    row = torch.tensor([[*spec.mean, 2.0, 0.0]])
    row[0, 1] = float("nan")
    feats = net.features(row)
    n = len(NUMERIC)
    assert feats.shape == (1, 2 * n + 6)
    assert torch.allclose(feats[0, :n], torch.zeros(n), atol=1e-5)  # x == mean -> 0, NaN -> 0
    assert feats[0, n : 2 * n].tolist() == [0, 1, 0, 0, 0]  # the missing indicator
    shifted = row.clone()
    shifted[0, 0] += spec.std[0]
    assert net.features(shifted)[0, 0].item() == pytest.approx(1.0, rel=1e-4)
    out = net(torch.cat([row, shifted]))
    assert out.shape == (2, 2) and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="5 numeric \\+ 2 categorical"):
        net(row[:, :5])


# -- up-front checks -----------------------------------------------------------------------


def test_preflight_accepts_tabular_and_counts_classes(small: str) -> None:
    recipe = recipes.preflight("tabular", RecipeConfig(data=small))
    assert recipe.name == "tabular" and recipe.best_by == ("auc", "acc")
    manifest = fmt.load_manifest(small)
    assert recipe.num_classes(RecipeConfig(data=small), manifest) == 2
    assert recipe.defaults["batch_size"] == 512 and not recipe.augments


def test_preflight_refuses_a_table_without_tabular_stats(tmp_path: Path) -> None:
    path = write_tabular(tmp_path / "plain", 600, block_rows=128)
    manifest = fmt.load_manifest(path)
    del manifest.extra["tabular"]
    fmt.write_manifest(path, manifest)
    with pytest.raises(RecipeError, match="not a tabular dataset") as err:
        recipes.preflight("tabular", RecipeConfig(data=path))
    assert "gpuspark prep parquet" in str(err.value.remedy)


def test_preflight_refuses_a_dataset_without_x(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "img") as w:
        for i in range(4):
            w.write({"image": np.zeros((2, 2), np.uint8), "label": i % 2}, split="train")
    with pytest.raises(RecipeError, match="needs sample key 'x'"):
        recipes.preflight("tabular", RecipeConfig(data=str(tmp_path / "img")))


def test_preflight_refuses_feature_count_mismatch(tmp_path: Path) -> None:
    path = write_tabular(tmp_path / "bad", 600, block_rows=128)
    manifest = fmt.load_manifest(path)
    manifest.extra["tabular"]["numeric"] = NUMERIC[:3]
    fmt.write_manifest(path, manifest)
    with pytest.raises(RecipeError, match="'x' has 5 values per row but the manifest names 3"):
        recipes.preflight("tabular", RecipeConfig(data=path))


def test_resnet_recipes_keep_their_data_path() -> None:
    for name in ("resnet2d", "resnet3d"):
        r = recipes.get_recipe(name)
        assert r.dataset is None and r.loss is None and r.augments and not r.defaults


# -- end to end ----------------------------------------------------------------------------


def test_two_ranks_reach_auc_on_known_signal(tmp_path: Path) -> None:
    path = write_tabular(tmp_path / "risk", 20_000)
    data = _synth(20_000)
    bayes = recipes.roc_auc(data["logit"], data["label"])
    assert bayes is not None and bayes > 0.9  # the signal is learnable
    cfg = RecipeConfig(
        data=path, epochs=4, batch_size=256, lr=3e-3, threads=1, out=str(tmp_path / "out")
    )
    t0 = time.perf_counter()
    summary = recipes.run("tabular", cfg, num_processes=2, local=True, timeout=120)
    elapsed = time.perf_counter() - t0
    assert summary.splits == {
        "train": pytest.approx(16_000, rel=0.05),
        "val": pytest.approx(4000, rel=0.2),
    }
    assert summary.best["val_auc"] >= 0.85, summary.best
    assert 0 < summary.best["val_pr_auc"] <= 1
    assert summary.best["val_samples"] == summary.splits["val"]
    assert (tmp_path / "out" / "best.pt").exists()
    assert elapsed <= 40, f"{elapsed:.1f} s"


def test_cli_uses_recipe_defaults_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuspark.cli.main import main

    seen: list[RecipeConfig] = []

    procs: list[int] = []

    def capture(_name: str, cfg: RecipeConfig, **kw: Any) -> Any:
        seen.append(cfg)
        procs.append(kw["num_processes"])
        raise RecipeError("captured")  # stop before any rank starts

    monkeypatch.setattr(recipes, "run", capture)
    assert main(["train", "tabular", "--data", "d", "--hidden", "64", "-n", "3"]) == 1
    assert main(["train", "tabular", "--data", "d", "--batch-size", "32", "--lr", "0.01"]) == 1
    assert main(["train", "resnet2d", "--data", "d"]) == 1
    tab, given, resnet = seen
    assert (tab.batch_size, tab.lr, tab.hidden, tab.class_weights) == (512, 1e-3, 64, True)
    assert (given.batch_size, given.lr) == (32, 0.01)
    assert (resnet.batch_size, resnet.epochs) == (8, 10)
    assert procs == [3, 2, 2]
