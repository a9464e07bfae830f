"""The training loop: step-time breakdown, ``no_sync`` accumulation, checkpoints, exact resume.

:func:`fit` runs on every rank of a model returned by :func:`gpuspark.train.prepare`. Each
optimizer step is split into

- **data wait**: time blocked in ``next()`` on the loader;
- **compute**: forward + backward, minus the communication that backward waited for;
- **exposed communication**: all-reduce time not hidden behind backward (from the hook meter);
- **optimizer**: ``optimizer.step()`` + ``zero_grad``.

Each rank also serves Prometheus metrics (:func:`gpuspark.monitor.exporter.serve`, on by
default; ``FitConfig.metrics_port=0`` turns it off): samples, steps, step duration, the phase
breakdown above, gradient bytes, loss, learning rate, epoch, last-step time, loader counters.

Resume is exact: model, optimizer, scheduler, scaler, per-rank RNG and PowerSGD state come from
the checkpoint, and the loader is put back at the same batch (its ``load_state_dict`` when it
has one, else by replaying the epoch's order and skipping the batches already used).
A sharded model (``strategy="fsdp"``/``"hsdp"``) checkpoints through
:mod:`gpuspark.train.sharded` instead; each epoch's metrics carry ``memory``, this rank's
parameter, gradient and optimizer-state bytes (:func:`gpuspark.train.fsdp.memory_accounting`).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuspark._util import envvars
from gpuspark.launch import restart_count
from gpuspark.train import checkpoint as ckpt
from gpuspark.train import ddp, fsdp
from gpuspark.train import metrics as mx
from gpuspark.train.checkpointer import checkpointer_for
from gpuspark.train.metrics import StepHook
from gpuspark.train.prometheus import prometheus_hooks
from gpuspark.train.tracking import TrackedRun, Tracking, fit_run, log_epoch_safely

__all__ = ["FitConfig", "fit", "to_device"]

log = logging.getLogger(__name__)

_SAMPLE_EVERY = 20
"""Optimizer steps between two reads of the loader's totals and CUDA memory (and at epoch end)."""


@dataclass
class FitConfig:
    """Loop options; every field has a safe default."""

    epochs: int = 1
    """Number of passes over the training data."""
    accum_steps: int = 1
    """Micro-batches per optimizer step; all but the last run under ``no_sync()``."""
    checkpoint_dir: str | None = None
    """Where rank 0 writes checkpoints; ``None`` disables them."""
    checkpoint_every: int = 0
    """Also checkpoint every N optimizer steps (0: only at the end of each epoch)."""
    keep: int = 3
    """Checkpoints kept on disk."""
    resume: bool = False
    """Continue from the newest checkpoint in ``checkpoint_dir`` when there is one."""
    scheduler_interval: str = "epoch"
    """Step the LR scheduler per ``"epoch"`` or per ``"step"``."""
    log: Callable[[str], None] | None = print
    """Where rank 0 prints one line per epoch (``None``: silent)."""
    model_config: dict[str, Any] | None = None
    """The options that shape the model (JSON-like); recorded in each checkpoint, and a
    resume from a checkpoint recorded with other values is refused naming the fields."""
    extra: dict[str, Any] = field(default_factory=dict)
    metrics_port: int | None = None
    """Base port of this rank's Prometheus ``/metrics`` (rank's port = base + local rank);
    ``None``: the launcher's ``GPUSPARK_METRICS_PORT``, the spec's ``[monitoring]
    metrics_port``, else 9700; ``0``: no metrics."""
    metrics_host: str | None = None
    """Address ``/metrics`` binds to (``None``: environment, spec, else 127.0.0.1)."""
    team: str | None = None
    """``team`` label of the metrics (``None``: ``GPUSPARK_TEAM``, else none)."""
    run_id: str | None = None
    """``run_id`` label (``None``: the launcher's ``GPUSPARK_RUN_ID``, else one per process)."""
    hooks: list[StepHook] | None = None
    """What sees every optimizer step (:class:`~gpuspark.train.metrics.StepHook`); ``None``:
    this rank's Prometheus exporter (``metrics_port``/``metrics_host``), ``[]``: nothing."""


def to_device(batch: Any, device: Any) -> tuple[Any, Any]:
    """Split a batch into ``(inputs, targets)`` on ``device``.

    Accepts ``(x, y)`` tuples/lists and dicts with ``image``/``label`` (or ``x``/``y``) keys.
    """
    x: Any
    y: Any
    if isinstance(batch, dict):
        x = batch["image"] if "image" in batch else batch["x"]
        y = batch["label"] if "label" in batch else batch["y"]
    else:
        x, y = batch[0], batch[1]
    nb = getattr(device, "type", "cpu") == "cuda"
    return x.to(device, non_blocking=nb), y.to(device, non_blocking=nb)


