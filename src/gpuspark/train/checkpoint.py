"""Atomic training checkpoints: rank 0 writes, every rank loads.

A checkpoint is one file ``step-<global step>.pt`` holding the model, optimizer, LR scheduler,
grad scaler, loader state, epoch and step, and *every rank's* RNG states (python, numpy, torch,
CUDA) and communication-hook state (PowerSGD error feedback), gathered to rank 0 so a resumed
rank continues exactly where it stopped. The file is written under a temporary name in the same
directory and renamed into place, so a run killed at any moment leaves either the previous
checkpoint or the new one, never half of one. Only the last ``keep`` checkpoints are kept.

Every checkpoint records the ``run_id`` of the training run that wrote it; pruning removes
only that run's older checkpoints, never another run's, and :func:`latest` continues the run
that wrote last. ``gpuspark train`` refuses a new run into a directory that holds an earlier
one (:func:`check_new_run`): ``--resume`` continues it, ``--overwrite`` removes its files
(:func:`clear_run`) and nothing else.
Sharded models (FSDP/HSDP) write ``step-<n>.dcp`` directories instead
(:mod:`gpuspark.train.sharded`); listing, ``latest``, ``inspect`` and ``check_config`` cover both.

A checkpoint also records ``config``: the options that shape the model (recipe, depth, width,
classes, ...). :func:`inspect` reads it cheaply (the tensors are memory-mapped, not read) and
:func:`check_config` compares it with a new run's on the driver, before any rank starts, so
a resume with other options is one line naming the differing fields, not a wall of keys.
"""

from __future__ import annotations

import io
import os
import random
from dataclasses import dataclass
from typing import Any

from gpuspark import storage
from gpuspark._util import envvars
from gpuspark.errors import CheckpointError
from gpuspark.storage import Location
from gpuspark.train import ddp
from gpuspark.train.checkpoint_dir import (
    CHECKPOINT_NAME,
    Where,
    check_dir,
    check_new_run,
    clear_run,
    latest,
    list_checkpoints,
    load_payload,
    prune,
    run_files,
    run_of,
    writing,
)

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "Resumed",
    "check_config",
    "check_dir",
    "check_new_run",
    "clear_run",
    "config_diff",
    "inspect",
    "latest",
    "list_checkpoints",
    "load",
    "load_payload",
    "prune",
    "rng_state",
    "run_files",
    "run_of",
    "run_state",
    "save",
    "set_rng_state",
    "writing",
]

_FRESH = "start a fresh --checkpoint-dir"


@dataclass
class Resumed:
    """Where a loaded checkpoint left off."""

    path: Location
    epoch: int
    """Epoch in progress when the checkpoint was taken."""
    step: int
    """Global optimizer steps done."""
    step_in_epoch: int
    """Optimizer steps done in ``epoch``."""
    loader_state: Any
    extra: dict[str, Any]
    run_id: str | None = None
    """The run that wrote it (``None``: a checkpoint of a version without run ids)."""
    world_size: int | None = None
    """The number of ranks that wrote it (``None``: not recorded)."""


@dataclass
class CheckpointInfo:
    """What a checkpoint says about itself, read without loading its tensors."""

    path: Location
    epoch: int
    step: int
    world_size: int
    config: dict[str, Any] | None
    """The options that shaped the model (``None``: the writer recorded none)."""
    sharded: bool = False
    """A sharded (``.dcp``) checkpoint: it loads at any world size."""
    run_id: str | None = None
    """The run that wrote it (``None``: a checkpoint of a version without run ids)."""


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


def _world() -> tuple[int, int, bool]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), True
    return 0, 1, False


def _unwrap(model: Any) -> Any:
    return getattr(model, "module", model)


