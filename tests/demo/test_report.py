"""The demo's report from a run's figures, without a cluster; the package imports cheaply."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpuspark.demo import DemoConfig, build_report, write_report
from gpuspark.train.recipes.summary import TrainSummary


def _epoch(epoch: int, auc: float | None) -> dict[str, Any]:
    return {
        "epoch": epoch, "loss": 0.7 - 0.1 * epoch, "lr": 1e-3, "samples": 80, "seconds": 4.0,
        "samples_per_s": 20.0, "data_wait_s": 0.4, "compute_s": 2.4, "comm_exposed_s": 0.8,
        "optimizer_s": 0.2, "other_s": 0.2, "bytes_raw_per_step": 1000, "val_acc": 0.5,
        "val_auc": auc,
    }  # fmt: skip


def test_report_figures_json_and_plot(tmp_path: Path) -> None:
    cfg = DemoConfig(studies=4, epochs=2, out=str(tmp_path))
    cohort = SimpleNamespace(studies=4, files=120, lesions=2)
    prep = SimpleNamespace(as_dict=lambda: {"rows": 4, "quarantined": 0})
    summary = TrainSummary(
        recipe="resnet3d",
        world_size=2,
        backend="gloo",
        device="cpu",
        parameters=1234,
        splits={"train": 2, "val": 1, "test": 1},
        history=[_epoch(0, None), _epoch(1, 0.75)],
        best={"score": 0.75, "epoch": 1, "val_auc": 0.75},
        comm={"bytes_raw": 4000, "bytes_sent": 1000},
        comm_after_start={"bytes_sent": 300, "steps": 3, "sent_over_raw": 0.1},
        test={"acc": 1.0, "auc": None},
    )
    report = build_report(cfg, cohort, prep, summary, {"total_s": 9.0})
    assert report["samples_per_s"] == 20.0 and report["final_val_auc"] == 0.75
    assert report["bytes"]["saved_fraction"] == 0.75
    assert report["step_time_breakdown"]["fractions"]["compute"] == 0.6
    assert report["validation"] == {"epoch": 1, "val_auc": 0.75}
    write_report(report, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(
        json.dumps(report, default=str)
    )
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_import_is_cheap() -> None:
    code = (
        "import sys, gpuspark.demo; "
        "print(sorted(m for m in ('torch', 'pyspark', 'pydicom', 'matplotlib', 'PIL') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _summary(steps_run: int, after_steps: int) -> TrainSummary:
    return TrainSummary(
        recipe="resnet3d",
        world_size=2,
        backend="gloo",
        device="cpu",
        parameters=1234,
        splits={"train": 2, "val": 1, "test": 1},
        history=[_epoch(0, 0.5)],
        best={"score": 0.5, "epoch": 0, "val_auc": 0.5},
        comm={"steps": steps_run, "bytes_raw": 6000, "bytes_sent": 6000},
        comm_after_start={"bytes_sent": 0, "steps": after_steps, "sent_over_raw": 0.0},
        test=None,
    )


def test_powersgd_that_never_started_is_said_so(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """6 steps in a run whose PowerSGD starts at step 10: no "0 bytes/step after start"."""
    from gpuspark.cli.cmd_demo import _print_report

    cfg = DemoConfig(studies=4, epochs=1, out=str(tmp_path), powersgd_start_iter=10)
    cohort = SimpleNamespace(studies=4, files=120, lesions=2)
    prep = SimpleNamespace(as_dict=lambda: {"rows": 4, "quarantined": 0})
    report = build_report(cfg, cohort, prep, _summary(6, 0), {"total_s": 9.0})
    b = report["bytes"]
    assert b["started"] is False and b["sent_per_step_after_start"] is None
    assert b["not_started_reason"] == "powersgd did not start: 6 steps run, start step 10"
    monkeypatch.setenv("COLUMNS", "200")
    _print_report(report, tmp_path)
    out = capsys.readouterr().out
    assert "powersgd did not start: 6 steps run, start step 10" in out
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines()
            if line.count("│") == 3}  # fmt: skip
    assert rows["bytes/step, powersgd (after start)"].startswith("powersgd did not start")
    assert rows["bytes saved over the run"].startswith("none (powersgd did not start")

    # A run past the start step reports the figures as before.
    started = build_report(cfg, cohort, prep, _summary(12, 2), {"total_s": 9.0})["bytes"]
    assert started["started"] is True and started["not_started_reason"] is None
    assert started["sent_per_step_after_start"] == 0


def test_closed_loop_puts_predict_dicom_next_to_the_test_split() -> None:
    from gpuspark.demo.report import closed_loop

    test = {"split": "test", "samples": 20, "auc": 0.95, "acc": 0.9}
    scored = {"series": 20, "quarantined": 0, "unscored": [], "auc": 0.95 + 1e-9, "acc": 0.9}
    loop = closed_loop(test, scored)
    assert loop["test_auc_in_training"] == 0.95 and loop["predict_dicom_auc"] == 0.95 + 1e-9
    assert loop["agree"] is True and loop["predict"] is scored
    assert closed_loop(test, {**scored, "auc": 0.94})["agree"] is False
    assert closed_loop(test, {**scored, "acc": 0.85})["agree"] is False
    assert closed_loop(test, {**scored, "unscored": ["1.2.3"]})["agree"] is False
    one_class = closed_loop({"auc": None, "acc": 1.0}, {**scored, "auc": None, "acc": 1.0})
    assert one_class["agree"] is True  # a one-class split has no AUC on either side
    assert closed_loop(test, None) == {"predict": None, "agree": None}


def test_the_closed_loop_is_printed_with_its_verdict(capsys: Any) -> None:
    from gpuspark.cli.cmd_demo import _closed_loop_rows
    from gpuspark.demo.report import closed_loop

    assert _closed_loop_rows(closed_loop({"auc": 0.9, "acc": 0.8}, None)) == []
    same = _closed_loop_rows(closed_loop({"auc": 0.9, "acc": 0.8}, {"auc": 0.9, "acc": 0.8}))
    assert same[0][0] == "held out via predict dicom: acc / AUC"
    assert "agrees with training" in same[0][1]
    other = _closed_loop_rows(closed_loop({"auc": 0.9, "acc": 0.8}, {"auc": 0.7, "acc": 0.8}))
    assert "DIFFERS from training" in other[0][1]
