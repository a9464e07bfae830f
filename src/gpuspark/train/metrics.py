"""Training metrics and the hooks that see them.

- **Per epoch**: the loop builds one plain ``dict`` per epoch (see :func:`epoch_metrics`) and
  hands it to :func:`emit`, which calls every registered exporter (any callable taking that
  dict) on rank 0.
- **Per step**: every rank hands each optimizer step's :class:`StepFigures` to the
  :class:`StepHook` objects of its ``FitConfig.hooks`` (by default the rank's Prometheus
  exporter, :mod:`gpuspark.train.prometheus`), and every few steps the slower figures
  (loader totals, CUDA memory) through :meth:`StepHook.sample`.

A failing exporter or hook is logged (``gpuspark.train.metrics`` logger) and never stops
training.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "Exporter",
    "StepFigures",
    "StepHook",
    "call_hooks",
    "clear_exporters",
    "emit",
    "epoch_metrics",
    "format_epoch",
    "register_exporter",
]

log = logging.getLogger(__name__)

Exporter = Callable[[dict[str, Any]], None]
_EXPORTERS: list[Exporter] = []


@dataclass(frozen=True)
class StepFigures:
    """One optimizer step of one rank: what it did since the step before."""

    samples: int
    seconds: float
    phases: Mapping[str, float]
    """Seconds in ``data_wait``, ``compute``, ``comm`` (exposed) and ``optimizer``."""
    bytes_sent: int
    bytes_raw: int
    loss: float
    lr: float
    epoch: int


class StepHook(Protocol):
    """Sees every optimizer step of this rank (``FitConfig.hooks``)."""

    def step(self, figures: StepFigures) -> None:
        """One optimizer step's figures."""

    def sample(self, loader: Mapping[str, float] | None, device: Any, cuda: bool) -> None:
        """The slower figures, every few steps: the loader's totals (``None``: the loader
        has none) and whether CUDA memory is worth reading on ``device``."""


def call_hooks(hooks: Sequence[StepHook], method: str, *args: Any) -> None:
    """``hook.method(*args)`` for each hook; errors are logged, not raised."""
    for hook in hooks:
        try:
            getattr(hook, method)(*args)
        except Exception as exc:  # a hook must never kill training
            log.warning("training hook %r failed in %s: %s", hook, method, exc)


def register_exporter(fn: Exporter) -> Exporter:
    """Call ``fn(metrics)`` after every epoch on rank 0. Returns ``fn`` (usable as decorator)."""
    if fn not in _EXPORTERS:
        _EXPORTERS.append(fn)
    return fn


def clear_exporters() -> None:
    """Forget all registered exporters."""
    _EXPORTERS.clear()


def emit(metrics: dict[str, Any]) -> None:
    """Pass ``metrics`` to every exporter; errors are logged, not raised."""
    for fn in list(_EXPORTERS):
        try:
            fn(metrics)
        except Exception as exc:  # an exporter must never kill training
            name = getattr(fn, "__name__", repr(fn))
            log.warning("metrics exporter %s failed: %s", name, exc)


def epoch_metrics(
    *,
    epoch: int,
    steps: int,
    samples: int,
    seconds: float,
    loss: float,
    lr: float,
    data_wait_s: float,
    compute_s: float,
    comm_exposed_s: float,
    optimizer_s: float,
    bytes_raw: int,
    bytes_sent: int,
    comm_steps: int,
    restarts: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """Build the per-epoch dict: throughput, step-time parts and fractions, bytes, loss, lr.

    ``samples`` counts all ranks; times are rank 0's wall-clock seconds for the epoch.
    ``extra`` (validation accuracy, AUC, ...) is merged in as given.
    """
    parts = {
        "data_wait": data_wait_s,
        "compute": compute_s,
        "comm_exposed": comm_exposed_s,
        "optimizer": optimizer_s,
    }
    other = max(0.0, seconds - sum(parts.values()))
    total = seconds if seconds > 0 else 1.0
    out: dict[str, Any] = {
        "epoch": epoch,
        "steps": steps,
        "samples": samples,
        "seconds": round(seconds, 4),
        "samples_per_s": round(samples / seconds, 3) if seconds > 0 else 0.0,
        "loss": loss,
        "lr": lr,
        **{f"{k}_s": round(v, 4) for k, v in parts.items()},
        "other_s": round(other, 4),
        "fractions": {k: round(v / total, 4) for k, v in {**parts, "other": other}.items()},
        "bytes_raw_per_step": bytes_raw // comm_steps if comm_steps else 0,
        "bytes_sent_per_step": bytes_sent // comm_steps if comm_steps else 0,
        "bytes_raw": bytes_raw,
        "bytes_sent": bytes_sent,
        "compression_ratio": round(bytes_raw / bytes_sent, 3) if bytes_sent else 0.0,
        "loader_wait_s": round(data_wait_s, 4),
        "restarts": restarts,
    }
    out.update(extra)
    return out


def format_epoch(m: dict[str, Any]) -> str:
    """One line for the log: epoch, loss, throughput, fractions, bytes, extra scores."""
    f = m["fractions"]
    line = (
        f"epoch {m['epoch']}: loss {m['loss']:.4f} lr {m['lr']:.3g} "
        f"{m['samples_per_s']:.1f} samples/s | data {f['data_wait']:.0%} "
        f"compute {f['compute']:.0%} comm {f['comm_exposed']:.0%} opt {f['optimizer']:.0%} | "
        f"sent {m['bytes_sent_per_step'] / 1e6:.3f} MB/step of {m['bytes_raw_per_step'] / 1e6:.3f}"
    )
    for key in ("val_acc", "val_auc", "val_top1"):
        if key in m and m[key] is not None:
            line += f" | {key} {m[key]:.3f}"
    return line
