"""A real table, offline: scikit-learn's bundled Wisconsin diagnostic breast cancer data
(569 rows, 30 measurements, a binary diagnosis) through `prep parquet` and the `tabular`
recipe.

Correctness, not just "it trains": the train split read back from the shards equals the
source rows (values as float32, each row once, splits by the hashed id), and a reference
model fitted on the pandas rows of the same split scores the held-out rows as well as one
fitted on what the shards hold; the recipe itself reaches a high held-out ROC AUC.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.spark


def _source(tmp_path: Path) -> Any:
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame  # shipped inside the package: no download
    frame.insert(0, "patient", [f"p{i:04d}" for i in range(len(frame))])
    frame.to_parquet(tmp_path / "cancer.parquet", index=False)
    return frame


def _read(path: Path, split: str) -> dict[str, Any]:
    from gpuspark.data.load import TableDataset, World

    ds = TableDataset(path, split=split, shuffle=False, drop_last=False, world=World())
    parts = list(ds.iter_batches(1024))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _auc(train_x: Any, train_y: Any, test_x: Any, test_y: Any) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(train_x, train_y)
    return float(roc_auc_score(test_y, model.predict_proba(test_x)[:, 1]))


def test_real_table_round_trips_and_trains(spark: Any, tmp_path: Path) -> None:
    from gpuspark.data.prep import prep_parquet
    from gpuspark.train import recipes

    frame = _source(tmp_path)
    features = [c for c in frame.columns if c not in ("patient", "target")]
    res = prep_parquet(
        tmp_path / "cancer.parquet", tmp_path / "ds", label="target", id="patient",
        split=(0.6, 0.2, 0.2), spark=spark,
    )  # fmt: skip
    assert (res.inputs, res.rows, res.quarantined) == (569, 569, 0)

    splits = {name: _read(tmp_path / "ds", name) for name in ("train", "val", "test")}
    assert sum(len(s["id"]) for s in splits.values()) == 569
    by_id = frame.set_index("patient")
    for s in splits.values():  # every row once, its values as float32, its label
        rows = by_id.loc[list(s["id"])]
        np.testing.assert_array_equal(s["x"], rows[features].to_numpy(np.float32))
        assert s["label"].tolist() == rows["target"].tolist()
    train, test = splits["train"], splits["test"]
    reference = _auc(by_id.loc[list(train["id"]), features], train["label"],
                     by_id.loc[list(test["id"]), features], test["label"])  # fmt: skip
    from_shards = _auc(train["x"], train["label"], test["x"], test["label"])
    assert reference > 0.95 and abs(from_shards - reference) < 0.01

    cfg = recipes.RecipeConfig(
        data=str(tmp_path / "ds"), epochs=8, batch_size=64, lr=3e-3, threads=1,
        test_split="test",
    )  # fmt: skip
    summary = recipes.run("tabular", cfg, num_processes=2, local=True, timeout=120)
    assert summary.test is not None and summary.test["samples"] == len(test["id"])
    assert summary.test["auc"] >= 0.95, summary.test
