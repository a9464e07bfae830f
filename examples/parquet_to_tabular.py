"""Parquet to a trained tabular model: synthetic credit-risk table -> prep -> train.

The same three steps as the commands

    gpuspark datasets synth-risk risk.parquet --rows 20000
    gpuspark prep parquet risk.parquet risk-shards --label default --id customer_id
    gpuspark train tabular --data risk-shards -n 2 --epochs 3 --test-split test

through the library, in one Spark application: ``synth_risk`` writes the Parquet table,
``prep_parquet`` turns it into a tabular dataset (customer-disjoint train/val/test splits,
statistics and vocabularies in the manifest, bad rows quarantined), and the ``tabular``
recipe trains an MLP on 2 ranks and scores the held-out test split.

    python examples/parquet_to_tabular.py                     # the embedded cluster
    python examples/parquet_to_tabular.py --master 'local[2]' --local   # no cluster at all
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="risk-example", help="folder for the table, shards, run")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("-n", "--num-processes", type=int, default=2, help="ranks")
    parser.add_argument("--master", help="Spark master URL [default: the spec's]")
    parser.add_argument("--local", action="store_true", help="ranks on this machine")
    return parser.parse_args()


def prepare_data(spark: Any, out: Path, rows: int) -> str:
    """The Parquet table and its tabular dataset; returns the dataset's path."""
    from gpuspark.data.prep import prep_parquet
    from gpuspark.demo import synth_risk

    table = synth_risk(out / "risk.parquet", rows, seed=0, overwrite=True, spark=spark)
    print(f"synth-risk: {table.rows} rows of Parquet at {table.path}")
    shards = out / "risk-shards"
    res = prep_parquet(
        out / "risk.parquet", shards, label="default", id="customer_id", overwrite=True, spark=spark
    )
    print(f"prep parquet: {res.rows} rows, splits {res.splits}, {res.quarantined} quarantined")
    return str(shards)


def train(data: str, out: Path, epochs: int, spark: Any, args: argparse.Namespace) -> Any:
    """The ``tabular`` recipe on ``args.num_processes`` ranks; rank 0's summary."""
    import torch

    from gpuspark.train.recipes import RecipeConfig, run

    cfg = RecipeConfig(
        data=data,
        epochs=epochs,
        batch_size=1024,
        lr=3e-3,
        test_split="test",
        checkpoint_dir=str(out / "run"),
        overwrite=True,
    )
    where: dict[str, Any] = {"local": True} if args.local else {"spark": spark}
    if args.local and not torch.cuda.is_available():
        where["gpus_per_process"] = 0
    return run("tabular", cfg, num_processes=args.num_processes, metrics_port=0, **where)


def main() -> None:
    from gpuspark.cluster.session import JobKind, job_session

    args = parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with job_session(JobKind.TRAINING, master=args.master) as spark:
        data = prepare_data(spark, out, args.rows)
        summary = train(data, out, args.epochs, spark, args)
    print(f"best epoch: {summary.best}")
    print(f"test split: {summary.test}")
    print(f"model: {out / 'run' / 'best.pt'}")


if __name__ == "__main__":
    main()