def _per_rank_state(model: Any) -> dict[str, Any]:

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
    directory: Where,
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
) -> Location | None:
    """Write a checkpoint of global step ``step``; collective: call on every rank.

    Every rank's RNG and hook state are gathered to rank 0, which writes the file atomically
    and prunes all but the newest ``keep`` checkpoints of run ``run_id``. Returns the path on
    rank 0, else None. ``config`` (JSON-like: the options that shape the model) is recorded
    for :func:`check_config`.
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
    path: Location | None = None
    if rank == 0:
        payload = {
            "format": 1,
            **run_state(epoch, step, step_in_epoch, world, scheduler, scaler, loader_state),
            "model": _unwrap(model).state_dict(),
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "ranks": gathered,
            "extra": extra or {},
            "config": dict(config) if config is not None else None,
            "run_id": run_id,
        }
        path = _write(storage.as_path(directory), step, payload, torch)
        prune(directory, keep, run_id=run_id)
    if dist_on:
        dist.barrier()
    return path


def run_state(
    epoch: int,
    step: int,
    step_in_epoch: int,
    world_size: int,
    scheduler: Any,
    scaler: Any,
    loader_state: Any,
) -> dict[str, Any]:
    """The fields every checkpoint (single-file or sharded) records besides the weights:
    position, world size, scheduler, scaler and loader state."""
    return {
        "epoch": epoch,
        "step": step,
        "step_in_epoch": step_in_epoch,
        "world_size": world_size,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "loader": loader_state,
    }


def _write(directory: Location, step: int, payload: dict[str, Any], torch: Any) -> Location:
    """Write ``step-<step>.pt`` whole or not at all: locally a temporary file renamed into
    place, on an object store one upload (an object is visible only once complete)."""
    name = f"step-{step:09d}.pt"
    with writing(directory):
        if isinstance(directory, storage.RemotePath):
            buffer = io.BytesIO()
            torch.save(payload, buffer)
            storage.atomic_write_bytes(str(directory / name), buffer.getvalue())
            return directory / name
        final = directory / name
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{final.name}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    return final


def load(
    path_or_dir: Where,
    *,
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    restore_rng: bool = True,
    config: dict[str, Any] | None = None,
) -> Resumed | None:
    """Load a checkpoint (a file, or the newest one in a directory) into the given objects.

    Call on every rank: each gets the shared model/optimizer state and its own RNG and hook
    state. Returns ``None`` when a directory holds no checkpoint yet. A checkpoint that does
    not fit (other ``config``, other world size, other parameter names or shapes) raises a
    one-line :class:`CheckpointError` before anything is changed.
    """
    p = _resolve(path_or_dir)
    if p is None:
        return None
    payload = _read(p)
    if payload.get("sharded"):
        raise CheckpointError(
            f"checkpoint {p} is sharded (FSDP/HSDP), this model is not",
            remedy="prepare the model with strategy='fsdp' or 'hsdp', or export it with "
            "gpuspark.train.sharded.export_consolidated",
        )
    rank, world, _ = _world()
    saved_world = int(payload["world_size"])
    if not elastic_resume():
        _check_world(p, saved_world, world)
    if config is not None:
        _check_fields(p, payload.get("config"), config)
    _load_model(p, _unwrap(model), payload["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and payload[key] is not None:
            obj.load_state_dict(payload[key])
    # another world (elastic): the ranks' own RNG and compression state start afresh
    mine = payload["ranks"][rank] if saved_world == world else {}
    if restore_rng and mine:
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
        run_id=payload.get("run_id"),
        world_size=saved_world,
    )


def elastic_resume() -> bool:
    """Whether this rank may resume a checkpoint of another world size: its launch has
    ``--min-ranks`` (``GPUSPARK_MIN_RANKS``), so a retry can run fewer ranks."""
    return bool(envvars.MIN_RANKS.get())


def inspect(path_or_dir: Where) -> CheckpointInfo | None:
    """Step, world size and recorded config of a checkpoint (the newest in a directory).

    The tensors are memory-mapped, not read, so this is cheap for large models. Returns
    ``None`` when a directory holds no checkpoint; a file that is not a readable gpuspark
    checkpoint raises :class:`CheckpointError`.
    """
    p = _resolve(path_or_dir)
    if p is None:
        return None
    payload = _read(p, mmap=True)
    return CheckpointInfo(
        path=p,
        epoch=int(payload["epoch"]),
        step=int(payload["step"]),
        world_size=int(payload["world_size"]),
        config=payload.get("config"),
        sharded=bool(payload.get("sharded")),
        run_id=payload.get("run_id"),
    )


def check_config(
    path_or_dir: Where,
    config: dict[str, Any],
    *,
    world_size: int | None = None,
) -> CheckpointInfo | None:
    """Raise :class:`CheckpointError` unless the newest checkpoint fits a run with ``config``.

    For the driver, before any rank starts: the checkpoint must be readable, have been
    written by ``world_size`` ranks (when given) and, if it recorded a config, with the same
    value of every field of ``config``. Returns what :func:`inspect` returns.
    """
    info = inspect(path_or_dir)
    if info is None:
        return None
    if world_size is not None and not info.sharded:
        _check_world(info.path, info.world_size, world_size)
    _check_fields(info.path, info.config, config)
    return info


def config_diff(saved: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(field, saved value, current value)`` for each field of ``current`` that differs.

    Fields ``saved`` does not have are not compared (checkpoints of an older version).
    """
    return [(k, saved[k], v) for k, v in current.items() if k in saved and saved[k] != v]


