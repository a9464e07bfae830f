"""Sharded training (FSDP2 / HSDP) on 2 gloo CPU ranks: parameter bytes per rank, the same
loss as DDP, exact resume from sharded checkpoints, resharding, and the refusals."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

_SCRIPT = textwrap.dedent(
    """
    import json, os, socket, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp

    STEPS = 6

    class Block(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.a, self.b = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
            self.drop = torch.nn.Dropout(0.1)
        def forward(self, x):
            return x + self.b(self.drop(torch.relu(self.a(x))))

    def model():
        torch.manual_seed(0)
        lin = torch.nn.Linear
        return torch.nn.Sequential(lin(32, 64), Block(64), Block(64), lin(64, 2))

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

    class Stop(Exception):
        pass

    def train(rank, strategy, epochs, ckdir=None, resume=False, stop_at=None, accum=1, **kw):
        from gpuspark.train import prepare
        from gpuspark.train.loop import FitConfig, fit
        m = prepare(model(), strategy=strategy, **kw)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7)
        torch.manual_seed(1000 + rank)  # per-rank dropout / augmentation stream
        def aug(x, y):
            return x + 0.1 * torch.randn_like(x), y
        def tick(step):
            if rank == 0 and stop_at == -1:
                print(f"step {step}", flush=True)
            if step == stop_at:
                raise Stop()
        cfg = FitConfig(epochs=epochs, checkpoint_dir=ckdir, checkpoint_every=2 if ckdir else 0,
                        keep=2, resume=resume, log=None, metrics_port=0,
                        accum_steps=accum)
        try:
            hist = fit(m, opt, torch.nn.functional.cross_entropy, Data(rank), config=cfg,
                       scheduler=sched, transform=aug, on_step=tick)
        except Stop:
            hist = None
        return m, hist

    def full(m):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        sd = get_model_state_dict(m, options=StateDictOptions(full_state_dict=True))
        return {k: v.clone() for k, v in sd.items()}

    def comm(hist):
        h = hist[-1]
        return [h["bytes_sent_per_step"], h["bytes_raw_per_step"], h["fractions"]["comm_exposed"]]

    def main(rank, out):
        res = {}
        m, hist = train(rank, "ddp", 3)
        res["ddp"] = {"loss": [h["loss"] for h in hist], "memory": hist[-1]["memory"],
                      "comm": comm(hist)}
        ddp_w = {k: v.detach().clone() for k, v in m.module.state_dict().items()}
        m, hist = train(rank, "fsdp", 3)
        res["fsdp"] = {"loss": [h["loss"] for h in hist], "memory": hist[-1]["memory"],
                       "comm": comm(hist)}
        fw = full(m)
        res["fsdp"]["max_weight_diff"] = max(float((fw[k] - ddp_w[k]).abs().max()) for k in ddp_w)
        for name, kw in (("hsdp", {}), ("hsdp1", {"shard_size": 1}),
                         ("fsdp_ckpt_act", {"checkpoint_activations": True})):
            strategy = "fsdp" if name.startswith("fsdp") else "hsdp"
            m, hist = train(rank, strategy, 1, **kw)
            res[name] = {"loss": [h["loss"] for h in hist], "memory": hist[-1]["memory"],
                         "mesh": list(m.gpuspark_info.mesh.shape), "comm": comm(hist)}
        for strategy in ("ddp", "fsdp"):  # gradient accumulation: no_sync / no reduce-scatter
            _, hist = train(rank, strategy, 2, accum=3)
            res[f"{strategy}_accum"] = [h["loss"] for h in hist] + [hist[-1]["steps"]]
        # exact resume: uninterrupted vs stopped at step 9 of 18 (mid-epoch 1) then resumed
        d = out + ".ck"
        m, _ = train(rank, "fsdp", 3, ckdir=d + "/full")
        uninterrupted = full(m)
        train(rank, "fsdp", 3, ckdir=d + "/cut", stop_at=9)
        res["after_cut"] = sorted(os.listdir(d + "/cut"))
        m, hist = train(rank, "fsdp", 3, ckdir=d + "/cut", resume=True)
        resumed = full(m)
        res["resume_equal"] = all(torch.equal(uninterrupted[k], resumed[k]) for k in resumed)
        res["resume_epochs"] = [h["epoch"] for h in hist]
        res["final_dir"] = sorted(os.listdir(d + "/cut"))
        if rank == 0:
            json.dump(res, open(out, "w"))

    def save_then_export(rank, out):
        # train and checkpoint at this world size, then a plain export of the weights
        from gpuspark.train import sharded
        m, _ = train(rank, "fsdp", 1, ckdir=out + ".ck")
        ref = full(m)
        sharded.export_consolidated(out + ".ck", out + ".live.pt", model=m)
        if rank == 0:
            torch.save(ref, out + ".ref.pt")

    def run(rank, out, ckdir, resume):
        # stop_at=-1: print every step for the parent, which may SIGKILL the run
        m, _ = train(rank, "fsdp", 3, ckdir=ckdir, resume=resume == "1", stop_at=-1)
        w = full(m)
        if rank == 0:
            torch.save(w, out)

    def load_then_export(rank, out, src):
        from gpuspark.train import prepare, sharded
        m = prepare(model(), strategy="fsdp")
        sharded.export_consolidated(src, out, model=m)

    def worker(rank, world, port, mode, args):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
        modes = {"main": main, "save": save_then_export, "load": load_then_export, "run": run}
        modes[mode](rank, *args)
        dist.destroy_process_group()

    if __name__ == "__main__":
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        mode, world = sys.argv[1], int(sys.argv[2])
        mp.spawn(worker, args=(world, port, mode, sys.argv[3:]), nprocs=world)
    """
)


def _spawn(tmp: Path, mode: str, world: int, *args: str) -> None:
    script = tmp / "run.py"
    script.write_text(_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), mode, str(world), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("fsdp")
    _spawn(d, "main", 2, str(d / "out.json"))
    return {**json.loads((d / "out.json").read_text()), "dir": d / "out.json.ck"}


def test_fsdp_ranks_hold_half_the_model_state(runs: dict[str, Any]) -> None:
    ddp, fsdp = runs["ddp"]["memory"], runs["fsdp"]["memory"]
    assert ddp["param_bytes"] == 4 * sum(
        (i * o + o) for i, o in ((32, 64), (64, 64), (64, 64), (64, 64), (64, 64), (64, 2))
    )
    for key in ("param_bytes", "grad_bytes", "optimizer_bytes"):
        assert ddp[key] > 0
        assert abs(fsdp[key] - ddp[key] / 2) <= 64, (key, fsdp[key], ddp[key])
    # hsdp on 2 local ranks shards over both (mesh 1 x 2); shard size 1 replicates (2 x 1)
    assert runs["hsdp"]["mesh"] == [1, 2]
    assert runs["hsdp"]["memory"]["param_bytes"] == fsdp["param_bytes"]
    assert runs["hsdp1"]["mesh"] == [2, 1]
    assert runs["hsdp1"]["memory"]["param_bytes"] == ddp["param_bytes"]


def test_fsdp_and_ddp_reach_the_same_loss(runs: dict[str, Any]) -> None:
    ddp, fsdp = runs["ddp"]["loss"], runs["fsdp"]["loss"]
    assert ddp[-1] < ddp[0] * 0.9  # it learns
    for a, b in zip(ddp, fsdp, strict=True):
        assert abs(a - b) < 1e-4, (ddp, fsdp)
    assert runs["fsdp"]["max_weight_diff"] < 1e-4
    ddp_acc, fsdp_acc = runs["ddp_accum"], runs["fsdp_accum"]
    assert ddp_acc[-1] == fsdp_acc[-1] == 2  # 6 micro-batches / 3 per step
    assert all(abs(a - b) < 1e-4 for a, b in zip(ddp_acc, fsdp_acc, strict=True)), runs


def test_sharded_collectives_are_counted_like_ddps(runs: dict[str, Any]) -> None:
    """Bytes per step: DDP all-reduces every gradient once; FSDP all-gathers every parameter in
    forward, the two blocks' again in backward (resharded after forward) and reduce-scatters
    every gradient; HSDP over 1 x 2 is FSDP (a one-rank group moves nothing), over 2 x 1 it is
    DDP's all-reduce of the (unsharded) gradients. Each counts exposed communication time."""
    full = runs["ddp"]["memory"]["param_bytes"]
    blocks = 2 * 4 * 2 * (64 * 64 + 64)
    assert runs["ddp"]["comm"][:2] == [full, full]
    assert runs["fsdp"]["comm"][:2] == [2 * full + blocks] * 2
    assert runs["fsdp_ckpt_act"]["comm"][:2] == runs["fsdp"]["comm"][:2]
    assert runs["hsdp"]["comm"][:2] == runs["fsdp"]["comm"][:2]
    assert runs["hsdp1"]["comm"][:2] == [full, full]
    for name in ("ddp", "fsdp", "hsdp", "hsdp1"):
        assert 0 < runs[name]["comm"][2] < 1, (name, runs[name]["comm"])


