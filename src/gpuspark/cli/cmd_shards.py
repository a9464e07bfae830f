"""``gpuspark shards``: inspect and verify gpuspark datasets (TFRecord shards + manifest)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuspark.cli._common import JsonOpt, echo, new_app, print_json, print_table
from gpuspark.errors import VerifyFailed

PathArg = Annotated[
    str, typer.Argument(help="Dataset directory (or fsspec URL) with a manifest.json.")
]


def register(app: typer.Typer) -> None:
    """Add the ``shards`` command group to ``app``."""
    shards = new_app(help="Inspect and verify training shard datasets.", no_args_is_help=True)
    shards.command("inspect")(inspect)
    shards.command("verify")(verify)
    app.add_typer(shards, name="shards")


def inspect(path: PathArg, json: JsonOpt = False) -> None:
    """Shards, records, bytes, schema and balance (min/max records per shard)."""
    from gpuspark.data.format import inspect_dataset

    info = inspect_dataset(path)
    if json:
        print_json(info)
        return
    print_table(
        f"dataset {info['path']}",
        ["shards", "records", "bytes", "min/shard", "max/shard", "compression", "splits"],
        [
            [
                info["shards"],
                info["records"],
                info["bytes"],
                info["min_records_per_shard"],
                info["max_records_per_shard"],
                info["compression"] or "none",
                ", ".join(f"{k}={v}" for k, v in info["splits"].items()) or "-",
            ]
        ],
    )
    print_table(
        "schema",
        ["key", "kind", "dtype/item", "shape", "records"],
        [
            [k, s["kind"], s.get("dtype") or s.get("item") or "", _shape(s), s.get("count", "")]
            for k, s in info["schema"].items()
        ],
    )


def _shape(spec: dict) -> str:
    shape = spec.get("shape")
    if spec.get("kind") != "ndarray":
        return ""
    return (
        "varies"
        if shape is None
        else "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"
    )


def verify(path: PathArg, json: JsonOpt = False) -> None:
    """Re-check every record CRC, index entry and file hash; exit 1 listing each problem."""
    from gpuspark.data.format import verify_dataset

    problems = verify_dataset(path)
    if json:  # the problems are the one JSON object; exit code 1 as without --json
        print_json({"path": path, "ok": not problems, "problems": [vars(p) for p in problems]})
        raise typer.Exit(1 if problems else 0)
    if problems:
        print_table(
            f"{len(problems)} problem(s) in {path}",
            ["shard", "record", "byte", "problem"],
            [[p.shard, p.record, p.offset, p.message] for p in problems],
        )
    else:
        echo(f"ok: {path}: every record CRC, index entry and shard hash checks out")
    if problems:
        raise VerifyFailed(f"{path}: {len(problems)} problem(s) found by verify")
