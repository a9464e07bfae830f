"""What a recipe run returns: :class:`TrainSummary` (rank 0's has the validation scores)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["TrainSummary"]


@dataclass
class TrainSummary:
    """The outcome of one recipe run on one rank."""

    recipe: str
    world_size: int
    backend: str
    device: str
    parameters: int
    """Trainable and frozen parameters of the model."""
    splits: dict[str, int]
    """Samples per split of the dataset."""
    history: list[dict[str, Any]]
    """One metrics dict per epoch (see :func:`gpuspark.train.metrics.epoch_metrics`)."""
    best: dict[str, Any] = field(default_factory=dict)
    """The best epoch and its validation scores (rank 0)."""
    comm: dict[str, Any] = field(default_factory=dict)
    """Bytes handed to all-reduce, raw and sent, over the whole run."""
    comm_after_start: dict[str, Any] = field(default_factory=dict)
    """The same from PowerSGD's start step on (the whole run for other hooks)."""
    loader: dict[str, Any] = field(default_factory=dict)
    """The training loader's counters (waits, cache, skipped records)."""
    test: dict[str, Any] | None = None
    """Scores on the held-out test split (rank 0, when the dataset has one)."""
    tracking: dict[str, Any] | None = None
    """Where rank 0 tracked the run in MLflow (``--mlflow``): tracking URI, run id, registered
    model URI (see :meth:`gpuspark.train.tracking.TrackedRun.summary`)."""

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json`` and ``history.json``."""
        return asdict(self)
