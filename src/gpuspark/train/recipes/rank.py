"""The rank side of a recipe: :func:`train` runs on each launched process (the dataset share,
the network, DDP or FSDP, the loop, validation, the best model and the test split).

Nothing here depends on which recipe runs: the :class:`~.registry.Recipe` value supplies
the decoder, the network, the class count and the metrics.
"""

from __future__ import annotations

import io
import json
import os
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from gpuspark import storage
from gpuspark.data import format as fmt
from gpuspark.data.format.table import TableInfo, is_table
from gpuspark.data.load import ShardDataset, World
from gpuspark.launch import restart_count
from gpuspark.train import ddp, fsdp
from gpuspark.train import tracking as tracked
from gpuspark.train.checkpoint_dir import latest, load_payload
from gpuspark.train.loop import FitConfig, fit
from gpuspark.train.recipes.common import augment
from gpuspark.train.recipes.config import DEFAULT_CACHE_DIR, RecipeConfig
from gpuspark.train.recipes.registry import (
    Decoder,
    Recipe,
    check_dataset,
    get_recipe,
    model_config,
)
from gpuspark.train.recipes.run_dirs import earlier_best
from gpuspark.train.recipes.summary import TrainSummary

__all__ = ["build_model", "dataset_lineage", "train"]


def build_model(name: str, cfg: RecipeConfig, num_classes: int) -> Any:
    """The network of recipe ``name``."""
    return get_recipe(name).build_model(cfg, num_classes)


# -- data ------------------------------------------------------------------------------------


def _train_dataset(recipe: Recipe, cfg: RecipeConfig, decode: Decoder) -> Any:
    """This rank's share of the training split: the recipe's dataset, else a ShardDataset."""

    if recipe.dataset is not None:
        return recipe.dataset(cfg, cfg.dataset.train_split, True)
    return ShardDataset(
        cfg.dataset.data,
        decode=decode,
        split=cfg.dataset.train_split,
        seed=cfg.dataset.seed,
        **node_cache(cfg),
    )


def node_cache(cfg: RecipeConfig) -> dict[str, Any]:
    """The node cache's arguments of a :class:`ShardDataset` (``cache_dir``,
    ``cache_limit_bytes``): on for a dataset at a URL unless ``--no-cache``."""
    data = cfg.dataset
    if not data.cache or not storage.is_url(data.data):
        return {}
    where = os.path.expanduser(data.cache_dir or DEFAULT_CACHE_DIR)
    cap = int(data.cache_gb * 1e9) if data.cache_gb else None
    return {"cache_dir": where, "cache_limit_bytes": cap}


def _eval_dataset(recipe: Recipe, cfg: RecipeConfig, decode: Decoder, split: str) -> Any:
    """A split read whole by one process (rank 0): exact metrics, no padding duplicates."""

    if recipe.dataset is not None:
        return recipe.dataset(cfg, split, False)
    return ShardDataset(
        cfg.dataset.data,
        decode=decode,
        split=split,
        shuffle=False,
        drop_last=False,
        world=World(),
        **node_cache(cfg),
    )


def _loss(recipe: Recipe, cfg: RecipeConfig, manifest: Any) -> Any:
    import torch

    if recipe.loss is not None:
        return recipe.loss(cfg, manifest)
    return torch.nn.functional.cross_entropy


def _split_sizes(ds: Any) -> dict[str, int]:
    """Samples per split: records, or rows for a table dataset (whose records are blocks)."""

    manifest = ds.manifest
    if is_table(manifest):
        counts = dict(TableInfo.from_manifest(manifest).shard_rows)
    else:
        counts = {s.path: s.records for s in manifest.shards}
    return {k: sum(counts[p] for p in v) for k, v in manifest.splits.items()}


# -- evaluation ------------------------------------------------------------------------------


def _predict(model: Any, val: Any, batch_size: int, device: Any) -> tuple[np.ndarray, np.ndarray]:
    import torch

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


