"""``gpuspark plan`` and ``gpuspark plan calibrate`` through the real CLI entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuspark.cli.main import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "cluster.toml")
BASE = ["plan", "--spec", EXAMPLE, "--global-batch", "2048"]


def test_plan_prints_the_breakdown_and_names_the_bottleneck(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*BASE, "--model", "resnet50"]) == 0
    out = capsys.readouterr().out
    for figure in ("compute", "communication (exposed)", "comm share", "samples/s",
                   "scaling efficiency"):  # fmt: skip
        assert figure in out
    assert "bottleneck: compute" in out


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--model", "resnet50", "--nodes", "2", "--epochs", "90", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["gpus"] == 16 and plan["per_gpu_batch"] == 128
    assert plan["time_to_train_s"] == pytest.approx(90 * 1_281_167 / plan["samples_per_s"])
    assert plan["comm_share"] < 0.15


def test_sweep_writes_the_scaling_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "scaling.png"
    args = [*BASE, "--model", "resnet50", "--sweep", "nodes=1..4", "--plot", str(png), "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["nodes"] for p in data["plans"]] == [1, 2, 3, 4]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_params_and_flops_instead_of_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*BASE, "--params", "25557032", "--flops-per-sample", "2.45e10", "--json"]
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["bytes_raw"] == 25_557_032 * 4
    assert plan["sources"]["compute"] == "assumed"


def test_unknown_model_suggests_the_close_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--model", "resnt50"]) == 1
    err = capsys.readouterr().err
    assert "model 'resnt50' is unknown (did you mean 'resnet50'?)" in err
    assert len(err.strip().splitlines()) == 1


def test_missing_flops_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--params", "1000"]) == 1
    assert "--flops-per-sample is missing" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, code, text",
    [
        (["--model", "resnet50", "--sweep", "gpus=1..3"], 1, "nodes=A..B"),
        (["--model", "resnet50", "--plot", "x.png"], 1, "--sweep"),
        (["--model", "resnet50", "--compression", "zstd"], 1, "compression 'zstd' is unknown"),
        (["--model", "resnet50", "--calibration", "/no/such.json"], 1, "does not exist"),
    ],
)
def test_bad_options(
    extra: list[str], code: int, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, *extra]) == code
    assert text in capsys.readouterr().err


def test_unknown_gpu_in_spec_asks_for_calibration(capsys: pytest.CaptureFixture[str]) -> None:
    # The built-in embedded spec's GPUs are simulated ("any"): nothing to look up.
    assert main(["plan", "--model", "resnet50", "--global-batch", "64"]) == 1
    assert "calibrate" in capsys.readouterr().err


def test_plan_does_not_import_torch() -> None:
    code = (
        "import sys; from gpuspark.cli.main import main;"
        f"main(['plan', '--spec', {EXAMPLE!r}, '--model', 'resnet50', '--global-batch', '64']);"
        "print('TORCH', 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "TORCH False" in out.stdout


@pytest.mark.slow
def test_calibrate_then_plan_with_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cal = tmp_path / "cal.json"
    args = ["plan", "calibrate", "--local", "--depth", "10", "--width", "0.25", "--input",
            "1,16,16,16", "--out", str(cal)]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "busbw (GB/s)" in out and "decode jpeg" in out and "end-of-backward wait" in out
    data = json.loads(cal.read_text())
    assert data["allreduce"]["world"] == 2 and data["compute"]["recipe"] == "resnet3d"
    assert data["compute"]["straggler_s"] >= 0  # the end-of-backward wait, a median
    args = ["plan", "--model", "resnet3d", "--gpus", "2", "--global-batch", "8",
            "--calibration", str(cal), "--json"]  # fmt: skip
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["sources"]["compute"] == "calibration"
    assert plan["sources"]["comm"] == "calibration"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{}", "holds no calibration: none of allreduce, compute, decode"),
        (
            '{"decode_per_core": "fast", "gpus": -3}',
            "is not a gpuspark calibration: unknown fields 'decode_per_core', 'gpus' "
            "(a calibration has allreduce, compute, decode, machine)",
        ),
        ('{"decode": "fast"}', "decode must be an object, got a string"),
        ('{"compute": [1, 2]}', "compute must be an object, got a list"),
        ("[]", "a JSON list, not an object"),
    ],
)
def test_a_calibration_file_without_a_calibration_is_refused(
    content: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to be accepted, and the plan was byte-identical to one without it."""
    cal = tmp_path / "cal.json"
    cal.write_text(content)
    assert main([*BASE, "--model", "resnet50", "--calibration", str(cal)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: calibration file {cal} ") and expected in err, err
    assert err.count("\n") == 1
