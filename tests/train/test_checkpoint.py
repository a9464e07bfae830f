"""Checkpoints: atomic files, keep-last-K, and exact resume after SIGKILL on 2 gloo ranks."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# 2 ranks, PowerSGD (error feedback state), dropout and noise augmentation (RNG state), SGD with
# momentum (optimizer state), StepLR (scheduler), a loader with set_epoch/state_dict.
_SCRIPT = textwrap.dedent(
    """
    import os, socket, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp

    EPOCHS, STEPS = 3, 8

    class Data:
        def __init__(self, rank):
            g = torch.Generator().manual_seed(rank)
            self.x = torch.randn(STEPS * 8, 32, generator=g)
            self.y = (self.x[:, 0] > 0).long()
            self.epoch, self.pos = 0, 0
        def set_epoch(self, e):
            self.epoch, self.pos = e, 0
        def state_dict(self):
            return {"epoch": self.epoch, "pos": self.pos}
        def load_state_dict(self, s):
            self.epoch, self.pos = s["epoch"], s["pos"]
        def __iter__(self):
            order = torch.randperm(len(self.x), generator=torch.Generator().manual_seed(self.epoch))
            while self.pos < STEPS:
                i = order[self.pos * 8:(self.pos + 1) * 8]
                self.pos += 1
                yield self.x[i], self.y[i]

    def worker(rank, port, ckdir, out, resume):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                          RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
        torch.manual_seed(0)
        from gpuspark.train import prepare
        from gpuspark.train.loop import FitConfig, fit
        net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                  torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
        m = prepare(net, compression="powersgd", powersgd_rank=2, powersgd_start_iter=4)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7)
        torch.manual_seed(1000 + rank)  # per-rank augmentation stream
        def aug(x, y):
            return x + 0.1 * torch.randn_like(x), y
        def tick(step):
            if rank == 0:
                print(f"step {step}", flush=True)
        cfg = FitConfig(epochs=EPOCHS, checkpoint_dir=ckdir, checkpoint_every=1, keep=2,
                        resume=resume, log=None)
        fit(m, opt, torch.nn.functional.cross_entropy, Data(rank), config=cfg,
            scheduler=sched, transform=aug, on_step=tick)
        if rank == 0:
            torch.save(m.module.state_dict(), out)
        dist.destroy_process_group()

    if __name__ == "__main__":
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        ckdir, out, resume = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
        mp.spawn(worker, args=(port, ckdir, out, resume), nprocs=2)
    """
)
TOTAL_STEPS = 24


def _run(script: Path, ckdir: Path, out: Path, resume: bool, kill_at: int | None = None) -> int:
    proc = subprocess.Popen(
        [sys.executable, str(script), str(ckdir), str(out), "1" if resume else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    last = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("step "):
            last = int(line.split()[1])
            if kill_at is not None and last >= kill_at:
                os.killpg(proc.pid, signal.SIGKILL)
                break
    proc.wait(timeout=300)
    if kill_at is None:
        assert proc.returncode == 0, proc.stderr.read()[-3000:] if proc.stderr else ""
    else:
        assert proc.returncode == -signal.SIGKILL
        time.sleep(0.5)  # let the killed process group go away
    return last


def _weights_equal(a: Path, b: Path) -> bool:
    import torch

    wa = torch.load(a, weights_only=True)
    wb = torch.load(b, weights_only=True)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_sigkill_then_resume_gives_bitwise_equal_weights(tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT)
    _run(script, tmp_path / "ck_full", tmp_path / "full.pt", resume=False)
    kill_at = random.Random().randint(2, TOTAL_STEPS - 4)
    killed_after = _run(
        script, tmp_path / "ck", tmp_path / "killed.pt", resume=False, kill_at=kill_at
    )
    assert not (tmp_path / "killed.pt").exists()
    assert killed_after < TOTAL_STEPS
    _run(script, tmp_path / "ck", tmp_path / "resumed.pt", resume=True)
    assert _weights_equal(tmp_path / "full.pt", tmp_path / "resumed.pt"), f"killed at {kill_at}"
    # keep=2: only the last two committed checkpoints remain, no temporary files.
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == [f"step-{TOTAL_STEPS - 1:09d}.pt", f"step-{TOTAL_STEPS:09d}.pt"], names


def test_resume_without_a_checkpoint_starts_fresh_and_torn_temp_is_ignored(tmp_path: Path) -> None:
    import torch

    from gpuspark.train import checkpoint as ck

    (tmp_path / ".step-000000009.pt.tmp-123").write_bytes(b"half a file")
    model = torch.nn.Linear(3, 2)
    assert ck.latest(tmp_path) is None
    assert ck.load(tmp_path, model=model) is None
    ck.save(tmp_path, model=model, epoch=0, step=5)
    saved = [p.detach().clone() for p in model.parameters()]
    draw_after_save = torch.rand(2)
    fresh = torch.nn.Linear(3, 2)
    res = ck.load(tmp_path, model=fresh)
    assert res is not None and res.step == 5 and res.path.name == "step-000000005.pt"
    assert all(torch.equal(a, b) for a, b in zip(saved, fresh.parameters(), strict=True))
    # The torch RNG is back where it was at save time: the same draw comes out again.
    assert torch.equal(torch.rand(2), draw_after_save)


def test_keep_last_k_and_world_size_mismatch(tmp_path: Path) -> None:
    import torch

    from gpuspark.train import checkpoint as ck

    model = torch.nn.Linear(3, 2)
    for step in range(1, 6):
        ck.save(tmp_path, model=model, epoch=0, step=step, keep=3)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == [
        f"step-{s:09d}.pt" for s in (3, 4, 5)
    ]
    newest = ck.latest(tmp_path)
    assert newest is not None
    payload = torch.load(newest, weights_only=False)
    payload["world_size"] = 4
    torch.save(payload, tmp_path / "step-000000006.pt")
    with pytest.raises(ck.CheckpointError, match="written by 4 ranks, this run has 1"):
        ck.load(tmp_path, model=model)


def test_an_elastic_rank_resumes_a_checkpoint_of_another_world_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # launched with --min-ranks (GPUSPARK_MIN_RANKS): a retry with fewer ranks resumes; the
    # weights and optimizer load, the other world's per-rank RNG state does not
    import torch

    from gpuspark.train import checkpoint as ck

    model = torch.nn.Linear(3, 2)
    ck.save(tmp_path, model=model, epoch=1, step=7)
    newest = ck.latest(tmp_path)
    assert newest is not None
    payload = torch.load(newest, weights_only=False)
    payload["world_size"] = 2
    payload["ranks"] = [payload["ranks"][0], payload["ranks"][0]]
    payload["ranks"][0] = {**payload["ranks"][0], "rng": {"broken": True}}  # must stay unread
    torch.save(payload, tmp_path / "step-000000008.pt")
    monkeypatch.setenv("GPUSPARK_MIN_RANKS", "1")
    fresh = torch.nn.Linear(3, 2)
    res = ck.load(tmp_path, model=fresh)
    assert res is not None and res.world_size == 2 and res.step == 7
    assert all(
        torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters(), strict=True)
    )
    monkeypatch.delenv("GPUSPARK_MIN_RANKS")
    with pytest.raises(ck.CheckpointError, match="written by 2 ranks, this run has 1"):
        ck.load(tmp_path, model=fresh)
