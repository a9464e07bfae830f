"""The rank's Prometheus exporter as a :class:`~gpuspark.train.metrics.StepHook`: the default
hook of :func:`gpuspark.train.loop.fit` (``FitConfig.hooks=None``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuspark.monitor.exporter import serve
from gpuspark.train.metrics import StepFigures

if TYPE_CHECKING:
    from gpuspark.train.loop import FitConfig

__all__ = ["PrometheusHook", "prometheus_hooks"]

log = logging.getLogger(__name__)


class PrometheusHook:
    """Feeds a :class:`~gpuspark.monitor.exporter.RankMetrics` (this rank's ``/metrics``)."""

    def __init__(self, metrics: Any) -> None:
        self.metrics = metrics

    def step(self, figures: StepFigures) -> None:
        """One optimizer step's figures."""
        f = figures
        self.metrics.step(
            f.samples, f.seconds, f.phases, f.bytes_sent, f.bytes_raw, f.loss, f.lr, f.epoch
        )

    def sample(self, loader: Mapping[str, float] | None, device: Any, cuda: bool) -> None:
        """Loader totals and CUDA memory."""
        if loader is not None:
            self.metrics.loader(loader)
        if cuda:
            self.metrics.cuda_memory(device)

    def __repr__(self) -> str:
        return f"<PrometheusHook {getattr(self.metrics, 'url', '')}>"


def prometheus_hooks(
    cfg: FitConfig, *, rank: int, world: int, backend: str, device: str
) -> list[PrometheusHook]:
    """This rank's exporter started (or reused) as a hook; ``[]`` when metrics are off or
    the exporter cannot start (logged: metrics never stop training)."""
    try:
        rm = serve(cfg.metrics_port, cfg.metrics_host, run_id=cfg.run_id, team=cfg.team)
    except Exception as exc:  # metrics must never stop training
        log.warning("training metrics are off: %s", exc)
        return []
    if rm is None:
        return []
    recipe = str((cfg.model_config or {}).get("recipe", ""))
    rm.describe(world_size=world, recipe=recipe, backend=backend, device=device)
    if rank == 0 and not rm.announced and cfg.log is not None:
        rm.announced = True
        cfg.log(f"metrics: {rm.url}" + (" (rank r: port + local rank)" if world > 1 else ""))
    return [PrometheusHook(rm)]
