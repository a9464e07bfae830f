"""The checkpoint backend of a model, behind one protocol: :class:`Checkpointer`.

A DDP (or single-process) model saves one file per checkpoint, written by rank 0
(:mod:`gpuspark.train.checkpoint`); a sharded model (FSDP/HSDP) saves a directory in which
every rank writes its shards through ``torch.distributed.checkpoint``
(:mod:`gpuspark.train.sharded`). The training loop asks :func:`checkpointer_for` and never
branches on the strategy; a new backend is one class with these two methods.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from gpuspark.train import checkpoint, fsdp, sharded
from gpuspark.train.checkpoint import Resumed

__all__ = ["FULL", "SHARDED", "Checkpointer", "checkpointer_for"]


class Checkpointer(Protocol):
    """Saves and loads a model's training state; both methods are collective."""

    def save(
        self,
        directory: str | os.PathLike[str],
        *,
        model: Any,
        optimizer: Any = None,
        scheduler: Any = None,
        scaler: Any = None,
        loader_state: Any = None,
        epoch: int,
        step: int,
        step_in_epoch: int = 0,
        keep: int = 3,
        extra: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        run_id: str | None = None,
    ) -> Path | None:
        """Write the checkpoint of global step ``step``; return its path on rank 0."""

    def load(
        self,
        path_or_dir: str | os.PathLike[str],
        *,
        model: Any,
        optimizer: Any = None,
        scheduler: Any = None,
        scaler: Any = None,
        restore_rng: bool = True,
        config: dict[str, Any] | None = None,
    ) -> Resumed | None:
        """Load a checkpoint (the newest in a directory); ``None`` when there is none."""


class _Module:
    """A checkpoint module (``save`` and ``load`` functions) as a :class:`Checkpointer`."""

    def __init__(self, module: Any) -> None:
        self.save = module.save
        self.load = module.load
        self.name = module.__name__.rsplit(".", 1)[-1]

    def __repr__(self) -> str:
        return f"<Checkpointer {self.name}>"


FULL: Checkpointer = _Module(checkpoint)
"""One file per checkpoint, written by rank 0 (DDP, single process)."""
SHARDED: Checkpointer = _Module(sharded)
"""A DCP directory per checkpoint, every rank writing its shards (FSDP, HSDP)."""


def checkpointer_for(model: Any) -> Checkpointer:
    """:data:`SHARDED` for a sharded model, else :data:`FULL`."""
    return SHARDED if fsdp.is_sharded(model) else FULL
