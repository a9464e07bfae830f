"""``prep_parquet`` / ``gpuspark prep parquet``: driver checks and column planning without
Spark; one Spark test runs ``synth_risk`` then ``prep_parquet`` on 20k rows and checks the
table against pandas and numpy computed from the source Parquet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuspark.cli.main import main
from gpuspark.data.prep import PrepError, prep_parquet
from gpuspark.data.prep import job as prep_job
from gpuspark.data.prep.parquet_stats import plan_columns


class _Started(Exception):
    """Raised where the session would start: every driver check passed."""


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    def started(*_a: Any, **_k: Any) -> Any:
        raise _Started

    monkeypatch.setattr(prep_job, "job_session", started)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    p = tmp_path / "t.parquet"
    p.write_bytes(b"PAR1")
    return p


# --------------------------------------------------------------------------- no Spark


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"label": ""}, "label must be a column name"),
        ({"block_rows": 0}, "block_rows must be at least 1, got 0"),
        ({"max_vocab": 0}, "max_vocab must be at least 1"),
        ({"features": "a,b"}, "features must be a list of column names, got text 'a,b'"),
        ({"features": ["a", "b", "a"]}, "features names column 'a' twice"),
        ({"categorical": ["c", "c"]}, "categorical names column 'c' twice"),
        ({"features": []}, "features is empty"),
        ({"split": (0.5, 0.2)}, "summing to 1"),
        ({"world_size": 0}, "world_size must be at least 1"),
    ],
)
def test_options_refused_before_spark(
    no_cluster: None, kwargs: dict[str, Any], message: str, src: Path, tmp_path: Path
) -> None:
    with pytest.raises(PrepError, match=message):
        prep_parquet(src, tmp_path / "ds", **{"label": "y", **kwargs})


def test_source_and_destination_checked_then_spark(
    no_cluster: None, src: Path, tmp_path: Path
) -> None:
    with pytest.raises(PrepError, match="does not exist"):
        prep_parquet(tmp_path / "nope", tmp_path / "ds", label="y")
    with pytest.raises(PrepError, match="destination nosuch://b/ds: nosuch:// is not a known"):
        prep_parquet(src, "nosuch://b/ds", label="y")
    with pytest.raises(_Started):
        prep_parquet(src, tmp_path / "ds", label="y", id="k", split=None)
    assert not (tmp_path / "ds").exists()


def _schema() -> Any:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("cid", T.StringType()),
            T.StructField("y", T.IntegerType()),
            T.StructField("income", T.DoubleType()),
            T.StructField("n", T.LongType()),
            T.StructField("region", T.StringType()),
            T.StructField("flag", T.BooleanType()),
            T.StructField("amount", T.StringType()),
            T.StructField("day", T.DateType()),
        ]
    )


def test_plan_columns_defaults_and_explicit() -> None:
    feats = ["income", "n", "region", "flag", "amount"]
    cols = plan_columns(_schema(), "y", "cid", feats, None)
    assert cols.numeric == ("income", "n")
    assert cols.categorical == ("region", "flag", "amount")
    # categorical given: the whole list (an integer added, a string left out is a number)
    cols = plan_columns(_schema(), "y", "cid", feats, ["region", "n"])
    assert cols.numeric == ("income", "flag", "amount")
    assert cols.categorical == ("region", "n")


def test_plan_columns_errors() -> None:
    with pytest.raises(PrepError, match=r"label column 'yy' is not in the source \(did you mean"):
        plan_columns(_schema(), "yy", None, None, None)
    with pytest.raises(PrepError, match=r"feature column 'incme' .*did you mean 'income'"):
        plan_columns(_schema(), "y", "cid", ["incme"], None)
    # default features include the date column: refused, naming it
    with pytest.raises(PrepError, match="feature column 'day' has type date"):
        plan_columns(_schema(), "y", "cid", None, None)
    with pytest.raises(PrepError, match="column 'y' is the label and a feature"):
        plan_columns(_schema(), "y", None, ["y", "n"], None)
    with pytest.raises(PrepError, match="categorical column 'income' has type double"):
        plan_columns(_schema(), "y", None, ["income"], ["income"])
    with pytest.raises(PrepError, match="is also the label"):
        plan_columns(_schema(), "y", "y", ["n"], None)


def test_plan_columns_reads_boolean_as_number_when_told() -> None:
    cols = plan_columns(_schema(), "y", "cid", ["income", "flag"], [])
    assert cols.numeric == ("income", "flag") and cols.categorical == ()


def test_cli_parsing_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = str(tmp_path / "t.parquet"), str(tmp_path / "ds")
    assert main(["prep", "parquet", src, dst]) == 2
    assert "--label" in capsys.readouterr().err
    assert main(["prep", "parquet", src, dst, "--label", "y", "--features", "a,,b"]) == 2
    assert "--features" in capsys.readouterr().err
    assert main(["prep", "parquet", src, dst, "--label", "y", "--split", "0.8,x"]) == 2
    assert main(["prep", "parquet", src, dst, "--label", "y", "--max-vocab", "0"]) == 2
    capsys.readouterr()
    assert main(["prep", "parquet", src, dst, "--label", "y"]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- Spark

_TABULAR_KEYS = {
    "label",
    "id",
    "task",
    "classes",
    "label_values",
    "numeric",
    "categorical",
    "stats_split",
    "stats",
    "label_counts",
}


def _auc(y: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC from rank statistics (Mann-Whitney U, ties get their average rank)."""
    _, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def _design(df: Any) -> np.ndarray:
    """Standardisable features of the risk table: logs of the heavy tails, missing flags,
    one-hot categories (sorted values, the first dropped)."""
    cols = [df[c].to_numpy(float) for c in ("age", "credit_utilization", "debt_to_income")]
    cols += [df[c].to_numpy(float) for c in ("n_late_payments_12m", "interest_rate", "noise_1")]
    for c in ("income", "savings_balance", "months_since_delinquency"):
        v = np.log1p(df[c].to_numpy(float))
        cols += [np.nan_to_num(v, nan=0.0), np.isnan(v).astype(float)]
    for c in ("employment_type", "housing", "product"):
        cols += [(df[c] == v).to_numpy(float) for v in sorted(df[c].unique())[1:]]
    return np.column_stack(cols)


