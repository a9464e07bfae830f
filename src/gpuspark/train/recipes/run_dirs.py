"""The directories a training run writes into (``--checkpoint-dir``, ``--out``): checked on
the driver before any rank starts, cleared of an earlier run with ``--overwrite``, and the
best model a resumed run has to beat."""

from __future__ import annotations

from typing import Any

from gpuspark import storage
from gpuspark.train import checkpoint as ckpt
from gpuspark.train.recipes.config import RecipeConfig

__all__ = ["check_run_dirs", "clear_earlier_run", "earlier_best"]


def check_run_dirs(cfg: RecipeConfig, shape: dict[str, Any], num_processes: int | None) -> None:
    """The checkpoint and output directories are usable; a new run finds them empty (or
    ``cfg.checkpoint.overwrite``); a resume finds a checkpoint written for ``shape`` by
    ``num_processes`` ranks. Raises ``CheckpointError`` in one line."""
    for directory, what in _run_dirs(cfg):
        ckpt.check_dir(directory, what)
        if not cfg.checkpoint.resume:
            ckpt.check_new_run(directory, overwrite=cfg.checkpoint.overwrite, what=what)
    if cfg.checkpoint.resume and cfg.checkpoint.checkpoint_dir:
        found = ckpt.check_config(cfg.checkpoint.checkpoint_dir, shape, world_size=num_processes)
        if found is None:
            _nothing_to_resume(cfg.checkpoint.checkpoint_dir)


def _nothing_to_resume(directory: str) -> None:
    """``--resume`` into a folder without a checkpoint (a typo, most often): one line, not a
    silent run from scratch."""
    where = "does not exist" if not storage.exists(directory) else "holds no checkpoint"
    raise ckpt.CheckpointError(
        f"--resume: {directory} {where}, so there is nothing to continue",
        remedy="check the --checkpoint-dir path, or leave out --resume to start a new run",
    )


def _run_dirs(cfg: RecipeConfig) -> list[tuple[str, str]]:
    """The directories a run writes into, each with the option that names it."""
    dirs = [(cfg.checkpoint.checkpoint_dir, "--checkpoint-dir"), (cfg.out_dir, "--out")]
    seen: set[str] = set()
    found = []
    for directory, what in dirs:
        if not directory:
            continue
        where = storage.location(directory)
        if where not in seen:
            seen.add(where)
            found.append((directory, what))
    return found


def clear_earlier_run(cfg: RecipeConfig) -> None:
    """With ``cfg.overwrite`` (a new run, after :func:`preflight`): remove the earlier run's
    checkpoints, ``best.pt`` and ``history.json`` from its directories, nothing else."""
    if cfg.checkpoint.overwrite and not cfg.checkpoint.resume:
        for directory, _ in _run_dirs(cfg):
            ckpt.clear_run(directory)


def earlier_best(cfg: RecipeConfig) -> dict[str, Any]:
    """The best epoch so far of the run being resumed (its ``best.pt``), so that a worse
    epoch after the resume does not replace it; ``{}`` when there is none."""
    path = storage.as_path(cfg.out_dir) / "best.pt" if cfg.out_dir else None
    if path is None or not storage.is_file(path):
        return {}
    try:
        payload = ckpt.load_payload(path, mmap=True)
        return {"score": float(payload["score"]), "epoch": payload["epoch"], **payload["scores"]}
    except Exception:  # an older best.pt without its score, or a damaged one: start over
        return {}
