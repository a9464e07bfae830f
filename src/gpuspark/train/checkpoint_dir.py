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
import io
import os
import re
from collections.abc import Iterator
from typing import Any

from gpuspark import storage
from gpuspark.errors import CheckpointError, GpusparkError
from gpuspark.storage import Location

__all__ = [
    "CHECKPOINT_NAME",
    "check_dir",
    "check_new_run",
    "clear_run",
    "latest",
    "list_checkpoints",
    "load_payload",
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


Where = str | os.PathLike[str] | storage.RemotePath
"""A checkpoint directory or file: a local path or a URL (``s3://bucket/run``)."""


def list_checkpoints(directory: Where) -> list[Location]:
    """Committed checkpoints in ``directory`` (a local path or a URL), oldest first
    (temporary files are ignored): a :class:`~pathlib.Path` each, or a
    :class:`~gpuspark.storage.RemotePath` for a URL."""
    d = storage.as_path(directory)
    found = [
        (int(m.group(1)), d / name)
        for name in storage.names(d)
        if (m := CHECKPOINT_NAME.match(name))
    ]
    # A .dcp directory without meta.pt is not committed (its meta.pt is written last).
    found = [(n, p) for n, p in found if p.suffix == ".pt" or storage.is_file(p / "meta.pt")]
    return [p for _, p in sorted(found, key=lambda item: item[0])]


def latest(directory: Where) -> Location | None:
    """The newest checkpoint of the run that wrote last in ``directory``, or ``None``.

    With one run in the directory (what ``gpuspark train`` ensures) this is the highest
    step; where runs were mixed (library use), the run of the most recently written
    checkpoint wins, not a stale run with more steps."""
    found = list_checkpoints(directory)
    if len(found) < 2:
        return found[-1] if found else None
    # the newest write wins; an object store keeps whole seconds, so ties go to the step
    last = max(enumerate(found), key=lambda item: (_mtime(item[1]), item[0]))[1]
    run = run_of(last)
    return [p for p in found if run_of(p) == run][-1]


def _mtime(p: Location) -> float:
    return storage.modified(p / "meta.pt" if p.suffix == ".dcp" else p)


def run_of(path: Location) -> str | None:
    """The ``run_id`` recorded in checkpoint ``path`` (``None``: none, or unreadable). The
    tensors are memory-mapped, not read (a URL's object is read whole); a committed
    checkpoint never changes, so each one is read once per process (every save prunes, and
    pruning asks every checkpoint)."""
    src = path / "meta.pt" if path.suffix == ".dcp" else path
    stamp = storage.modified(src)
    if not stamp:
        return None
    return _recorded_run(storage.text_of(src), stamp)


@functools.lru_cache(maxsize=256)
def _recorded_run(src: str, _mtime: float) -> str | None:
    """The run id in the checkpoint file ``src`` as it was at that modification time."""
    try:
        payload = load_payload(storage.as_path(src), mmap=True)
    except Exception:  # a damaged checkpoint: torch and pickle raise several types
        return None
    run = payload.get("run_id") if isinstance(payload, dict) else None
    return str(run) if run is not None else None


def load_payload(src: Location, *, mmap: bool = False) -> Any:
    """``torch.load`` of a checkpoint file on the CPU: memory-mapped when ``mmap`` and local,
    read whole from a URL."""
    import torch

    if isinstance(src, storage.RemotePath):
        return torch.load(
            io.BytesIO(storage.read_bytes(src)), map_location="cpu", weights_only=False
        )
    return torch.load(src, map_location="cpu", weights_only=False, mmap=mmap)


def prune(directory: Where, keep: int, *, run_id: str | None = None) -> None:
    """Remove all but the newest ``keep`` (at least 1) checkpoints of run ``run_id``, files or
    directories; another run's checkpoints (or an unreadable one) are never touched."""
    mine = [p for p in list_checkpoints(directory) if run_of(p) == run_id]
    for old in mine[: -max(1, keep)]:
        storage.remove(old)


def run_files(directory: Where) -> list[Location]:
    """The files of a training run in ``directory``: checkpoints (and their temporary
    names), ``best.pt``, ``history.json``, ``mlflow-run.json``; sorted by name. Nothing else
    is a run's."""
    d = storage.as_path(directory)
    return [
        d / name
        for name in storage.names(d)
        if CHECKPOINT_NAME.match(name) or name in _RUN_FILES or _RUN_TEMP.match(name)
    ]


def check_new_run(directory: Where, *, overwrite: bool, what: str) -> None:
    """Raise :class:`CheckpointError` when a new (not resumed) run would write into
    ``directory`` while it holds anything, unless ``overwrite``; ``what`` names the option
    (``--checkpoint-dir``). With ``overwrite`` only the run's own files are removed later
    (:func:`clear_run`); other files stay."""
    if overwrite:
        return
    d = storage.as_path(directory)
    names = storage.names(d)
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


def clear_run(directory: Where) -> list[str]:
    """Remove the files of an earlier run from ``directory`` (:func:`run_files`), nothing
    else; returns their names."""
    removed = []
    for p in run_files(directory):
        with writing(directory):
            storage.remove(p)
        removed.append(p.name)
    return removed


@contextlib.contextmanager
def writing(directory: Where) -> Iterator[None]:
    """Turn an ``OSError`` while writing into ``directory`` into a one-line
    :class:`CheckpointError` naming what to check."""
    try:
        yield
    except OSError as exc:
        raise CheckpointError(
            f"cannot write checkpoint to {storage.text_of(directory)}: {exc}",
            remedy="check the --checkpoint-dir path, its permissions and free space",
        ) from exc


def check_dir(directory: Where, what: str = "--checkpoint-dir") -> None:
    """Raise :class:`CheckpointError` unless ``directory`` is, or can become, a writable
    directory: a local path, or a URL whose store client is installed and where an object
    can be written (:func:`gpuspark.storage.check_writable`)."""
    text = storage.text_of(directory)
    if storage.is_url(text):
        try:
            storage.check_writable(text, what)
        except GpusparkError as exc:
            raise CheckpointError(exc.message, remedy=exc.remedy) from exc
        return
    problem = storage.directory_problem(text)
    if problem is not None:
        raise CheckpointError(
            f"checkpoint directory {text} {problem.text}",
            remedy=f"{problem.remedy} (--checkpoint-dir is created when missing)",
        )
