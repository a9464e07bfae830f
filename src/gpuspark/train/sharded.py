"""Sharded checkpoints of FSDP/HSDP models through ``torch.distributed.checkpoint`` (DCP).

A sharded checkpoint is a *directory* ``step-<global step>.dcp`` next to (and ordered with)
the single-file ``step-<n>.pt`` checkpoints of :mod:`gpuspark.train.checkpoint`, so
``latest``/``list_checkpoints``/``inspect``/``check_config`` see both. Inside it:

- the DCP files: every rank writes its own shards of the model and optimizer state
  (``get_state_dict``: parameters as DTensors, names without FSDP prefixes), and DCP's
  coordinator writes the ``.metadata`` file last;
- ``meta.pt`` (rank 0): epoch, step, scheduler, scaler, loader state, every rank's RNG state,
  config and extra, in the format of a single-file checkpoint with ``model=None``.

All ranks write into a staging directory ``.step-<n>.dcp.tmp``; after a barrier rank 0 adds
``meta.pt`` and renames the directory into place, so a run killed at any moment leaves the
previous checkpoint or the new one. The directory must be on a filesystem every rank sees.
On an object store (a URL ``--checkpoint-dir``, which has no rename) the ranks write straight
into ``step-<n>.dcp/`` through DCP's fsspec writer and rank 0 uploads ``meta.pt`` last: a
``.dcp`` prefix without ``meta.pt`` is not a checkpoint (:func:`~.checkpoint_dir.list_checkpoints`).

Resharding: DCP records each shard's global offsets, so a checkpoint written by 4 ranks loads
into 2 (or 8) and each rank reads the pieces of its new shard. Exact resume (RNG streams)
needs the same world size; at another size weights, optimizer, scheduler and loader position
are restored and each rank keeps its own RNG. :func:`export_consolidated` writes one plain
``state_dict`` file for inference.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark.errors import CheckpointError
from gpuspark.storage import Location, RemotePath
from gpuspark.train import checkpoint as ckpt

__all__ = ["export_consolidated", "load", "save"]

_META = "meta.pt"


def _world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _state(model: Any, optimizer: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    if optimizer is None:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return {"model": get_model_state_dict(model)}
    msd, osd = get_state_dict(model, optimizer)
    return {"model": msd, "optim": osd}


def save(
    directory: str | os.PathLike[str] | RemotePath,
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
    """Write sharded checkpoint ``step-<step>.dcp``; collective: call on every rank.

    Same arguments as :func:`gpuspark.train.checkpoint.save`. Returns the path on rank 0.
    """
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    rank, world = _world()
    d = storage.as_path(directory)
    final = d / f"step-{step:09d}.dcp"
    # an object store has no rename: write in place, meta.pt (the commit) last
    stage = final if isinstance(d, RemotePath) else d / f".{final.name}.tmp"
    if rank == 0:
        with ckpt.writing(d):
            storage.makedirs(d)
            storage.remove(stage)  # a remote re-save of one step: uncommitted until meta.pt
    _barrier()
    dcp.save(_state(model, optimizer), checkpoint_id=str(stage))
    mine = {"rng": ckpt.rng_state(), "comm": {}}
    gathered: list[Any] = [None] * world
    if world > 1:
        dist.all_gather_object(gathered, mine)
    else:
        gathered = [mine]
    path: Location | None = None
    if rank == 0:
        meta = {
            "format": 2,
            "sharded": True,
            **ckpt.run_state(epoch, step, step_in_epoch, world, scheduler, scaler, loader_state),
            "model": None,
            "ranks": gathered,
            "extra": extra or {},
            "config": dict(config) if config is not None else None,
            "run_id": run_id,
        }
        with ckpt.writing(d):
            _commit(stage, final, meta)
        path = final
        ckpt.prune(d, keep, run_id=run_id)
    _barrier()
    return path


def _commit(stage: Location, final: Location, meta: dict[str, Any]) -> None:
    import torch

    if isinstance(stage, RemotePath):
        buffer = io.BytesIO()
        torch.save(meta, buffer)
        storage.atomic_write_bytes(str(stage / _META), buffer.getvalue())
        return
    assert isinstance(final, Path)
    tmp = stage / f".{_META}.tmp"
    with open(tmp, "wb") as fh:
        torch.save(meta, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, stage / _META)
    if final.exists():  # the same step again (a resumed run re-saving): replace it
        shutil.rmtree(final)
    os.replace(stage, final)


def _meta(p: Location) -> dict[str, Any]:
    try:
        meta = ckpt.load_payload(p / _META)
    except Exception as exc:  # torch and pickle raise several types
        raise CheckpointError(
            f"sharded checkpoint {p} has no readable {_META} ({type(exc).__name__})",
            remedy=f"delete {p.name} to resume from the previous checkpoint",
        ) from exc
    return dict(meta)


def _resolve(path_or_dir: str | os.PathLike[str] | RemotePath) -> Location | None:
    p = storage.as_path(path_or_dir)
    if p.name.endswith(".dcp") and storage.is_dir(p):
        return p
    found = ckpt.latest(p)
    if found is not None and not found.name.endswith(".dcp"):
        raise CheckpointError(
            f"checkpoint {found} is a single-file (DDP) checkpoint, this model is sharded",
            remedy="resume it with --strategy ddp (strategy='ddp'), or start a fresh "
            "--checkpoint-dir",
        )
    return found


def load(
    path_or_dir: str | os.PathLike[str] | RemotePath,
    *,
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    restore_rng: bool = True,
    config: dict[str, Any] | None = None,
) -> ckpt.Resumed | None:
    """Load a sharded checkpoint (a ``.dcp`` directory, or the newest in a directory).

    Collective. Reshards when the world size differs from the writer's; RNG states are
    restored only at the same world size. ``None`` when a directory holds no checkpoint.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    p = _resolve(path_or_dir)
    if p is None:
        return None
    meta = _meta(p)
    if config is not None:
        ckpt.check_config(p, config)
    state = _state(model, optimizer)
    dcp.load(state, checkpoint_id=str(p))
    set_state_dict(
        model,
        optimizer if optimizer is not None else [],
        model_state_dict=state["model"],
        optim_state_dict=state.get("optim", {}),
    )
    for obj, key in ((scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and meta[key] is not None:
            obj.load_state_dict(meta[key])
    rank, world = _world()
    if restore_rng and world == int(meta["world_size"]):
        ckpt.set_rng_state(meta["ranks"][rank]["rng"])
    return ckpt.Resumed(
        path=p,
        epoch=meta["epoch"],
        step=meta["step"],
        step_in_epoch=meta["step_in_epoch"],
        loader_state=meta["loader"],
        extra=meta["extra"],
        run_id=meta.get("run_id"),
        world_size=int(meta["world_size"]),
    )


def export_consolidated(
    path_or_dir: str | os.PathLike[str],
    out_file: str | os.PathLike[str],
    *,
    model: Any = None,
) -> Location | None:
    """Write one plain ``state_dict`` file (full tensors, CPU) from a sharded checkpoint.

    With ``model`` (sharded, on every rank; collective): the checkpoint's weights are loaded
    into it and rank 0 gathers the full state and writes ``out_file``. Without: a single
    process reads the checkpoint directly (no process group needed; it reads optimizer
    state too, so it needs memory for the whole checkpoint). Returns the path on the writer.
    """
    import torch

    p = _resolve(path_or_dir)
    if p is None:
        raise CheckpointError(
            f"no checkpoint in {os.fspath(path_or_dir)}", remedy="pass a step-<n>.dcp directory"
        )
    if model is None:
        full = _offline_model_state(p)
    else:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        load(p, model=model, restore_rng=False)
        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full = get_model_state_dict(model, options=opts)
        if _world()[0] != 0:
            _barrier()
            return None
    out = storage.as_path(out_file)
    buffer = io.BytesIO()
    torch.save(full, buffer)
    with ckpt.writing(out.parent):
        storage.atomic_write_bytes(str(out), buffer.getvalue())
    if model is not None:
        _barrier()
    return out


def _offline_model_state(p: Location) -> dict[str, Any]:
    import tempfile

    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as tmp:
        whole = Path(tmp) / "all.pt"
        dcp_to_torch_save(str(p), str(whole))
        state = torch.load(whole, map_location="cpu", weights_only=False)
    return dict(state["model"])
