#!/usr/bin/env bash
# gpuspark GPU check: one prepared run (< 8 min on one GPU) of the training toolkit on CUDA.
#
#   1. NCCL process group, world size 1, DDP via gpuspark.train.prepare (+ byte meter)
#   2. bf16 autocast (amp="bf16") forward/backward/optimizer steps
#   3. ShardDataset loader with pinned memory and device="cuda" (copies on a side stream)
#   4. ResNet-50 2D (the resnet2d recipe's network) images/s: fed by gpuspark shards vs synthetic in-GPU tensors
#   5. the rank exporter's /metrics carries the CUDA memory gauges on a GPU (absent on CPU)
#   6. (separate block, bert) one FSDP step of the `base` BERT in bf16 on CUDA, peak memory;
#      writes benchmarks/results/gpu_check_bert.json (without CUDA: one tiny fp32 gloo step)
#
# Prints a short table and writes benchmarks/results/gpu_check.json. Without CUDA the GPU parts
# print "skipped (no CUDA)" and the CPU-safe parts (shard writing, loader, gloo world-size-1
# DDP with a few tiny ResNet-50 steps) still run, so the script itself is checked anywhere.
#
#   bash benchmarks/gpu_check.sh            # PYTHON=... to pick the interpreter
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L || echo "nvidia-smi: not found"

timeout 400 "$PY" - <<'EOF'
import json, os, sys, tempfile, time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, "benchmarks")
from _common import write_results

CUDA = torch.cuda.is_available()
rows, results = [], {"cuda": CUDA, "torch": torch.__version__}
if CUDA:
    results["gpu"] = torch.cuda.get_device_name(0)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def row(part, status, value=""):
    rows.append((part, status, value))
    print(f"  {part:<44} {status:<18} {value}", flush=True)


# -- shards: JPEG images written by gpuspark's plain-Python writer --------------------------
from gpuspark.data.format import EncodedImage
from gpuspark.data.write import ShardWriter

N_IMAGES, SIZE = (1024, 224) if CUDA else (16, 32)
tmp = Path(tempfile.mkdtemp(prefix="gpuspark-gpucheck-"))
t0 = time.perf_counter()
import simplejpeg

rng = np.random.default_rng(0)
with ShardWriter(tmp / "images", target_shard_bytes=8 << 20) as w:
    for i in range(N_IMAGES):
        img = rng.integers(0, 255, (SIZE, SIZE, 3), dtype=np.uint8)
        img[: SIZE // 2] //= 2  # some structure so JPEG is not all noise
        jpeg = simplejpeg.encode_jpeg(img, quality=90)
        w.write({"image": EncodedImage(jpeg, "jpeg"), "label": i % 10})
row("write JPEG shards", "ok", f"{N_IMAGES} x {SIZE}^2 in {time.perf_counter() - t0:.1f} s")

# -- 1. process group + DDP -------------------------------------------------------------------
from gpuspark.train import ddp

backend = ddp.init_distributed("nccl" if CUDA else "gloo")
row("process group (world size 1)", "ok", backend)
from gpuspark.train.recipes.resnet_model import resnet

torch.manual_seed(0)
net = resnet(50, spatial_dims=2, n_input_channels=3, num_classes=10)
model = ddp.prepare(net, amp="bf16" if CUDA else None)
device = model.gpuspark_info.device
row("prepare(ResNet-50 2D)", "ok", f"device {device}, "
    f"{sum(p.numel() for p in net.parameters()) / 1e6:.1f} M params")
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
meter = ddp.comm_meter(model)


def step(x, y):
    meter.begin_step()
    with ddp.autocast(model):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    meter.end_step()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


# -- 3. loader: pinned memory + CUDA device ---------------------------------------------------
from gpuspark.data.load import ShardDataset

BATCH = 128 if CUDA else 2
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def to_input(batch):
    x = batch["image"]  # uint8 NHWC, already on the loader's device
    x = x.permute(0, 3, 1, 2).float()
    return (x - MEAN.to(x.device)) / STD.to(x.device), batch["label"].to(x.device).long()


ds = ShardDataset(tmp / "images", decode="auto", shuffle=True)
workers = min(8, (os.cpu_count() or 2) - 1) if CUDA else 0
loader = ds.loader(BATCH, num_workers=workers, pin_memory=True, device=device)
first = next(iter(loader))
if CUDA:
    row("loader pinned + device=cuda", "ok" if first["image"].is_cuda else "FAILED",
        f"batch on {first['image'].device}, {workers} workers")
else:
    row("loader pinned + device=cuda", "skipped (no CUDA)", f"CPU batch {tuple(first['image'].shape)}")

# -- 2 + 4. bf16 steps: shards vs synthetic in-GPU tensors ------------------------------------
STEPS, WARM = (30, 5) if CUDA else (1, 1)


def run_synthetic():
    x = torch.randn(BATCH, 3, SIZE, SIZE, device=device)
    y = torch.randint(0, 10, (BATCH,), device=device)
    for _ in range(WARM):
        step(x, y)
    if CUDA:
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(STEPS):
        loss = step(x, y)
    if CUDA:
        torch.cuda.synchronize()
    return BATCH * STEPS / (time.perf_counter() - t), float(loss)


def run_shards():
    done, t, n = 0, None, 0
    while done < WARM + STEPS:
        for batch in loader:
            if done == WARM:
                if CUDA:
                    torch.cuda.synchronize()
                t = time.perf_counter()
            x, y = to_input(batch)
            loss = step(x, y)
            if done >= WARM:
                n += x.shape[0]
            done += 1
            if done >= WARM + STEPS:
                break
    if CUDA:
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t), float(loss)


