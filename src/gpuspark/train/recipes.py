"""Ready training recipes on gpuspark shards (MONAI networks).

- ``resnet3d``: MONAI ResNet 10/18/34/50 with ``spatial_dims=3`` and one input channel on CT
  volume shards from ``gpuspark prep dicom``; random flips and small intensity shifts;
  validation accuracy and ROC AUC after each epoch; the best model exported to ``best.pt``.
- ``resnet2d``: MONAI ResNet-50 with ``spatial_dims=2`` on image-folder shards from
  ``gpuspark prep images``; validation top-1.

:func:`train` is the per-rank function (call it inside :func:`gpuspark.train.launch.run`);
:func:`run` launches it on N processes (Spark by default) and returns rank 0's summary.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpuspark.errors import RecipeError, did_you_mean

__all__ = [
    "RECIPES",
    "RecipeConfig",
    "RecipeError",
    "build_model",
    "check_recipe",
    "parse_window",
    "roc_auc",
    "run",
    "train",
]

RECIPES = ("resnet3d", "resnet2d")
_DEPTHS = (10, 18, 34, 50)


@dataclass
class RecipeConfig:
    """Options of a recipe run; all ranks get the same copy."""

    data: str
    """Dataset directory (or URL) written by ``gpuspark prep``."""
    epochs: int = 10
    batch_size: int = 8
    """Per-rank batch size."""
    lr: float = 1e-3
    weight_decay: float = 1e-4
    compression: str | None = None
    powersgd_rank: int = 2
    powersgd_start_iter: int = 10
    amp: str | None = None
    depth: int = 18
    """ResNet depth for ``resnet3d`` (10, 18, 34, 50); ``resnet2d`` is ResNet-50."""
    width: float = 1.0
    """MONAI ``widen_factor``: channel width multiplier (0.25 = 16/32/64/128 channels)."""
    augment: bool = True
    seed: int = 0
    num_workers: int = 0
    threads: int | None = None
    """torch intra-op threads per rank (``None``: torch's default)."""
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = False
    out: str | None = None
    """Where ``best.pt`` and ``history.json`` go (default: ``checkpoint_dir``)."""
    train_split: str = "train"
    val_split: str = "val"
    test_split: str | None = None
    """Evaluate the best model on this split at the end (rank 0); ``None``: skip."""
    num_classes: int | None = None
    window: tuple[float, float] | None = None
    pool: str = "avg"
    stem_stride: int = 1
    """``resnet3d`` stride of the first 7^3 convolution (MONAI ``conv1_t_stride``); 2 cuts
    the compute of the stem, the most expensive layer at full resolution, about 8x."""
    """``resnet3d`` global pooling: ``"avg"`` (MONAI's) or ``"max"`` (small focal findings)."""
    """``resnet3d``: re-window uint8 CT volumes to (level, width) HU (``None``: as stored)."""
    """Classes of ``resnet2d`` (default: from the manifest's label map)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.depth not in _DEPTHS:
            raise RecipeError(f"depth must be one of {_DEPTHS}, got: {self.depth}")
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise RecipeError(f"{name} must be >= 1, got: {getattr(self, name)}")
        if self.pool not in ("avg", "max"):
            raise RecipeError(f"pool must be 'avg' or 'max', got: {self.pool!r}")
        if self.lr <= 0:
            raise RecipeError(f"lr must be > 0, got: {self.lr}")


def check_recipe(name: str) -> str:
    """Return ``name`` if it is a recipe, else raise with the choices."""
    if name not in RECIPES:
        raise RecipeError(
            f"recipe {name!r} is unknown{did_you_mean(name, RECIPES)}",
            remedy="use one of: " + ", ".join(RECIPES),
        )
    return name


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``"100,100"`` -> ``(100.0, 100.0)`` (level, width in HU); ``None`` stays ``None``."""
    if text is None:
        return None
    try:
        level, width = (float(v) for v in text.split(","))
    except ValueError as exc:
        raise RecipeError(
            f"window must be LEVEL,WIDTH in HU (e.g. 100,100), got: {text!r}"
        ) from exc
    if width <= 0:
        raise RecipeError(f"window width must be > 0, got: {text!r}")
    return level, width


# -- data ------------------------------------------------------------------------------------


def decode_volume(sample: dict[str, Any]) -> tuple[np.ndarray, int]:
    """CT shard sample -> ``(float32 [1, z, y, x] in [0, 1], label)``."""
    vol = np.asarray(sample["volume"])
    scale = 255.0 if vol.dtype == np.uint8 else 1.0
    return (vol.astype(np.float32) / scale)[None], int(sample["label"])


@dataclass(frozen=True)
class VolumeDecode:
    """CT shard sample -> ``(float32 [1, z, y, x], label)`` re-windowed to ``(level, width)``.

    uint8 volumes hold a window ``stored`` = (level, width) in HU (from the manifest); they are
    mapped back to HU and windowed again, e.g. (100, 100) to make +60 HU lesions over soft
    tissue stand out. Without ``window`` this is :func:`decode_volume`.
    """

    stored: tuple[float, float] | None = None
    window: tuple[float, float] | None = None
    pool: str = "avg"
    stem_stride: int = 1
    """``resnet3d`` stride of the first 7^3 convolution (MONAI ``conv1_t_stride``); 2 cuts
    the compute of the stem, the most expensive layer at full resolution, about 8x."""
    """``resnet3d`` global pooling: ``"avg"`` (MONAI's) or ``"max"`` (small focal findings)."""

    def __call__(self, sample: dict[str, Any]) -> tuple[np.ndarray, int]:
        x, y = decode_volume(sample)
        if self.window is None or self.stored is None:
            return x, y
        (sl, sw), (level, width) = self.stored, self.window
        hu = x * sw + (sl - sw / 2)
        return np.clip((hu - (level - width / 2)) / width, 0.0, 1.0).astype(np.float32), y


def decode_image(sample: dict[str, Any]) -> tuple[np.ndarray, int]:
    """Image shard sample -> ``(float32 [C, H, W] in [0, 1], label)`` (JPEG/PNG decoded)."""
    from gpuspark.data.load import ImageDecode

    img = np.asarray(ImageDecode()(sample)["image"])
    if img.ndim == 2:
        img = img[:, :, None]
    chw = np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32) / 255.0
    return chw, int(sample["label"])