# -- reading ---------------------------------------------------------------------------------


def _resolve(path_or_dir: Where) -> Location | None:
    p = storage.as_path(path_or_dir)
    if storage.is_file(p) or (CHECKPOINT_NAME.match(p.name) and storage.is_dir(p)):
        return p
    return latest(p)


def _read(p: Location, *, mmap: bool = False) -> dict[str, Any]:
    """The payload of checkpoint ``p``; a one-line :class:`CheckpointError` if unreadable."""
    remedy = f"delete {p.name} to resume from the previous checkpoint, or {_FRESH}"
    try:
        src = p / "meta.pt" if storage.is_dir(p) else p
        payload = load_payload(src, mmap=mmap)
    except Exception as exc:  # a corrupt file: torch and pickle raise several types
        raise CheckpointError(
            f"checkpoint {p} cannot be read ({_first_line(exc)})", remedy=remedy
        ) from exc
    if not isinstance(payload, dict) or "format" not in payload or "model" not in payload:
        raise CheckpointError(
            f"checkpoint {p} is not a gpuspark checkpoint (a {type(payload).__name__} "
            "without the format/model fields)",
            remedy=remedy,
        )
    return payload


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    line = line[:200] + ("..." if len(line) > 200 else "")
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _check_world(p: Location, saved: int, world: int) -> None:
    if saved != world:
        raise CheckpointError(
            f"checkpoint {p} was written by {saved} ranks, this run has {world}",
            remedy=f"resume with the same number of processes, or {_FRESH}",
        )


def _check_fields(p: Location, saved: dict[str, Any] | None, current: dict[str, Any]) -> None:
    if not saved:
        return
    diff = config_diff(saved, current)
    if diff:
        what = ", ".join(f"{k} {a!r} in the checkpoint, {b!r} in this run" for k, a, b in diff)
        same = ", ".join(f"{k}={a!r}" for k, a, _ in diff)
        raise CheckpointError(
            f"checkpoint {p} was written for another model: {what}",
            remedy=f"resume with the options it was written with ({same}), or {_FRESH}",
        )


def _load_model(p: Location, net: Any, state: dict[str, Any]) -> None:
    """``net.load_state_dict(state)``, after a check that turns a mismatch into one line."""
    mine = net.state_dict()
    shapes = [
        f"{k} {_shape(state[k])} in the checkpoint, {_shape(v)} in the model"
        for k, v in mine.items()
        if k in state and _shape(state[k]) != _shape(v)
    ]
    missing = [k for k in mine if k not in state]
    unexpected = [k for k in state if k not in mine]
    parts = []
    if shapes:
        parts.append(f"{len(shapes)} tensors differ in shape (first: {shapes[0]})")
    if missing:
        parts.append(f"{len(missing)} model tensors are not in it (first: {missing[0]})")
    if unexpected:
        parts.append(
            f"{len(unexpected)} of its tensors are not in the model (first: {unexpected[0]})"
        )
    if not parts:
        try:
            net.load_state_dict(state)
            return
        except (RuntimeError, ValueError, KeyError) as exc:
            parts.append(_first_line(exc))
    raise CheckpointError(
        f"checkpoint {p} does not fit this model: " + "; ".join(parts),
        remedy=f"resume with the model options it was written with, or {_FRESH}",
    )


def _shape(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else None