def _scores(
    recipe: Recipe, cfg: RecipeConfig, model: Any, ds: Any
) -> tuple[dict[str, float | None], int]:
    """The recipe's scores of ``model`` on ``ds`` and the samples scored."""
    import torch

    device = model.gpuspark_info.device
    if recipe.evaluate is None:
        probs, labels = _predict(model, ds, cfg.optim.batch_size, device)
        return recipe.metrics(probs, labels), len(labels)
    net = getattr(model, "module", model)
    net.eval()
    try:
        with torch.no_grad(), ddp.autocast(model):
            return recipe.evaluate(net, ds, cfg, device)
    finally:
        net.train()


def _evaluator(
    recipe: Recipe,
    cfg: RecipeConfig,
    val: Any,
    best: dict[str, Any],
    lineage: dict[str, Any] | None = None,
) -> Any:
    """Rank 0 scores ``val`` after each epoch and exports the best model so far (with
    ``lineage``, see :func:`dataset_lineage`). A sharded model's forward is collective: then
    every rank scores the same split and takes part in gathering the full weights of a new
    best model."""
    import torch.distributed as dist

    def evaluate(model: Any, epoch: int) -> dict[str, Any]:
        sharded = fsdp.is_sharded(model)
        rank0 = dist.get_rank() == 0
        if not rank0 and not sharded:
            return {}
        t0 = time.perf_counter()
        scores, samples = _scores(recipe, cfg, model, val)
        out: dict[str, Any] = {"val_samples": samples}
        out.update({f"val_{k}": v for k, v in scores.items()})
        out["val_s"] = round(time.perf_counter() - t0, 3)
        score = recipe.score(scores)
        better = _agree(score >= best.get("score", -1.0), sharded)
        if better:
            best.update(score=score, epoch=epoch, **out)
            _export_best(model, recipe, cfg, epoch, out, lineage)
        return out if rank0 else {}

    return evaluate


def _agree(flag: bool, sharded: bool) -> bool:
    """Rank 0's ``flag`` on every rank (sharded models; else this rank's own)."""
    if not sharded:
        return flag
    import torch
    import torch.distributed as dist

    t = torch.tensor([1 if flag else 0])
    dist.broadcast(t, 0)
    return bool(t.item())


def _model_state(model: Any) -> dict[str, Any]:
    """The full (unsharded) weights on CPU; collective for a sharded model."""

    if not fsdp.is_sharded(model):
        return dict(getattr(model, "module", model).state_dict())
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return dict(get_model_state_dict(model, options=options))


def _load_model_state(model: Any, state: dict[str, Any]) -> None:
    """Load full (unsharded) weights; a sharded model takes each rank's slice of them (every
    rank holds ``state``: no communication)."""

    if not fsdp.is_sharded(model):
        getattr(model, "module", model).load_state_dict(state)
        return
    from torch.distributed.tensor import DTensor, distribute_tensor

    local: dict[str, Any] = {}
    for key, value in model.state_dict().items():
        full = state[key]
        if isinstance(value, DTensor):
            full = distribute_tensor(
                full.to(value.dtype), value.device_mesh, value.placements, src_data_rank=None
            )
        local[key] = full
    model.load_state_dict(local)


def dataset_lineage(cfg: RecipeConfig, manifest: Any) -> dict[str, Any]:
    """The training dataset as ``best.pt`` records it (key ``dataset``): its root, provenance
    and every ``manifest.extra`` entry but the shard layout (``table``, ``files``): for a
    tabular dataset the columns, statistics, vocabularies and label values, so that batch
    prediction (:mod:`gpuspark.infer`) encodes its inputs as the prep job did from the
    checkpoint alone. JSON-like values only (a ``best.pt`` loads with ``weights_only``)."""
    extra = {k: v for k, v in manifest.extra.items() if k not in ("table", "files")}
    return {
        "path": fmt.dataset_root(cfg.dataset.data),
        "provenance": dict(manifest.provenance),
        "extra": extra,
    }