def _rank() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _restarts() -> int:

    return int(restart_count())


def _loader_state(dataset: Any) -> Any:
    fn = getattr(dataset, "state_dict", None)
    return fn() if callable(fn) else None


@dataclass
class _Acc:
    """Sums for one epoch on this rank."""

    steps: int = 0
    samples: int = 0
    loss_sum: float = 0.0
    loss_n: int = 0
    data: float = 0.0
    compute: float = 0.0
    comm: float = 0.0
    opt: float = 0.0
    comm_first: int = 0
    seconds: float = 0.0


class _Sync:
    """Device synchronisation so wall-clock parts are meaningful on CUDA."""

    def __init__(self, device: Any) -> None:
        import torch

        self.cuda = getattr(device, "type", "cpu") == "cuda"
        self._torch = torch

    def __call__(self) -> float:
        if self.cuda:
            self._torch.cuda.synchronize()
        return time.perf_counter()


def fit(
    model: Any,
    optimizer: Any,
    loss_fn: Callable[[Any, Any], Any],
    loader: Iterable[Any],
    *,
    config: FitConfig | None = None,
    dataset: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    evaluate: Callable[[Any, int], dict[str, Any]] | None = None,
    transform: Callable[[Any, Any], tuple[Any, Any]] | None = None,
    on_step: Callable[[int], None] | None = None,
    tracking: Tracking | TrackedRun | str | None = None,
) -> list[dict[str, Any]]:
    """Train ``model`` (from :func:`~gpuspark.train.prepare`) and return per-epoch metrics.

    ``loader`` is re-iterated every epoch; ``dataset`` (default: ``loader``) gets
    ``set_epoch(epoch)`` and is asked for ``state_dict()`` when checkpointing. ``transform(x,
    y)`` runs on each batch after it is on the device (augmentations). ``evaluate(model,
    epoch)`` runs on every rank after each epoch; its dict is merged into that epoch's metrics.
    ``on_step(global_step)`` is called after every optimizer step. Rank 0 logs each epoch's
    metrics to the MLflow run of ``tracking`` (see :func:`gpuspark.train.tracking.fit_run`).
    Collective: all ranks call it.
    """

    cfg = config or FitConfig()
    dataset = loader if dataset is None else dataset
    meter = ddp.comm_meter(model)
    device = model.gpuspark_info.device
    history: list[dict[str, Any]] = []
    start_epoch, skip_steps, global_step, loader_state = 0, 0, 0, None
    run_id: str | None = _new_run_id(cfg)
    if cfg.resume and cfg.checkpoint_dir and ckpt.latest(cfg.checkpoint_dir) is not None:
        if model.gpuspark_info.meter.compression == "powersgd":
            _prime_buckets(model, optimizer, loss_fn, loader, transform)
        store = checkpointer_for(model)
        res = store.load(
            cfg.checkpoint_dir,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            scaler=scaler,
            config=cfg.model_config,
        )
        if res is not None:
            start_epoch, skip_steps, global_step = res.epoch, res.step_in_epoch, res.step
            loader_state = res.loader_state
            history = list(res.extra.get("history", []))
            run_id = res.run_id  # a resumed run keeps its id: its own pruning goes on
            _log_resume(cfg, res)
    state = _State(model, optimizer, loss_fn, cfg, dataset, scheduler, scaler, meter, device)
    state.hooks = _hooks(cfg, model)
    state.loader_stats = getattr(loader, "stats", None)
    state.global_step = global_step
    state.history = history
    state.run_id = run_id
    state.on_step = on_step
    state.transform = transform
    info = {"world_size": _rank()[1], "compression": model.gpuspark_info.meter.compression}
    with fit_run(tracking, rank=_rank()[0], config=cfg, params=info) as run:
        for epoch in range(start_epoch, cfg.epochs):
            acc = state.run_epoch(loader, epoch, skip_steps, loader_state)
            skip_steps, loader_state = 0, None
            if scheduler is not None and cfg.scheduler_interval == "epoch":
                scheduler.step()
            extra = evaluate(model, epoch) if evaluate is not None else {}
            m = state.epoch_metrics(epoch, acc, extra)
            history.append(m)
            if _rank()[0] == 0:
                if cfg.log is not None:
                    cfg.log(mx.format_epoch(m))
                mx.emit(m)
                log_epoch_safely(run, m)
            state.checkpoint(epoch + 1, 0)
    return history


def _new_run_id(cfg: FitConfig) -> str:
    """The id a new run records in its checkpoints: ``cfg.run_id``, the launcher's
    ``GPUSPARK_RUN_ID``, else a new one (two fits of one process are two runs)."""
    return cfg.run_id or envvars.RUN_ID.get() or uuid.uuid4().hex[:12]


