"""The checkpoint directory of a training run: which files are checkpoints, which one a
resume continues, which ones pruning may remove, and what a new run may replace.

Checkpoints are ``step-<global step>.pt`` files (DDP) or ``step-<n>.dcp`` directories
(FSDP/HSDP, committed once ``meta.pt`` is in place). Each records the ``run_id`` of the run
that wrote it: :func:`prune` removes only that run's older checkpoints, and :func:`latest`
continues the run that wrote last. :func:`check_new_run` refuses a new run into a directory
that holds anything (``--resume`` or ``--overwrite``); :func:`clear_run` removes an earlier
run's files and nothing else.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from gpuspark import storage
from gpuspark.errors import CheckpointError

__all__ = [
    "CHECKPOINT_NAME",
    "check_dir",
    "check_new_run",
    "clear_run",
    "latest",
    "list_checkpoints",
    "prune",
    "run_files",
    "run_of",
    "writing",
]

CHECKPOINT_NAME = re.compile(r"^step-(\d{9})\.(pt|dcp)$")
"""``.pt``: one file (DDP); ``.dcp``: a sharded checkpoint directory (:mod:`.sharded`)."""
_RUN_FILES = ("best.pt", "history.json", "mlflow-run.json")
"""What ``gpuspark train`` writes besides the checkpoints (in ``--out``, default the
checkpoint directory)."""
_RUN_TEMP = re.compile(r"^\.(step-\d{9}\.(pt|dcp)|best\.pt|history\.json)\.tmp")
"""Temporary names of the above, left by a run killed mid-write."""


def list_checkpoints(directory: str | os.PathLike[str]) -> list[Path]:
    """Committed checkpoints in ``directory``, oldest first (temporary files are ignored)."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := CHECKPOINT_NAME.match(p.name))]
    # A .dcp directory without meta.pt is not committed (renamed in place only when complete).
    found = [(n, p) for n, p in found if p.suffix == ".pt" or (p / "meta.pt").is_file()]
    return [p for _, p in sorted(found)]


def latest(directory: str | os.PathLike[str]) -> Path | None:
    """The newest checkpoint of the run that wrote last in ``directory``, or ``None``.

    With one run in the directory (what ``gpuspark train`` ensures) this is the highest
    step; where runs were mixed (library use), the run of the most recently written
    checkpoint wins, not a stale run with more steps."""
    found = list_checkpoints(directory)
    if len(found) < 2:
        return found[-1] if found else None
    last = max(found, key=_mtime)
    run = run_of(last)
    return [p for p in found if run_of(p) == run][-1]


def _mtime(p: Path) -> float:
    target = p / "meta.pt" if p.is_dir() else p
    try:
        return target.stat().st_mtime
    except OSError:
        return 0.0


def run_of(path: Path) -> str | None:
    """The ``run_id`` recorded in checkpoint ``path`` (``None``: none, or unreadable). The
    tensors are memory-mapped, not read; a committed checkpoint never changes, so each one is
    read once per process (every save prunes, and pruning asks every checkpoint)."""
    src = path / "meta.pt" if path.is_dir() else path
    try:
        info = src.stat()
    except OSError:
        return None
    return _recorded_run(str(src), info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=256)
def _recorded_run(src: str, _mtime_ns: int, _size: int) -> str | None:
    """The run id in the checkpoint file ``src`` as it was at that mtime and size."""
    import torch

    try:
        payload = torch.load(src, map_location="cpu", weights_only=False, mmap=True)
    except Exception:  # a damaged checkpoint: torch and pickle raise several types
        return None
    run = payload.get("run_id") if isinstance(payload, dict) else None
    return str(run) if run is not None else None


def prune(directory: str | os.PathLike[str], keep: int, *, run_id: str | None = None) -> None:
    """Remove all but the newest ``keep`` (at least 1) checkpoints of run ``run_id``, files or
    directories; another run's checkpoints (or an unreadable one) are never touched."""
    mine = [p for p in list_checkpoints(directory) if run_of(p) == run_id]
    for old in mine[: -max(1, keep)]:
        _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def run_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The files of a training run in ``directory``: checkpoints (and their temporary
    names), ``best.pt``, ``history.json``, ``mlflow-run.json``; sorted by name. Nothing else
    is a run's."""
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted(
        p
        for p in d.iterdir()
        if CHECKPOINT_NAME.match(p.name) or p.name in _RUN_FILES or _RUN_TEMP.match(p.name)
    )


def check_new_run(directory: str | os.PathLike[str], *, overwrite: bool, what: str) -> None:
    """Raise :class:`CheckpointError` when a new (not resumed) run would write into
    ``directory`` while it holds anything, unless ``overwrite``; ``what`` names the option
    (``--checkpoint-dir``). With ``overwrite`` only the run's own files are removed later
    (:func:`clear_run`); other files stay."""
    d = Path(directory)
    if overwrite or not d.is_dir():
        return
    names = sorted(p.name for p in d.iterdir())
    if not names:
        return
    ours = [p.name for p in run_files(d)]
    shown = ", ".join((ours or names)[:3]) + (" ..." if len(ours or names) > 3 else "")
    held = f"an earlier training run ({shown})" if ours else f"other files ({shown})"
    raise CheckpointError(
        f"{what} {d} already holds {held}; a new run would mix with it",
        remedy="pass --resume to continue that run, --overwrite to start a new one there "
        "(the earlier run's checkpoints, best.pt and history.json are removed, other files "
        f"stay), or choose an empty {what}",
    )


def clear_run(directory: str | os.PathLike[str]) -> list[str]:
    """Remove the files of an earlier run from ``directory`` (:func:`run_files`), nothing
    else; returns their names."""
    removed = []
    for p in run_files(directory):
        with writing(directory):
            _remove(p)
        removed.append(p.name)
    return removed


@contextlib.contextmanager
def writing(directory: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an ``OSError`` while writing into ``directory`` into a one-line
    :class:`CheckpointError` naming what to check."""
    try:
        yield
    except OSError as exc:
        raise CheckpointError(
            f"cannot write checkpoint to {directory}: {exc}",
            remedy="check the --checkpoint-dir path, its permissions and free space",
        ) from exc


def check_dir(directory: str | os.PathLike[str]) -> None:
    """Raise :class:`CheckpointError` unless ``directory`` is, or can become, a writable
    directory (a local path; URLs are left to the writer)."""

    problem = storage.directory_problem(directory)
    if problem is not None:
        raise CheckpointError(
            f"checkpoint directory {os.fspath(directory)} {problem.text}",
            remedy=f"{problem.remedy} (--checkpoint-dir is created when missing)",
        )