def test_hsdp_and_activation_checkpointing_train(runs: dict[str, Any]) -> None:
    first = runs["fsdp"]["loss"][0]
    for name in ("hsdp", "hsdp1", "fsdp_ckpt_act"):
        assert abs(runs[name]["loss"][0] - first) < 1e-4, (name, runs[name]["loss"], first)


def test_sharded_resume_is_bitwise_exact(runs: dict[str, Any]) -> None:
    # stopped at step 9 of 18 with a checkpoint every 2 steps: the newest is step 8, mid-epoch
    assert runs["after_cut"] == ["step-000000006.dcp", "step-000000008.dcp"]
    assert runs["resume_epochs"] == [0, 1, 2]  # epoch 0 from the checkpoint's history
    assert runs["resume_equal"] is True
    assert runs["final_dir"] == ["step-000000016.dcp", "step-000000018.dcp"]


def test_compression_is_refused_for_sharded_strategies() -> None:
    import torch

    from gpuspark.errors import DDPError
    from gpuspark.train import prepare

    for comp in ("powersgd", "fp16"):
        with pytest.raises(DDPError) as exc:
            prepare(torch.nn.Linear(2, 2), strategy="fsdp", compression=comp)
        text = str(exc.value)
        assert "\n" not in text and "reduce_dtype" in text and repr(comp) in text
    with pytest.raises(DDPError, match=r"strategy 'fsdpp' is unknown.*fsdp"):
        prepare(torch.nn.Linear(2, 2), strategy="fsdpp")
    with pytest.raises(DDPError, match="cpu_offload"):
        prepare(torch.nn.Linear(2, 2), cpu_offload=True)