def _log_resume(cfg: FitConfig, res: Any) -> None:
    """Rank 0 says where training resumed: ``resumed from DIR at epoch E, step S ...``
    (epochs counted from 0, as in the epoch lines; step: optimizer steps done in E)."""
    if _rank()[0] != 0 or cfg.log is None:
        return
    restarts = _restarts()
    world = _rank()[1]
    moved = res.world_size is not None and res.world_size != world
    cfg.log(
        f"resumed from {cfg.checkpoint_dir} at epoch {res.epoch}, step {res.step_in_epoch} "
        f"(global step {res.step})"
        + (f", restart {restarts}" if restarts else "")
        + (f", world size {res.world_size} -> {world}" if moved else "")
    )


def _hooks(cfg: FitConfig, model: Any) -> list[StepHook]:
    """``cfg.hooks``, else this rank's Prometheus exporter as the one hook."""
    if cfg.hooks is not None:
        return list(cfg.hooks)
    rank, world = _rank()
    device = str(model.gpuspark_info.device.type)
    return list(prometheus_hooks(cfg, rank=rank, world=world, backend=_backend(), device=device))


def _backend() -> str:
    import torch.distributed as dist

    return str(dist.get_backend()) if dist.is_initialized() else "none"


def _prime_buckets(model: Any, optimizer: Any, loss_fn: Any, loader: Any, transform: Any) -> None:
    """Run one throw-away forward/backward so DDP settles its gradient buckets before a resume.

    DDP's first iteration uses buckets in parameter order and rebuilds them in gradient-ready
    order afterwards; PowerSGD's error-feedback and P/Q memories are laid out per bucket, so a
    restored PowerSGD state only fits the rebuilt buckets. Everything this step touches (weights,
    grads, RNG, hook state, loader position) is overwritten by the checkpoint load that follows.
    """

    x, y = to_device(next(iter(loader)), model.gpuspark_info.device)
    if transform is not None:
        x, y = transform(x, y)
    with ddp.autocast(model):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.zero_grad(set_to_none=True)
    model.gpuspark_info.meter.steps.clear()


