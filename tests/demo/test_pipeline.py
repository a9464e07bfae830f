"""The flagship demo: a quick pipeline check on the test cluster, and the full run (slow)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpuspark.demo import DemoConfig, run_demo

REPORT_KEYS = {
    "studies", "dicom_files", "prep", "splits", "model", "world_size", "backend",
    "samples_per_s", "step_time_breakdown", "bytes", "validation", "test", "history",
    "timings_s", "closed_loop",
}  # fmt: skip


def _check_report(report: dict[str, Any], out: Path, epochs: int) -> None:
    assert set(report) >= REPORT_KEYS
    assert json.loads((out / "report.json").read_text()) == json.loads(
        json.dumps(report, default=str)
    )
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "model" / "best.pt").exists()
    assert report["world_size"] == 2 and report["backend"] == "gloo"
    assert report["prep"]["rows"] == report["studies"]
    assert report["prep"]["quarantined"] == 0
    assert len(report["history"]) == epochs
    fr = report["step_time_breakdown"]["fractions"]
    assert set(fr) == {"data_wait", "compute", "comm_exposed", "optimizer", "other"}
    assert abs(sum(fr.values()) - 1.0) < 0.01 and fr["compute"] > 0
    b = report["bytes"]
    assert b["raw_total"] > 0 and 0 < b["sent_total"] <= b["raw_total"]
    # the loop closed: the held-out studies' DICOM files through `predict dicom` score as the
    # test split did in training (every test series scored, AUC and accuracy equal)
    loop = report["closed_loop"]
    assert loop["predict"]["series"] == report["splits"]["test"] > 0, loop
    assert loop["predict"]["quarantined"] == 0 and loop["predict"]["unscored"] == []
    assert loop["agree"] is True, loop
    assert loop["predict_dicom_acc"] == loop["test_acc_in_training"], loop
    from gpuspark.infer import MARKER

    assert (out / "predictions" / MARKER).is_file()
    got, want = _held_out_probs(out), _reference_probs(out)
    assert got.keys() == want.keys() and len(got) == report["splits"]["test"]
    assert max(abs(got[k] - want[k]) for k in want) <= 1e-6, (got, want)


def _held_out_probs(out: Path) -> dict[str, float]:
    import pyarrow.dataset as ds

    table = ds.dataset(str(out / "predictions"), format="parquet").to_table()
    return dict(zip(table["id"].to_pylist(), table["prob_1"].to_pylist(), strict=True))


def _reference_probs(out: Path) -> dict[str, float]:
    """The test split's shard volumes through best.pt's network in this process, as the
    in-training test scored them (the recipe's decoder of the recorded config)."""
    import torch

    from gpuspark.data.load import ShardDataset, World
    from gpuspark.infer import load_volume_model
    from gpuspark.infer.volume import build_volume_network

    model = load_volume_model(out / "model" / "best.pt")
    net = build_volume_network(model.data, model.path)
    ds = ShardDataset(
        out / "shards", decode="raw", split="test", shuffle=False, drop_last=False, world=World()
    )
    with torch.no_grad():
        return {
            str(s["id"]): float(net(torch.from_numpy(model.decode(s)[0][None])).softmax(1)[0, 1])
            for s in ds
        }


@pytest.mark.spark
def test_demo_pipeline_quick(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # 16 studies, 1 epoch, PowerSGD from step 2: checks the wiring, not the accuracy.
    cfg = DemoConfig(studies=16, epochs=1, out=str(tmp_path), powersgd_start_iter=2)
    report = run_demo(cfg, spark=spark)
    _check_report(report, tmp_path, epochs=1)
    assert report["bytes"]["compression"] == "powersgd"
    from gpuspark.cli.cmd_demo import _print_report

    _print_report(report, tmp_path)
    printed = capsys.readouterr().out
    assert "bytes/step, powersgd" in printed and "test (held out)" in printed
    assert "held out via predict dicom" in printed and "agrees with training" in printed


@pytest.mark.slow
def test_make_demo_reaches_auc_09_within_10_minutes(tmp_path: Path) -> None:
    from gpuspark.cli.main import main

    t0 = time.perf_counter()
    assert main(["demo", "--out", str(tmp_path)]) == 0
    wall = time.perf_counter() - t0
    report = json.loads((tmp_path / "report.json").read_text())
    _check_report(report, tmp_path, epochs=DemoConfig().epochs)
    assert report["validation"]["val_auc"] >= 0.9, report["validation"]
    assert report["bytes"]["sent_over_raw_after_start"] <= 0.10
    assert wall < 600, wall