def _decoder(name: str, cfg: RecipeConfig) -> Any:
    if name != "resnet3d":
        return decode_image
    if cfg.window is None:
        return decode_volume
    from gpuspark.data import format as fmt

    manifest = fmt.load_manifest(fmt.dataset_root(cfg.data))
    w = (manifest.extra.get("prep") or {}).get("window") or {}
    if manifest.extra.get("prep", {}).get("dtype") != "uint8" or "level" not in w:
        raise RecipeError(
            f"window={cfg.window} needs uint8 volumes with a recorded window; {cfg.data} has "
            f"dtype {manifest.extra.get('prep', {}).get('dtype')!r}, window {w or None}",
            remedy="prep with the default --dtype uint8, or drop the window option",
        )
    stored = (float(w["level"]), float(w["width"]))
    return VolumeDecode(stored=stored, window=(float(cfg.window[0]), float(cfg.window[1])))


def _eval_dataset(name: str, cfg: RecipeConfig, split: str) -> Any:
    """A split read whole by one process (rank 0): exact metrics, no padding duplicates."""
    from gpuspark.data.load import ShardDataset, World

    return ShardDataset(
        cfg.data,
        decode=_decoder(name, cfg),
        split=split,
        shuffle=False,
        drop_last=False,
        world=World(),
    )


def _datasets(name: str, cfg: RecipeConfig) -> tuple[Any, Any]:
    from gpuspark.data.load import ShardDataset

    train = ShardDataset(cfg.data, decode=_decoder(name, cfg), split=cfg.train_split, seed=cfg.seed)
    return train, _eval_dataset(name, cfg, cfg.val_split)


def _split_sizes(ds: Any) -> dict[str, int]:
    counts = {s.path: s.records for s in ds.manifest.shards}
    return {k: sum(counts[p] for p in v) for k, v in ds.manifest.splits.items()}


# -- model -----------------------------------------------------------------------------------


def build_model(name: str, cfg: RecipeConfig, num_classes: int) -> Any:
    """The MONAI network of recipe ``name``."""
    from monai.networks import nets

    if name == "resnet3d":
        import torch

        factory = getattr(nets, f"resnet{cfg.depth}")
        net = factory(
            spatial_dims=3,
            n_input_channels=1,
            num_classes=num_classes,
            widen_factor=cfg.width,
            conv1_t_stride=cfg.stem_stride,
        )
        if cfg.pool == "max":
            # A small focal finding (a lesion of a few dozen voxels) is diluted by global
            # average pooling; global max pooling keeps the strongest local response.
            net.avgpool = torch.nn.AdaptiveMaxPool3d(1)
        return net
    return nets.resnet50(
        spatial_dims=2, n_input_channels=3, num_classes=num_classes, widen_factor=cfg.width
    )