def _export_best(
    model: Any,
    recipe: Recipe,
    cfg: RecipeConfig,
    epoch: int,
    scores: dict[str, Any],
    lineage: dict[str, Any] | None = None,
) -> None:
    import torch
    import torch.distributed as dist

    if not cfg.out_dir:
        return
    state = _model_state(model)
    if dist.get_rank() != 0:
        return
    payload = {
        "recipe": recipe.name,
        "epoch": epoch,
        "score": recipe.score({k[4:]: v for k, v in scores.items() if k.startswith("val_")})
        if scores
        else None,  # trained without a validation split: the final model
        "scores": scores,
        "config": asdict(cfg),
        "model": state,
    }
    if lineage is not None:
        payload["dataset"] = lineage
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    storage.makedirs(storage.as_path(cfg.out_dir))
    storage.atomic_write_bytes(storage.join(cfg.out_dir, "best.pt"), buffer.getvalue())


def _test(recipe: Recipe, cfg: RecipeConfig, decode: Decoder, model: Any) -> dict[str, Any]:
    """Scores of the best exported model (else the final one) on ``cfg.dataset.test_split``
    (rank 0; every rank for a sharded model)."""

    best = storage.as_path(cfg.out_dir) / "best.pt" if cfg.out_dir else None
    epoch = None
    if best is not None and storage.is_file(best):
        payload = load_payload(best)
        _load_model_state(model, payload["model"])
        epoch = payload["epoch"]
    ds = _eval_dataset(recipe, cfg, decode, str(cfg.dataset.test_split))
    scores, samples = _scores(recipe, cfg, model, ds)
    out: dict[str, Any] = {"split": cfg.dataset.test_split, "samples": samples, "epoch": epoch}
    out.update(scores)
    return out


# -- the per-rank function -------------------------------------------------------------------


def train(name: str, cfg: RecipeConfig, tracking: tracked.Tracking | None = None) -> TrainSummary:
    """Train recipe ``name`` on this rank (one of the launched processes); collective.

    Returns a summary on every rank (rank 0's has the validation scores): the per-epoch
    metrics, the best epoch and its scores, dataset sizes and the model's parameter count.
    With ``tracking`` (checked by :func:`gpuspark.train.tracking.prepare`), rank 0 logs the
    run to MLflow and registers ``best.pt`` (:mod:`gpuspark.train.tracking`); its summary's
    ``tracking`` says where. A resumed run (``--resume``, or a restart) continues the MLflow
    run its checkpoint directory records.
    """
    world = World.detect()  # before the process group: prepare() starts it, in _train
    run = None
    if tracking is not None and world.rank == 0:
        run = tracked.start(
            tracking,
            _run_params(name, cfg, world.world_size),
            folder=cfg.checkpoint.checkpoint_dir,
            resume=cfg.checkpoint.resume or _restarted(cfg),
        )
    try:
        summary = _train(name, cfg, run)
    except BaseException:
        if run is not None:
            run.end("FAILED")
        raise
    if run is not None:
        summary.tracking = _finish_run(run, summary, cfg)
    return summary


def _run_params(name: str, cfg: RecipeConfig, world_size: int) -> dict[str, Any]:
    """The MLflow parameters of a recipe run: the recipe, world size, compression, config."""
    return {
        "recipe": name,
        "world_size": world_size,
        "compression": cfg.parallel.compression or "none",
        "config": asdict(cfg),
    }


def _finish_run(run: tracked.TrackedRun, summary: TrainSummary, cfg: RecipeConfig) -> Any:
    """Rank 0's end of the MLflow run: scores, report, checkpoint, registered ``best.pt``."""
    directory = cfg.checkpoint.checkpoint_dir
    newest = latest(directory) if directory else None
    best = storage.as_path(cfg.out_dir) / "best.pt" if cfg.out_dir else None
    return tracked.finish_recipe_run(run, summary.as_dict(), best=best, checkpoint=newest)