def test_block_policy_picks_layers_else_children() -> None:
    import torch

    from gpuspark.train.fsdp import block_modules

    class EncoderLayer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

    net = torch.nn.Sequential(torch.nn.Linear(2, 2), EncoderLayer(), EncoderLayer())
    assert [type(m).__name__ for m in block_modules(net)] == ["EncoderLayer", "EncoderLayer"]
    plain = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 2))
    assert block_modules(plain) == [plain[0], plain[2]]
    assert block_modules(net, (torch.nn.Linear,)) == [net[0], net[1].lin, net[2].lin]


@pytest.mark.slow
def test_checkpoint_reshards_between_world_4_and_2(tmp_path: Path) -> None:
    import torch

    from gpuspark.train import sharded

    def same(a: Path, b: Path) -> bool:
        wa, wb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
        return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    for saved, loaded in ((4, 2), (2, 4)):
        d = tmp_path / f"w{saved}"
        d.mkdir()
        _spawn(d, "save", saved, str(d / "w"))
        ck = d / "w.ck"
        assert same(d / "w.ref.pt", d / "w.live.pt")
        _spawn(d, "load", loaded, str(d / f"at{loaded}.pt"), str(ck))
        assert same(d / "w.ref.pt", d / f"at{loaded}.pt"), (saved, loaded)
        sharded.export_consolidated(ck, d / "offline.pt")  # no process group
        assert same(d / "w.ref.pt", d / "offline.pt")


def test_sharded_checkpoints_in_the_common_directory_logic(runs: dict[str, Any]) -> None:
    import torch

    from gpuspark.errors import CheckpointError
    from gpuspark.train import checkpoint as ck

    cut = runs["dir"] / "cut"
    info = ck.inspect(cut)
    assert info is not None and info.sharded and info.world_size == 2 and info.step == 18
    assert ck.check_config(cut, {}, world_size=4) == info  # resharding: any world size
    # a torn staging directory and a .dcp without meta.pt (never committed) are not checkpoints
    (cut / ".step-000000099.dcp.tmp").mkdir()
    (cut / "step-000000100.dcp").mkdir()
    assert ck.latest(cut) == cut / "step-000000018.dcp"
    with pytest.raises(CheckpointError, match=r"is sharded \(FSDP/HSDP\), this model is not"):
        ck.load(cut, model=torch.nn.Linear(2, 2))


@pytest.mark.slow
def test_sigkill_then_resume_sharded_is_bitwise_exact(tmp_path: Path) -> None:
    import os
    import random
    import signal
    import time

    import torch

    script = tmp_path / "run.py"
    script.write_text(_SCRIPT)

    def launch(ck: str, out: str, resume: str, kill_at: int | None = None) -> None:
        cmd = [sys.executable, str(script), "run", "2", str(tmp_path / out), str(tmp_path / ck)]
        proc = subprocess.Popen(
            [*cmd, resume], stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            if kill_at is not None and line.startswith("step ") and int(line.split()[1]) >= kill_at:
                os.killpg(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=300)
        assert proc.returncode == (-signal.SIGKILL if kill_at is not None else 0)
        time.sleep(0.3 if kill_at is not None else 0)

    launch("full", "full.pt", "0")
    kill_at = random.Random().randint(2, 14)
    launch("cut", "killed.pt", "0", kill_at=kill_at)
    assert not (tmp_path / "killed.pt").exists()
    launch("cut", "resumed.pt", "1")
    a = torch.load(tmp_path / "full.pt", weights_only=True)
    b = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), kill_at
