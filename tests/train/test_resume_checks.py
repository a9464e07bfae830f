"""Resume and --checkpoint-dir mistakes are refused on the driver, in one line, before any rank.

A resume with other model options (``--depth``), a file given as ``--checkpoint-dir`` and a
damaged checkpoint file each give one ``error:`` line naming the checkpoint and exit code 1,
instead of a ``load_state_dict`` wall of keys or a traceback from every rank.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuspark.train import checkpoint as ck
from gpuspark.train import recipes


def _train(data: str, ckdir: Path, *extra: str) -> list[str]:
    return [
        "train", "resnet3d", "--data", data, "--epochs", "1", "--batch-size", "2",
        "--width", "0.25", "--local", "--num-processes", "1", "--checkpoint-dir", str(ckdir),
        *extra,
    ]  # fmt: skip


def _train_in_subprocess(args: list[str]) -> None:
    """A real training run in its own process: the local launcher forks, which is only safe
    before torch has started threads (other tests of this process may have)."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    cmd = [sys.executable, "-m", "gpuspark.cli.main", *args]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]


def _one_error_line(capsys: pytest.CaptureFixture) -> str:
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text and "state_dict" not in text, text
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.err
    return lines[0]


def test_resume_with_another_depth_names_the_field(
    ct_data: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from gpuspark.cli.main import main

    ckdir = tmp_path / "ckpt"
    _train_in_subprocess(_train(ct_data, ckdir, "--depth", "10"))
    written = ck.latest(ckdir)
    assert written is not None
    info = ck.inspect(ckdir)
    assert info is not None and info.config == {
        "recipe": "resnet3d", "depth": 10, "width": 0.25, "stem_stride": 1, "pool": "avg",
        "num_classes": 2,
    }  # fmt: skip
    capsys.readouterr()
    assert main(_train(ct_data, ckdir, "--depth", "18", "--resume")) == 1
    line = _one_error_line(capsys)
    assert str(written) in line
    assert "depth 10 in the checkpoint, 18 in this run" in line
    assert "depth=10" in line and "--checkpoint-dir" in line
    # The same options resume fine (the check does not refuse a good resume).
    _train_in_subprocess(_train(ct_data, ckdir, "--depth", "10", "--resume", "--epochs", "2"))


def test_library_load_of_another_model_is_one_line(tmp_path: Path) -> None:
    cfg10 = recipes.RecipeConfig(data="-", depth=10, width=0.25)
    cfg18 = recipes.RecipeConfig(data="-", depth=18, width=0.25)
    ck.save(tmp_path, model=recipes.build_model("resnet3d", cfg10, 2), epoch=1, step=3)
    with pytest.raises(ck.CheckpointError) as info:
        ck.load(tmp_path, model=recipes.build_model("resnet3d", cfg18, 2))
    msg = str(info.value)
    assert "\n" not in msg and "step-000000003.pt does not fit this model" in msg
    assert "not in it (first: layer1.1." in msg and "--checkpoint-dir" in msg
    # Same names, other shapes (width): the first differing tensor with both shapes.
    cfg_wide = recipes.RecipeConfig(data="-", depth=10, width=0.5)
    with pytest.raises(ck.CheckpointError, match=r"differ in shape \(first: conv1.weight"):
        ck.load(tmp_path, model=recipes.build_model("resnet3d", cfg_wide, 2))
    # A recorded config is compared first and named field by field.
    ck.save(tmp_path, model=torch_linear(), epoch=0, step=4, config={"depth": 10, "width": 1.0})
    with pytest.raises(ck.CheckpointError, match="depth 10 in the checkpoint, 18 in this run"):
        ck.check_config(tmp_path, {"depth": 18, "width": 1.0})
    assert ck.check_config(tmp_path, {"depth": 10, "width": 1.0}) is not None


def torch_linear() -> object:
    import torch

    return torch.nn.Linear(3, 2)


def test_checkpoint_dir_that_is_a_file(
    ct_data: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from gpuspark.cli.main import main

    not_a_dir = tmp_path / "ckpt"
    not_a_dir.write_text("notes")
    for extra in ((), ("--resume",)):
        assert main(_train(ct_data, not_a_dir, *extra)) == 1
        line = _one_error_line(capsys)
        assert f"checkpoint directory {not_a_dir} is a file, not a directory" in line
    assert main(_train(ct_data, not_a_dir / "sub")) == 1
    assert f"{not_a_dir} is a file" in _one_error_line(capsys)


@pytest.mark.parametrize("content", ["empty", "binary", "truncated", "foreign"])
def test_damaged_checkpoint_with_resume(
    content: str, ct_data: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import torch

    from gpuspark.cli.main import main

    ckdir = tmp_path / "ckpt"
    ckdir.mkdir()
    bad = ckdir / "step-000000007.pt"
    if content == "empty":
        bad.write_bytes(b"")
    elif content == "binary":
        bad.write_bytes(np.random.default_rng(1).bytes(4096))
    elif content == "truncated":
        ck.save(ckdir, model=torch_linear(), epoch=0, step=7)
        bad.write_bytes(bad.read_bytes()[:300])
    else:
        torch.save(torch_linear().state_dict(), bad)  # weights only, not a gpuspark checkpoint
    assert main(_train(ct_data, ckdir, "--resume")) == 1
    line = _one_error_line(capsys)
    assert f"checkpoint {bad}" in line
    assert "cannot be read" in line or "is not a gpuspark checkpoint" in line