def _train(name: str, cfg: RecipeConfig, run: tracked.TrackedRun | None) -> TrainSummary:
    """:func:`train`'s work; ``run``: rank 0's MLflow run, fed each epoch's metrics."""
    import torch
    import torch.distributed as dist

    recipe = get_recipe(name)
    manifest = fmt.load_manifest(cfg.dataset.data)
    check_dataset(recipe, manifest, fmt.dataset_root(cfg.dataset.data))
    decode = recipe.decoder(cfg, manifest)
    if cfg.parallel.threads:
        torch.set_num_threads(cfg.parallel.threads)
    torch.manual_seed(cfg.dataset.seed)
    train_ds = _train_dataset(recipe, cfg, decode)
    val_ds = (
        _eval_dataset(recipe, cfg, decode, cfg.dataset.val_split) if cfg.dataset.val_split else None
    )
    classes = recipe.num_classes(cfg, train_ds.manifest)
    net = recipe.build_model(cfg, classes)
    model = _prepare(net, cfg)
    torch.manual_seed(cfg.dataset.seed * 1000 + dist.get_rank())  # per-rank augmentation stream
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
    )
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.optim.epochs)
    device_type = str(model.gpuspark_info.device.type)
    scaler = torch.amp.GradScaler(device_type) if cfg.parallel.amp == "fp16" else None
    loader = train_ds.loader(cfg.optim.batch_size, num_workers=cfg.dataset.num_workers)
    best = earlier_best(cfg) if cfg.checkpoint.resume or _restarted(cfg) else {}
    history = fit(
        model,
        opt,
        _loss(recipe, cfg, train_ds.manifest),
        loader,
        dataset=train_ds,
        scheduler=sched,
        scaler=scaler,
        evaluate=_evaluator(recipe, cfg, val_ds, best, dataset_lineage(cfg, manifest))
        if val_ds is not None
        else None,
        transform=augment if cfg.dataset.augment and recipe.augments else None,
        config=FitConfig(
            epochs=cfg.optim.epochs,
            checkpoint_dir=cfg.checkpoint.checkpoint_dir,
            checkpoint_every=cfg.checkpoint.checkpoint_every,
            resume=cfg.checkpoint.resume or _restarted(cfg),
            model_config=model_config(recipe, cfg, classes),
        ),
        tracking=run,
    )
    if val_ds is None:  # no split to choose by: the final model is the one to serve
        _export_best(model, recipe, cfg, cfg.optim.epochs - 1, {}, dataset_lineage(cfg, manifest))
    meter = ddp.comm_meter(model)
    rank0 = dist.get_rank() == 0
    testing = cfg.dataset.test_split and (rank0 or fsdp.is_sharded(model))
    test = _test(recipe, cfg, decode, model) if testing else None
    summary = TrainSummary(
        recipe=recipe.name,
        world_size=dist.get_world_size(),
        backend=str(dist.get_backend()),
        device=str(model.gpuspark_info.device),
        parameters=sum(p.numel() for p in net.parameters()),
        splits=_split_sizes(train_ds),
        history=history,
        best=best,
        comm=meter.totals(),
        comm_after_start=meter.totals(since=cfg.parallel.powersgd_start_iter)
        if cfg.parallel.compression == "powersgd"
        else meter.totals(),
        loader=loader.stats(),
        test=test,
    )
    if rank0 and cfg.out_dir:
        storage.makedirs(storage.as_path(cfg.out_dir))
        text = json.dumps(summary.as_dict(), indent=2, default=str)
        storage.atomic_write_text(storage.join(cfg.out_dir, "history.json"), text)
    return summary


def _restarted(cfg: RecipeConfig) -> bool:
    """Whether this start is a restart (the elastic agent's, or the stage's next attempt)
    with checkpoints to continue from: then training resumes from the newest one."""

    return bool(cfg.checkpoint.checkpoint_dir) and restart_count() > 0


def _prepare(net: Any, cfg: RecipeConfig) -> Any:
    """``net`` wrapped for ``cfg.parallel.strategy``: DDP with its compression hook, or FSDP2/HSDP
    (each block sharded; compression refused, see :func:`gpuspark.train.prepare`)."""

    if cfg.parallel.strategy != "ddp":
        return ddp.prepare(
            net,
            strategy=cfg.parallel.strategy,
            compression=cfg.parallel.compression,
            amp=cfg.parallel.amp,
        )
    return ddp.prepare(
        net,
        compression=cfg.parallel.compression,
        powersgd_rank=cfg.parallel.powersgd_rank,
        powersgd_start_iter=cfg.parallel.powersgd_start_iter,
        amp=cfg.parallel.amp,
    )
