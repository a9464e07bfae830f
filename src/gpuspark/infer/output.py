"""The predictions folder: written beside the destination, renamed into place when complete.

The folder holds Spark's Parquet part files, the quarantine table in ``_quarantine/`` and
:data:`MARKER` (what the job wrote and from what); Spark, pyarrow and pandas skip names
starting with ``_`` or ``.``, so reading the folder reads the predictions only. An existing
destination is refused unless ``overwrite``, and even then only a folder that ``predict``
wrote (its marker lists every file) is replaced: a user's folder is never emptied. The old
folder is moved aside and removed only after the new one is in place, so a failed run leaves
the old predictions as they were. (The same rule as ``gpuspark datasets``' generated folders.)
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark.errors import DatasetExistsError, GpusparkError

__all__ = ["MARKER", "QUARANTINE_DIR", "check_destination", "staged_output", "write_marker"]

MARKER = "_gpuspark-predict.json"
QUARANTINE_DIR = "_quarantine"
_SHOWN = 3


def check_destination(dst: str | os.PathLike[str], overwrite: bool, source: str | None) -> Path:
    """``dst`` as an absolute local path, refused now (before any Spark job) when it is a
    file, cannot be created, exists without ``overwrite``, is not a predictions folder, holds
    the current directory, or is (or holds, or lies in) the source."""
    text = os.fspath(dst)
    if storage.is_url(text):
        raise GpusparkError(
            f"destination {text} is a remote URL",
            remedy="write to a local or shared path (the folder is renamed into place)",
        )
    root = Path(os.path.abspath(os.path.expanduser(storage.local_path(text))))
    problem = storage.directory_problem(root)
    if problem is not None:
        raise GpusparkError(f"destination {text} {problem.text}", remedy=problem.remedy)
    if _overlaps(source, root):
        raise GpusparkError(
            f"destination {text} overlaps the input {source}",
            remedy="write the predictions to another folder",
        )
    _check_replaceable(root, overwrite)
    return root


def _overlaps(source: str | None, root: Path) -> bool:
    """Whether the local input ``source`` is, holds or lies in ``root``."""
    if source is None or storage.is_url(source):
        return False
    return storage.is_within(source, root) or storage.is_within(root, source)


def _check_replaceable(root: Path, overwrite: bool) -> None:
    if not root.is_dir() or not any(root.iterdir()):
        return
    if not overwrite:
        raise DatasetExistsError(
            f"destination {root} already exists and is not empty",
            remedy="choose another destination, or pass --overwrite (overwrite=True) to "
            "replace earlier predictions",
        )
    if _holds_cwd(root):
        raise DatasetExistsError(
            f"{root} is the current directory or holds it; --overwrite does not replace it",
            remedy="choose a new destination, e.g. a subfolder",
        )
    problem = _foreign_files(root)
    if problem:
        raise DatasetExistsError(
            f"{root} {problem}; --overwrite replaces only a folder gpuspark predict wrote, "
            "and nothing was changed",
            remedy="choose a new or empty destination, or remove that folder yourself",
        )


@contextmanager
def staged_output(root: Path, overwrite: bool) -> Iterator[Path]:
    """A new folder beside ``root`` to write into: when the block ends it replaces ``root``
    (with :data:`MARKER`: the caller's :func:`write_marker`, else one without a summary);
    when the block fails it is removed and ``root`` stays as it was."""
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_dir(root)
    try:
        yield tmp
        _commit(tmp, root, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _new_dir(root: Path) -> Path:
    # Not tempfile.mkdtemp: its 0700 would become the mode of the committed folder.
    while True:
        tmp = root.parent / f".{root.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir(0o777)
        except FileExistsError:
            continue
        return tmp


def write_marker(folder: Path, summary: dict[str, Any]) -> None:
    """:data:`MARKER`: ``summary`` and every file of ``folder`` (written last)."""
    files = sorted(_relative_files(folder))
    text = json.dumps({"command": "predict", **summary, "files": files}, indent=2, default=str)
    storage.atomic_write_text(folder / MARKER, text + "\n")


def _commit(tmp: Path, root: Path, overwrite: bool) -> None:
    """Move ``tmp`` into place; an old ``root`` is checked again (files may have appeared
    while the new one was written) and removed only after."""
    if not (tmp / MARKER).is_file():
        write_marker(tmp, {})
    _check_replaceable(root, overwrite)
    old = None
    if root.exists():
        old = root.with_name(f".{root.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
        os.replace(root, old)
    os.replace(tmp, root)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _relative_files(root: Path) -> list[str]:
    found = []
    for here, dirs, files in os.walk(root):
        rel = Path(here).relative_to(root)
        links = [d for d in dirs if os.path.islink(os.path.join(here, d))]
        found += [(rel / name).as_posix() for name in [*files, *links]]
    return found


def _foreign_files(root: Path) -> str | None:
    """Why ``root`` is not wholly a predictions folder, or ``None`` when it is."""
    present = [f for f in _relative_files(root) if f != MARKER]
    try:
        listed = set(json.loads((root / MARKER).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        shown = ", ".join(sorted(present)[:_SHOWN]) or "folders only"
        return f"was not written by gpuspark predict (no readable {MARKER}; it holds {shown})"
    extra = sorted(f for f in present if f not in listed)
    if extra:
        more = f" and {len(extra) - _SHOWN} more" if len(extra) > _SHOWN else ""
        return f"holds files gpuspark predict did not write ({', '.join(extra[:_SHOWN])}{more})"
    return None


def _holds_cwd(root: Path) -> bool:
    try:
        here = Path.cwd().resolve()
    except OSError:
        return False
    there = root.resolve()
    return here == there or there in here.parents
