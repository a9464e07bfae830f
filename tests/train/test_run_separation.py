"""One run per checkpoint directory (issue: data loss, case 2).

A new ``gpuspark train`` into a ``--checkpoint-dir`` that holds an earlier run used to
overwrite its ``best.pt`` and ``history.json`` and prune its own new checkpoint in favour of
the old run's higher step numbers. Now: the new run is refused (``--resume`` or
``--overwrite``), checkpoints carry a run id, and pruning never touches another run's files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuspark.train import checkpoint as ck


def _train_args(data: str, ckdir: Path, epochs: int, *extra: str) -> list[str]:
    return [
        "train", "resnet3d", "--data", data, "--epochs", str(epochs), "--batch-size", "2",
        "--depth", "10", "--width", "0.25", "--local", "--num-processes", "1",
        "--metrics-port", "0", "--checkpoint-dir", str(ckdir), *extra,
    ]  # fmt: skip


def _cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, in its own process (the local launcher forks)."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    cmd = [sys.executable, "-m", "gpuspark.cli.main", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def _one_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def test_new_run_into_an_earlier_runs_folder(ct_data: str, tmp_path: Path) -> None:
    ckdir = tmp_path / "ck"
    first = _cli(_train_args(ct_data, ckdir, 2))
    assert first.returncode == 0, first.stderr[-3000:]
    (ckdir / "notes.txt").write_text("my notes on run 1")
    before = _files(ckdir)
    assert {"best.pt", "history.json", "notes.txt"} <= set(before)
    old_run = ck.run_of(ck.list_checkpoints(ckdir)[-1])
    assert old_run

    # a new run without --resume: refused before any rank, nothing touched
    line = _one_line(_cli(_train_args(ct_data, ckdir, 1)))
    assert "already holds an earlier training run" in line
    assert "--resume" in line and "--overwrite" in line
    assert _files(ckdir) == before

    # both flags: one line, nothing touched
    line = _one_line(_cli(_train_args(ct_data, ckdir, 1, "--resume", "--overwrite")))
    assert "contradict" in line
    assert _files(ckdir) == before

    # --overwrite: the earlier run's files are replaced, the user's file stays
    again = _cli(_train_args(ct_data, ckdir, 1, "--overwrite"))
    assert again.returncode == 0, again.stderr[-3000:]
    after = _files(ckdir)
    assert after["notes.txt"] == b"my notes on run 1"
    runs = {ck.run_of(p) for p in ck.list_checkpoints(ckdir)}
    assert len(runs) == 1 and old_run not in runs
    assert after["best.pt"] != before["best.pt"]
    assert ck.inspect(ckdir).epoch == 1  # type: ignore[union-attr]


def test_a_folder_of_other_files_is_refused_without_overwrite(ct_data: str, tmp_path: Path) -> None:
    ckdir = tmp_path / "project"
    ckdir.mkdir()
    (ckdir / "train.py").write_text("print('mine')\n")
    line = _one_line(_cli(_train_args(ct_data, ckdir, 1)))
    assert "already holds other files (train.py)" in line
    assert (ckdir / "train.py").read_text() == "print('mine')\n"


# -- the library rules, without a launch ------------------------------------------------------


def _save_run(d: Path, run: str | None, steps: range, keep: int = 3) -> None:
    import torch

    model = torch.nn.Linear(3, 2)
    for step in steps:
        ck.save(d, model=model, epoch=0, step=step, keep=keep, run_id=run)


def test_pruning_never_touches_another_runs_checkpoints(tmp_path: Path) -> None:
    _save_run(tmp_path, "old", range(10, 90, 10))  # the earlier run: steps 60, 70, 80 kept
    _save_run(tmp_path, "new", range(1, 3))  # a new run, lower step numbers
    names = {p.name: ck.run_of(p) for p in ck.list_checkpoints(tmp_path)}
    assert names == {
        "step-000000001.pt": "new",
        "step-000000002.pt": "new",
        "step-000000060.pt": "old",
        "step-000000070.pt": "old",
        "step-000000080.pt": "old",
    }
    # the run that wrote last is the one a resume continues, not the one with more steps
    newest = ck.latest(tmp_path)
    assert newest is not None and newest.name == "step-000000002.pt"
    _save_run(tmp_path, "new", range(3, 6))
    new = [p.name for p in ck.list_checkpoints(tmp_path) if ck.run_of(p) == "new"]
    assert new == ["step-000000003.pt", "step-000000004.pt", "step-000000005.pt"]
    assert sum(ck.run_of(p) == "old" for p in ck.list_checkpoints(tmp_path)) == 3


def test_check_new_run_and_clear_run(tmp_path: Path) -> None:
    _save_run(tmp_path, "r1", range(1, 3))
    (tmp_path / "best.pt").write_bytes(b"best")
    (tmp_path / "history.json").write_text("{}")
    (tmp_path / ".step-000000009.pt.tmp-77").write_bytes(b"torn")
    (tmp_path / "README.md").write_text("keep")
    with pytest.raises(ck.CheckpointError, match="an earlier training run"):
        ck.check_new_run(tmp_path, overwrite=False, what="--checkpoint-dir")
    ck.check_new_run(tmp_path, overwrite=True, what="--checkpoint-dir")  # allowed
    ck.check_new_run(tmp_path / "missing", overwrite=False, what="--checkpoint-dir")
    removed = ck.clear_run(tmp_path)
    assert removed == [
        ".step-000000009.pt.tmp-77",
        "best.pt",
        "history.json",
        "step-000000001.pt",
        "step-000000002.pt",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]


def test_a_resumed_run_keeps_its_best_model(tmp_path: Path) -> None:
    """``best.pt`` records its score; a resume starts from it, so a worse epoch after the
    resume does not replace the best model of the epochs before."""
    import torch

    from gpuspark.train.recipes import RecipeConfig
    from gpuspark.train.recipes.run_dirs import earlier_best

    cfg = RecipeConfig(data="x", checkpoint_dir=str(tmp_path), resume=True)
    assert earlier_best(cfg) == {}
    payload = {"recipe": "resnet3d", "epoch": 6, "score": 0.134, "scores": {"val_acc": 0.134}}
    torch.save({**payload, "model": {}}, tmp_path / "best.pt")
    assert earlier_best(cfg) == {"score": 0.134, "epoch": 6, "val_acc": 0.134}


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_resume_with_nothing_to_resume_is_refused(
    state: str, ct_data: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in ``--checkpoint-dir`` with ``--resume`` used to train from scratch in silence."""
    from gpuspark.cli.main import main

    ckdir = tmp_path / "ckpt-typo"
    if state == "empty":
        ckdir.mkdir()
    assert main(_train_args(ct_data, ckdir, 1, "--resume")) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    where = "does not exist" if state == "missing" else "holds no checkpoint"
    assert f"--resume: {ckdir} {where}, so there is nothing to continue" in lines[0]
    assert "leave out --resume" in lines[0]
    assert (state == "empty") == ckdir.exists()  # nothing was created