def _num_classes(name: str, cfg: RecipeConfig, ds: Any) -> int:
    if name == "resnet3d":
        return 2
    if cfg.num_classes:
        return cfg.num_classes
    label_map = ds.manifest.extra.get("label_map") or {}
    if not label_map:
        raise RecipeError(
            f"{cfg.data} has no label map to count classes from", remedy="pass num_classes"
        )
    return len(label_map)


def augment(x: Any, y: Any) -> tuple[Any, Any]:
    """Random flip of each spatial axis per sample and a small intensity shift (+-0.05)."""
    import torch

    spatial = list(range(2, x.dim()))
    for axis in spatial:
        flip = torch.rand(x.shape[0], device=x.device) < 0.5
        if bool(flip.any()):
            x = torch.where(flip.view(-1, *[1] * (x.dim() - 1)), x.flip(axis), x)
    shift = (torch.rand(x.shape[0], *[1] * (x.dim() - 1), device=x.device) - 0.5) * 0.1
    return x + shift, y


# -- metrics ---------------------------------------------------------------------------------


def roc_auc(scores: Any, labels: Any) -> float | None:
    """ROC AUC (Mann-Whitney U, ties count half); ``None`` if only one class is present."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(bool)
    pos, neg = s[y], s[~y]
    if len(pos) == 0 or len(neg) == 0:
        return None
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def _predict(model: Any, val: Any, batch_size: int, device: Any) -> tuple[np.ndarray, np.ndarray]:
    import torch

    from gpuspark.train import ddp

    net = getattr(model, "module", model)
    net.eval()
    probs, labels = [], []
    with torch.no_grad(), ddp.autocast(model):
        for x, y in val.loader(batch_size, pin_memory=False):
            out = net(x.to(device)).float().softmax(1)
            probs.append(out.cpu().numpy())
            labels.append(y.numpy())
    net.train()
    return np.concatenate(probs), np.concatenate(labels)


def _evaluator(name: str, cfg: RecipeConfig, val: Any, best: dict[str, Any]) -> Any:
    import torch.distributed as dist

    def evaluate(model: Any, epoch: int) -> dict[str, Any]:
        if dist.get_rank() != 0:
            return {}
        t0 = time.perf_counter()
        probs, labels = _predict(model, val, cfg.batch_size, model.gpuspark_info.device)
        out: dict[str, Any] = {"val_samples": len(labels)}
        acc = float((probs.argmax(1) == labels).mean()) if len(labels) else 0.0
        if name == "resnet3d":
            out["val_acc"] = acc
            out["val_auc"] = roc_auc(probs[:, 1], labels)
            score = out["val_auc"] if out["val_auc"] is not None else acc
        else:
            out["val_top1"] = acc
            score = acc
        out["val_s"] = round(time.perf_counter() - t0, 3)
        if score >= best.get("score", -1.0):
            best.update(score=score, epoch=epoch, **out)
            _export_best(model, cfg, name, epoch, out)
        return out

    return evaluate


def _export_best(model: Any, cfg: RecipeConfig, name: str, epoch: int, scores: dict) -> None:
    import torch

    out_dir = cfg.out or cfg.checkpoint_dir
    if not out_dir:
        return
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    final = Path(out_dir) / "best.pt"
    tmp = final.with_name(f".best.pt.tmp-{os.getpid()}")
    payload = {
        "recipe": name,
        "epoch": epoch,
        "scores": scores,
        "config": asdict(cfg),
        "model": getattr(model, "module", model).state_dict(),
    }
    torch.save(payload, tmp)
    os.replace(tmp, final)


# -- the per-rank function -------------------------------------------------------------------


def train(name: str, cfg: RecipeConfig) -> dict[str, Any]:
    """Train recipe ``name`` on this rank (one of the launched processes); collective.

    Returns a summary on every rank (rank 0's has the validation scores): the per-epoch
    metrics, the best epoch and its scores, dataset sizes and the model's parameter count.
    """
    import torch

    from gpuspark.train import ddp
    from gpuspark.train.loop import FitConfig, fit

    check_recipe(name)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    train_ds, val_ds = _datasets(name, cfg)
    net = build_model(name, cfg, _num_classes(name, cfg, train_ds))
    model = ddp.prepare(
        net,
        compression=cfg.compression,
        powersgd_rank=cfg.powersgd_rank,
        powersgd_start_iter=cfg.powersgd_start_iter,
        amp=cfg.amp,
    )
    import torch.distributed as dist

    torch.manual_seed(cfg.seed * 1000 + dist.get_rank())  # per-rank augmentation stream
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.epochs)
    device_type = str(model.gpuspark_info.device.type)
    scaler = torch.amp.GradScaler(device_type) if cfg.amp == "fp16" else None
    loader = train_ds.loader(cfg.batch_size, num_workers=cfg.num_workers)
    best: dict[str, Any] = {}
    history = fit(
        model,
        opt,
        torch.nn.functional.cross_entropy,
        loader,
        dataset=train_ds,
        scheduler=sched,
        scaler=scaler,
        evaluate=_evaluator(name, cfg, val_ds, best),
        transform=augment if cfg.augment else None,
        config=FitConfig(
            epochs=cfg.epochs,
            checkpoint_dir=cfg.checkpoint_dir,
            checkpoint_every=cfg.checkpoint_every,
            resume=cfg.resume,
        ),
    )
    meter = ddp.comm_meter(model)
    test = _test(name, cfg, model) if cfg.test_split and dist.get_rank() == 0 else None
    summary = {
        "recipe": name,
        "world_size": dist.get_world_size(),
        "backend": str(dist.get_backend()),
        "device": str(model.gpuspark_info.device),
        "parameters": sum(p.numel() for p in net.parameters()),
        "splits": _split_sizes(train_ds),
        "history": history,
        "best": best,
        "comm": meter.totals(),
        "comm_after_start": meter.totals(since=cfg.powersgd_start_iter)
        if cfg.compression == "powersgd"
        else meter.totals(),
        "loader": loader.stats(),
        "test": test,
    }
    out_dir = cfg.out or cfg.checkpoint_dir
    if dist.get_rank() == 0 and out_dir:
        _write_json(Path(out_dir) / "history.json", summary)
    return summary


def _test(name: str, cfg: RecipeConfig, model: Any) -> dict[str, Any]:
    """Scores of the best exported model (else the final one) on ``cfg.test_split``."""
    import torch

    out_dir = cfg.out or cfg.checkpoint_dir
    best = Path(out_dir) / "best.pt" if out_dir else None
    net = getattr(model, "module", model)
    epoch = None
    if best is not None and best.exists():
        payload = torch.load(best, map_location="cpu", weights_only=False)
        net.load_state_dict(payload["model"])
        epoch = payload["epoch"]
    ds = _eval_dataset(name, cfg, str(cfg.test_split))
    probs, labels = _predict(model, ds, cfg.batch_size, model.gpuspark_info.device)
    acc = float((probs.argmax(1) == labels).mean()) if len(labels) else 0.0
    out: dict[str, Any] = {"split": cfg.test_split, "samples": len(labels), "epoch": epoch}
    if name == "resnet3d":
        out.update(acc=acc, auc=roc_auc(probs[:, 1], labels))
    else:
        out["top1"] = acc
    return out


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)


# -- launching -------------------------------------------------------------------------------


def run(
    name: str,
    cfg: RecipeConfig,
    *,
    num_processes: int = 2,
    gpus_per_process: float = 1,
    spark: Any = None,
    master: str | None = None,
    spec: Any = None,
    local: bool = False,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Launch :func:`train` on ``num_processes`` ranks and return rank 0's summary.

    Ranks run in a Spark barrier stage on ``spark``, else on ``master`` or the spec's master
    (the embedded cluster by default, started for the job when none runs; see
    :func:`gpuspark.cluster.session.job_session`); with ``local=True`` they are plain
    processes of this machine.
    """
    from gpuspark import launch

    check_recipe(name)
    kwargs: dict[str, Any] = {
        "num_processes": num_processes,
        "gpus_per_process": gpus_per_process,
        "timeout": timeout,
        "env": env,
    }
    if local:
        return launch.run(train, name, cfg, local=True, **kwargs)
    from gpuspark.cluster.session import JobKind, job_session

    with job_session(JobKind.TRAINING, spark=spark, master=master, spec=spec) as sp:
        return launch.run(train, name, cfg, spark=sp, **kwargs)