def _logistic_auc(train: Any, test: Any) -> float:
    """Held-out AUC of an L2 logistic regression fitted by Newton steps (numpy only)."""
    x_tr, x_te = _design(train), _design(test)
    mu, sd = x_tr.mean(0), x_tr.std(0) + 1e-9
    z_tr = np.column_stack([np.ones(len(x_tr)), (x_tr - mu) / sd])
    z_te = np.column_stack([np.ones(len(x_te)), (x_te - mu) / sd])
    y = train["default"].to_numpy(float)
    w = np.zeros(z_tr.shape[1])
    for _ in range(25):
        p = 1.0 / (1.0 + np.exp(-z_tr @ w))
        hess = (z_tr.T * (p * (1 - p))) @ z_tr + 1e-2 * np.eye(len(w))
        w -= np.linalg.solve(hess, z_tr.T @ (p - y) + 1e-2 * w)
    return _auc(test["default"].to_numpy(int), z_te @ w)


def _read_split(path: Path, split: str) -> dict[str, np.ndarray]:
    from gpuspark.data.load import TableDataset, World

    ds = TableDataset(path, split=split, shuffle=False, drop_last=False, world=World(0, 1))
    batches = list(ds.iter_batches(100_000))
    return {k: np.concatenate([b[k] for b in batches]) for k in ("id", "label", "x", "c")}