syn, syn_loss = run_synthetic()
shd, shd_loss = run_shards()
tag = "bf16 AMP, NCCL" if CUDA else "fp32, gloo, CPU (plumbing only)"
ok = np.isfinite(syn_loss) and np.isfinite(shd_loss)
row("bf16 AMP steps", ("ok" if ok else "FAILED") if CUDA else "skipped (no CUDA)",
    f"loss {syn_loss:.3f} / {shd_loss:.3f}")
row("ResNet-50 images/s, synthetic in-GPU", "ok" if CUDA else "CPU only", f"{syn:.1f}  ({tag})")
row("ResNet-50 images/s, gpuspark shards", "ok" if CUDA else "CPU only",
    f"{shd:.1f}  ({shd / syn:.2f} of synthetic)")
row("bytes all-reduced per step", "ok", f"{meter.steps[-1].bytes_sent:,}")
stats = loader.stats()
row("loader wait", "ok", f"{stats['wait_s']:.2f} s over {stats['batches']} batches")
results.update(
    backend=backend, batch=BATCH, image_size=SIZE, steps=STEPS, workers=workers,
    images_per_s_synthetic=syn, images_per_s_shards=shd, shards_over_synthetic=shd / syn,
    loader=stats, rows=[list(r) for r in rows],
)

# -- 5. exporter: a rank's /metrics with the CUDA memory gauges --------------------------------
import urllib.request

from gpuspark.monitor import names as mnames
from gpuspark.monitor.exporter import serve

rm = serve(19700, "127.0.0.1", run_id="gpu-check")
rm.step(BATCH, 0.01, {"compute": 0.01}, 0, 0, syn_loss, 0.1, 0)
rm.cuda_memory(device)
with urllib.request.urlopen(rm.url, timeout=5) as resp:
    scraped = resp.read().decode()
have_cuda = mnames.CUDA_ALLOCATED in scraped and mnames.CUDA_RESERVED in scraped
if CUDA:
    row("exporter CUDA memory gauges", "ok" if have_cuda else "FAILED", rm.url)
else:
    row("exporter CUDA memory gauges", "ok" if not have_cuda else "FAILED", "absent on CPU")
results["exporter_cuda_gauges"] = have_cuda
rm.close()
path = write_results("gpu_check", results)
print(f"results: {path}")
import torch.distributed as dist

dist.destroy_process_group()
EOF

# ------------------------------------------------------------------------------------------
# 6. bert: one FSDP step of the `base` BERT (12 layers, hidden 768, vocabulary 30522, 512
#    tokens x 8 sequences) in bf16 on CUDA, with the peak memory. Without CUDA: the `tiny`
#    BERT, one fp32 step on gloo (plumbing only), so the block is checked anywhere.
# ------------------------------------------------------------------------------------------
exec timeout 60 "$PY" - <<'EOF'
import sys, time

import numpy as np
import torch

sys.path.insert(0, "benchmarks")
from _common import write_results

from gpuspark.train import ddp, fsdp
from gpuspark.train.recipes import TextSpec, mask_tokens, mlm_loss
from gpuspark.train.recipes.bert import sequence_rng
from gpuspark.train.recipes.bert_model import BERT_SIZES, BertMLM

CUDA = torch.cuda.is_available()
size, vocab, seq, batch = ("base", 30522, 512, 8) if CUDA else ("tiny", 1000, 64, 2)
backend = ddp.init_distributed("nccl" if CUDA else "gloo")
spec = TextSpec(vocab, seq, {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4})
rng = np.random.default_rng(0)
pairs = [mask_tokens(np.r_[2, rng.integers(5, vocab, seq - 2), 3], sequence_rng(0, 0, "g", i), spec)
         for i in range(batch)]
x, y = (torch.from_numpy(np.stack(a)) for a in zip(*pairs))
torch.manual_seed(0)
net = BertMLM(vocab, seq, BERT_SIZES[size], dropout=0.0)
params = sum(p.numel() for p in net.parameters())
model = ddp.prepare(net, strategy="fsdp", amp="bf16" if CUDA else None)
device = model.gpuspark_info.device
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
if CUDA:
    torch.cuda.reset_peak_memory_stats(device)
t0 = time.perf_counter()
with ddp.autocast(model):
    loss = mlm_loss(model(x.to(device)), y.to(device))
loss.backward()
opt.step()
if CUDA:
    torch.cuda.synchronize()
seconds = time.perf_counter() - t0
mem = fsdp.memory_accounting(model, opt)
opt.zero_grad(set_to_none=True)
loss = float(loss.detach())
ok = bool(np.isfinite(loss))
status = ("ok" if ok else "FAILED") if CUDA else "skipped (no CUDA)"
peak = mem.get("cuda_peak_bytes")
value = (f"{size}, {params / 1e6:.1f} M params, loss {loss:.3f}, {seconds:.2f} s, "
         + (f"peak {peak / 2**30:.2f} GiB" if peak else f"tiny fp32 on {backend}"))
print(f"  {'bert FSDP step (bf16)':<44} {status:<18} {value}", flush=True)
write_results("gpu_check_bert", {"cuda": CUDA, "size": size, "vocab": vocab, "seq_len": seq,
                                 "batch": batch, "parameters": params, "loss": loss,
                                 "step_s": seconds, "memory": mem, "ok": ok})
import torch.distributed as dist

dist.destroy_process_group()
EOF
