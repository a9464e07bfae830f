"""Atomic training checkpoints: rank 0 writes, every rank loads.

A checkpoint is one file ``step-<global step>.pt`` holding the model, optimizer, LR scheduler,
grad scaler, loader state, epoch and step, and *every rank's* RNG states (python, numpy, torch,
CUDA) and communication-hook state (PowerSGD error feedback), gathered to rank 0 so a resumed
rank continues exactly where it stopped. The file is written under a temporary name in the same
directory and renamed into place, so a run killed at any moment leaves either the previous
checkpoint or the new one, never half of one. Only the last ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuspark.errors import CheckpointError

__all__ = [
    "CheckpointError",
    "Resumed",
    "latest",
    "list_checkpoints",
    "load",
    "rng_state",
    "save",
    "set_rng_state",
]

_NAME = re.compile(r"^step-(\d{9})\.pt$")


@dataclass
class Resumed:
    """Where a loaded checkpoint left off."""

    path: Path
    epoch: int
    """Epoch in progress when the checkpoint was taken."""
    step: int
    """Global optimizer steps done."""
    step_in_epoch: int
    """Optimizer steps done in ``epoch``."""
    loader_state: Any
    extra: dict[str, Any]


def rng_state() -> dict[str, Any]:
    """This process's RNG states: python, numpy, torch CPU and (if present) all CUDA devices."""
    import numpy as np
    import torch

    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def list_checkpoints(directory: str | os.PathLike[str]) -> list[Path]:
    """Committed checkpoints in ``directory``, oldest first (temporary files are ignored)."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def latest(directory: str | os.PathLike[str]) -> Path | None:
    """The newest committed checkpoint in ``directory``, or ``None``."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def _world() -> tuple[int, int, bool]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), True
    return 0, 1, False


def _unwrap(model: Any) -> Any:
    return getattr(model, "module", model)


def _per_rank_state(model: Any) -> dict[str, Any]:
    from gpuspark.train import ddp

    comm = ddp.comm_state_dict(model) if hasattr(model, "gpuspark_info") else {}
    return {"rng": rng_state(), "comm": _to_cpu(comm)}


def _to_cpu(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    return obj


def save(
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
) -> Path | None:
    """Write a checkpoint of global step ``step``; collective: call on every rank.

    Every rank's RNG and hook state are gathered to rank 0, which writes the file atomically
    and prunes all but the newest ``keep`` checkpoints. Returns the path on rank 0, else None.
    """
    import torch
    import torch.distributed as dist

    rank, world, dist_on = _world()
    mine = _per_rank_state(model)
    if dist_on:
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, mine)
    else:
        gathered = [mine]
    path: Path | None = None
    if rank == 0:
        payload = {
            "format": 1,
            "epoch": epoch,
            "step": step,
            "step_in_epoch": step_in_epoch,
            "world_size": world,
            "model": _unwrap(model).state_dict(),
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "scaler": scaler.state_dict() if scaler is not None else None,
            "loader": loader_state,
            "ranks": gathered,
            "extra": extra or {},
        }
        path = _write(Path(directory), step, payload, torch)
        for old in list_checkpoints(directory)[: -max(1, keep)]:
            old.unlink(missing_ok=True)
    if dist_on:
        dist.barrier()
    return path


def _write(directory: Path, step: int, payload: dict[str, Any], torch: Any) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / f"step-{step:09d}.pt"
        tmp = directory / f".{final.name}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except OSError as exc:
        raise CheckpointError(
            f"cannot write checkpoint to {directory}: {exc}",
            remedy="check the --checkpoint-dir path, its permissions and free space",
        ) from exc
    return final


def load(
    path_or_dir: str | os.PathLike[str],
    *,
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    restore_rng: bool = True,
) -> Resumed | None:
    """Load a checkpoint (a file, or the newest one in a directory) into the given objects.

    Call on every rank: each gets the shared model/optimizer state and its own RNG and hook
    state. Returns ``None`` when a directory holds no checkpoint yet.
    """
    import torch

    p = Path(path_or_dir)
    if p.is_dir() or not p.exists():
        found = latest(p)
        if found is None:
            return None
        p = found
    try:
        payload = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as exc:  # a corrupt file: torch raises several types
        raise CheckpointError(
            f"checkpoint {p} cannot be read: {exc}",
            remedy="delete it to resume from the previous one",
        ) from exc
    rank, world, _ = _world()
    if payload["world_size"] != world:
        raise CheckpointError(
            f"checkpoint {p} was written by {payload['world_size']} ranks, this run has {world}",
            remedy="resume with the same number of processes, or start a fresh --checkpoint-dir",
        )
    _unwrap(model).load_state_dict(payload["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and payload[key] is not None:
            obj.load_state_dict(payload[key])
    mine = payload["ranks"][rank]
    if restore_rng:
        set_rng_state(mine["rng"])
    if mine.get("comm") and hasattr(model, "gpuspark_info"):
        from gpuspark.train import ddp

        ddp.load_comm_state_dict(model, mine["comm"])
    return Resumed(
        path=p,
        epoch=payload["epoch"],
        step=payload["step"],
        step_in_epoch=payload["step_in_epoch"],
        loader_state=payload["loader"],
        extra=payload["extra"],
    )