@pytest.mark.spark
def test_synth_risk_then_prep_parquet(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pandas as pd

    from gpuspark.demo import synth_risk

    rows = 60_000  # enough positives (~3%) that the held-out AUC below is not noise
    risk = synth_risk(tmp_path / "risk", rows, seed=3, bad_rows=0.01, spark=spark)
    src = pd.read_parquet(tmp_path / "risk")
    assert risk.rows == len(src) == rows and risk.files >= 1
    assert 0.01 <= risk.positive_rate <= 0.05
    per_customer = src["customer_id"].value_counts()
    assert per_customer.max() == 6 and per_customer.min() == 1
    # groups of 21 rows hold customers of 1, 2, ..., 6 rows: 2857 x 6, then 2 in the last 3 rows
    assert risk.customers == 17_144
    assert risk.customers - 10 <= len(per_customer) <= risk.customers  # a few ids made null
    bad = src["default"].isna() | src["customer_id"].isna() | np.isinf(src["income"])
    assert 300 < bad.sum() < 960  # 1% of 60k, each of the three kinds present
    assert src["default"].isna().any() and src["customer_id"].isna().any()
    good = src[~bad]
    assert not good.duplicated(["customer_id", "month"]).any()
    assert 0.03 < good["income"].isna().mean() < 0.05

    # the signal: a linear model on a customer-disjoint hold-out
    held = good["customer_id"].str[-1].isin(list("0123"))  # a quarter of the customers
    assert _logistic_auc(good[~held], good[held]) >= 0.85

    res = prep_parquet(
        tmp_path / "risk", tmp_path / "ds", label="default", id="customer_id", spark=spark
    )
    assert (res.inputs, res.quarantined, res.rows) == (rows, int(bad.sum()), len(good))
    assert sum(res.by_reason.values()) == res.quarantined
    assert res.by_reason["column default"] == int(src["default"].isna().sum())
    quarantine = pd.read_parquet(res.quarantine_path)
    assert len(quarantine) == res.quarantined and set(quarantine["stage"]) == {"parquet"}

    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    tab = manifest["extra"]["tabular"]
    assert set(tab) == _TABULAR_KEYS and tab["task"] == "binary"
    assert tab["label_values"] == [0, 1] and tab["stats_split"] == "train"
    assert [c["name"] for c in manifest["extra"]["table"]["columns"]] == ["id", "label", "x", "c"]
    assert "customer_id" in manifest["extra"]["prep"]["split_by"]

    splits = {name: _read_split(tmp_path / "ds", name) for name in ("train", "val", "test")}
    ids = {name: set(s["id"]) for name, s in splits.items()}
    assert not (ids["train"] & ids["val"] or ids["train"] & ids["test"] or ids["val"] & ids["test"])
    month = tab["numeric"].index("month")
    got = sorted(
        (i, int(m)) for s in splits.values() for i, m in zip(s["id"], s["x"][:, month], strict=True)
    )
    assert got == sorted(
        zip(good["customer_id"], good["month"].astype(int), strict=True)
    )  # once each

    train = good[good["customer_id"].isin(ids["train"])]
    for name in ("income", "months_since_delinquency", "savings_balance", "age"):
        st, col = tab["stats"]["numeric"][name], train[name].astype(float)
        assert (st["count"], st["missing"]) == (col.notna().sum(), col.isna().sum())
        np.testing.assert_allclose(
            [st["mean"], st["std"], st["min"], st["max"]],
            [col.mean(), col.std(ddof=1), col.min(), col.max()],
            rtol=1e-9,
        )
    assert tab["label_counts"] == [int((train["default"] == k).sum()) for k in (0, 1)]
    region = tab["stats"]["categorical"]["region"]
    counts = train["region"].value_counts()
    assert region["vocab"] == sorted(counts.index, key=lambda v: (-counts[v], v))
    assert region["counts"] == sorted(counts.values.tolist(), reverse=True)

    # codes: vocab index + 1, for every row of val, looked up by (id, month)
    val = splits["val"]
    by_key = good.set_index(["customer_id", "month"])
    keys = list(zip(val["id"], val["x"][:, month].astype(int), strict=True))
    for j, name in enumerate(tab["categorical"]):
        vocab = tab["stats"]["categorical"][name]["vocab"]
        expect = [vocab.index(v) + 1 for v in by_key.loc[keys, name]]
        assert val["c"][:, j].tolist() == expect
    assert val["label"].tolist() == by_key.loc[keys, "default"].astype(int).tolist()

    # the pipeline ends in training: `gpuspark train tabular --data DS -n 2` (local
    # ranks here: the shared cluster's slots belong to the test session); held-out AUC
    summary = _train(tmp_path / "ds", tmp_path / "run", capsys)
    assert summary["world_size"] == 2 and summary["test"]["split"] == "test"
    assert summary["test"]["samples"] == len(splits["test"]["id"])
    assert summary["test"]["auc"] >= 0.85, summary["test"]


def _train(data: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from gpuspark.cli.main import main

    capsys.readouterr()
    argv = ["train", "tabular", "--data", str(data), "-n", "2", "--local", "--epochs", "3",
            "--batch-size", "1024", "--threads", "1", "--checkpoint-dir", str(out),
            "--test-split", "test",
            "--json"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    return json.loads(text[text.index("{") :])
