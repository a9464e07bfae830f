"""``gpuspark demo``: DICOM -> Spark -> shards -> DDP 3D ResNet -> report, in one command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpuspark.cli._common import JsonOpt, SpecOpt, echo, print_json, print_table


def demo(
    studies: Annotated[int, typer.Option(help="Synthetic CT studies to generate.", min=1)] = 200,
    epochs: Annotated[int, typer.Option(help="Training epochs.", min=1)] = 12,
    out: Annotated[Path, typer.Option("-o", "--out", help="Output directory.")] = Path(
        "gpuspark-demo"
    ),
    seed: Annotated[int, typer.Option(help="Cohort and training seed.")] = 0,
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run the flagship pipeline on an embedded cluster and write report.json + report.png."""
    from gpuspark.demo import DemoConfig, run_demo

    cfg = DemoConfig(
        studies=studies, epochs=epochs, out=str(out), seed=seed, spec=str(spec) if spec else None
    )
    report = run_demo(cfg, log=(lambda _m: None) if json_out else echo)
    if json_out:
        print_json(report)
        return
    _print_report(report, out)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _closed_loop_rows(loop: dict[str, Any]) -> list[tuple[str, str]]:
    """The held-out studies scored by ``predict dicom``, and whether they agree with the
    in-training test scores (none when the demo did not score them)."""
    if loop.get("predict") is None:
        return []
    scores = f"{_num(loop.get('predict_dicom_acc'))} / {_num(loop.get('predict_dicom_auc'))}"
    agree = "agrees with training" if loop.get("agree") else "DIFFERS from training"
    return [("held out via predict dicom: acc / AUC", f"{scores} ({agree})")]


def _compressed_rows(b: dict[str, Any]) -> list[tuple[str, str]]:
    """Bytes sent with compression; says so when PowerSGD never started (a short run)."""
    reason = b.get("not_started_reason")
    after = f"bytes/step, {b['compression']} (after start)"
    if reason:
        return [(after, reason), ("bytes saved over the run", f"none ({reason})")]
    return [
        (after, f"{b['sent_per_step_after_start']:,}"),
        ("bytes saved over the run", _pct(b["saved_fraction"])),
    ]


def _print_report(r: dict[str, Any], out: Path) -> None:
    prep, f, b = r["prep"], r["step_time_breakdown"]["fractions"], r["bytes"]
    val, test = r.get("validation") or {}, r.get("test") or {}
    parts = ("data_wait", "compute", "comm_exposed", "optimizer", "other")
    splits = "/".join(str(r["splits"].get(k, 0)) for k in ("train", "val", "test"))
    best = f"{val.get('epoch', '-')}: {_num(val.get('val_acc'))} / {_num(val.get('val_auc'))}"
    rows = [
        ("studies / DICOM files", f"{r['studies']} / {r['dicom_files']}"),
        ("quarantined", prep.get("quarantined", "-")),
        ("shards", prep.get("shards", "-")),
        ("splits (train/val/test)", splits),
        ("model", f"{r['model']['name']}, {r['model']['parameters']:,} params"),
        ("ranks", f"{r['world_size']} ({r['backend']})"),
        ("samples/s", f"{r['samples_per_s']:.1f}"),
        ("step time: data/compute/comm/opt/other", " / ".join(_pct(f[k]) for k in parts)),
        ("bytes/step, no compression", f"{b['raw_per_step']:,}"),
        *_compressed_rows(b),
        ("best val epoch: acc / AUC", best),
        ("test (held out): acc / AUC", f"{_num(test.get('acc'))} / {_num(test.get('auc'))}"),
        *_closed_loop_rows(r.get("closed_loop") or {}),
        ("wall time", f"{r['timings_s']['total_s']:.0f} s"),
    ]
    print_table("gpuspark demo", ["", "value"], rows)
    echo(f"report: {out / 'report.json'}, plot: {out / 'report.png'}")


def register(app: typer.Typer) -> None:
    """Add ``gpuspark demo``."""
    app.command("demo")(demo)