class _State:
    """Everything one rank needs across steps; kept out of ``fit`` to keep functions short."""

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        loss_fn: Any,
        cfg: FitConfig,
        dataset: Any,
        scheduler: Any,
        scaler: Any,
        meter: Any,
        device: Any,
    ) -> None:
        self.model, self.optimizer, self.loss_fn, self.cfg = model, optimizer, loss_fn, cfg
        self.dataset, self.scheduler, self.scaler, self.meter = dataset, scheduler, scaler, meter
        self.device = device
        self.sync = _Sync(device)
        self.global_step = 0
        self.history: list[dict[str, Any]] = []
        self.run_id: str | None = None
        self.on_step: Callable[[int], None] | None = None
        self.transform: Callable[[Any, Any], tuple[Any, Any]] | None = None
        self.t_epoch = 0.0
        self.hooks: list[StepHook] = []
        """This rank's :class:`~gpuspark.monitor.exporter.RankMetrics`, or ``None``."""
        self.loader_stats: Callable[[], dict[str, Any]] | None = None
        self._mark: tuple[float, int, float, float, float, float] = (0.0, 0, 0.0, 0.0, 0.0, 0.0)
        self._comm: Any = None
        self._loss = 0.0
        self.memory: dict[str, int] = {}
        """This rank's model-state bytes (:func:`~gpuspark.train.fsdp.memory_accounting`)."""

    # -- epoch ------------------------------------------------------------------------------
    def run_epoch(self, loader: Any, epoch: int, skip_steps: int, loader_state: Any) -> _Acc:
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
        skip_micro = skip_steps * self.cfg.accum_steps
        if loader_state is not None and hasattr(self.dataset, "load_state_dict"):
            self.dataset.load_state_dict(loader_state)
            skip_micro = 0
        self.model.train()
        acc = _Acc(comm_first=len(self.meter.steps))
        self.step_in_epoch = skip_steps
        self.t_epoch = self.sync()
        self._mark = (self.t_epoch, 0, 0.0, 0.0, 0.0, 0.0)
        it = iter(loader)
        for _ in range(skip_micro):
            next(it)
        micro = 0
        while True:
            t0 = self.sync()
            try:
                batch = next(it)
            except StopIteration:
                break
            acc.data += self.sync() - t0
            micro += 1
            last = micro % self.cfg.accum_steps == 0
            self._micro_step(batch, last, acc)
            if last:
                self._optimizer_step(acc)
                if self.hooks:
                    self._feed(acc, epoch)
                self._after_step(epoch)
        acc.seconds = self.sync() - self.t_epoch
        if self.hooks:
            self._sample()
        return acc

    def _micro_step(self, batch: Any, last: bool, acc: _Acc) -> None:

        x, y = to_device(batch, self.device)
        if self.transform is not None:
            x, y = self.transform(x, y)
        t0 = self.sync()
        if last:
            self.meter.begin_step()
        ctx = contextlib.nullcontext() if last else fsdp.no_sync(self.model)
        with ctx:
            with ddp.autocast(self.model):
                out = self.model(x)
                loss = self.loss_fn(out, y)
            scaled = loss / self.cfg.accum_steps
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            scaled.backward()
        t1 = self.sync()
        if last:
            self._comm = self.meter.end_step()
        exposed = self._comm.exposed_s if last else 0.0
        acc.compute += max(0.0, (t1 - t0) - exposed)
        acc.comm += exposed
        self._loss = float(loss.detach())
        acc.loss_sum += self._loss * int(x.shape[0])
        acc.loss_n += int(x.shape[0])
        acc.samples += int(x.shape[0])

    def _optimizer_step(self, acc: _Acc) -> None:
        t0 = self.sync()
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if acc.steps == 0:  # shapes do not change: count this rank's bytes once per epoch
            t_mem = time.perf_counter()
            self.memory = fsdp.memory_accounting(self.model, self.optimizer)
            t0 += time.perf_counter() - t_mem
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None and self.cfg.scheduler_interval == "step":
            self.scheduler.step()
        acc.opt += self.sync() - t0
        acc.steps += 1

    def _after_step(self, epoch: int) -> None:
        self.global_step += 1
        self.step_in_epoch += 1
        every = self.cfg.checkpoint_every
        if every and self.global_step % every == 0:
            self.checkpoint(epoch, self.step_in_epoch)
        if self.on_step is not None:
            self.on_step(self.global_step)

    # -- metrics ----------------------------------------------------------------------------
    def _feed(self, acc: _Acc, epoch: int) -> None:
        """Hand this optimizer step to the exporter: deltas of the epoch sums since the last."""
        now = time.perf_counter()
        t, samples, data, compute, comm, opt = self._mark
        self._mark = (now, acc.samples, acc.data, acc.compute, acc.comm, acc.opt)
        phases = {
            "data_wait": acc.data - data,
            "compute": acc.compute - compute,
            "comm": acc.comm - comm,
            "optimizer": acc.opt - opt,
        }
        c = self._comm
        figures = mx.StepFigures(
            samples=acc.samples - samples,
            seconds=now - t,
            phases=phases,
            bytes_sent=c.bytes_sent if c is not None else 0,
            bytes_raw=c.bytes_raw if c is not None else 0,
            loss=self._loss,
            lr=float(self.optimizer.param_groups[0]["lr"]),
            epoch=epoch,
        )
        mx.call_hooks(self.hooks, "step", figures)
        if acc.steps % _SAMPLE_EVERY == 0:
            self._sample()

    def _sample(self) -> None:
        """The slower figures: loader totals and CUDA memory."""
        stats = None
        if self.loader_stats is not None:
            with contextlib.suppress(Exception):
                stats = self.loader_stats()
        mx.call_hooks(self.hooks, "sample", stats, self.device, self.sync.cuda)

    # -- bookkeeping ------------------------------------------------------------------------
    def checkpoint(self, epoch: int, step_in_epoch: int) -> None:
        if not self.cfg.checkpoint_dir:
            return
        store = checkpointer_for(self.model)
        store.save(
            self.cfg.checkpoint_dir,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            scaler=self.scaler,
            loader_state=_loader_state(self.dataset) if step_in_epoch else None,
            epoch=epoch,
            step=self.global_step,
            step_in_epoch=step_in_epoch,
            keep=self.cfg.keep,
            extra={"history": self.history, **self.cfg.extra},
            config=self.cfg.model_config,
            run_id=self.run_id,
        )

    def epoch_metrics(self, epoch: int, acc: _Acc, extra: dict[str, Any]) -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        seconds = acc.seconds
        sums = torch.tensor([acc.loss_sum, float(acc.loss_n), float(acc.samples)])
        if dist.is_initialized():
            dist.all_reduce(sums)
        comm = self.meter.totals(since=acc.comm_first)
        lr = float(self.optimizer.param_groups[0]["lr"])
        return mx.epoch_metrics(
            epoch=epoch,
            steps=acc.steps,
            samples=int(sums[2]),
            seconds=seconds,
            loss=float(sums[0] / max(1.0, float(sums[1]))),
            lr=lr,
            data_wait_s=acc.data,
            compute_s=acc.compute,
            comm_exposed_s=acc.comm,
            optimizer_s=acc.opt,
            bytes_raw=int(comm["bytes_raw"]),
            bytes_sent=int(comm["bytes_sent"]),
            comm_steps=int(comm["steps"]),
            restarts=_restarts(),
            memory=dict(self.memory),
            **extra,
        )
