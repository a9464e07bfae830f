"""Checks of option values that the commands run before any work starts."""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path

from gpuspark.errors import GpusparkError

__all__ = ["check_output_file"]


def check_output_file(path: Path, option: str) -> None:
    """Refuse, with one line, a file option the command could not write at the end: a
    directory, or a name whose folder is missing, is a file, or takes no new file (tried by
    creating and removing one: permission bits say nothing for root, nor for a read-only
    mount)."""
    target = Path(os.path.abspath(os.path.expanduser(path)))
    if target.is_dir():
        raise GpusparkError(
            f"{option} {path} is a directory, not a file", remedy="name a file in it"
        )
    folder = target.parent
    if not folder.is_dir():
        blocker = _first_non_folder(folder)
        remedy = "name a file in an existing folder"
        if os.path.lexists(blocker):
            what = f"{blocker} is a file"
        else:
            what = f"{folder} does not exist"
            remedy = f"create it first with mkdir -p {shlex.quote(str(folder))}, or {remedy}"
        raise GpusparkError(f"{option} {path}: no folder to write in ({what})", remedy=remedy)
    problem = _write_problem(folder)
    if problem is not None:
        raise GpusparkError(
            f"{option} {path}: cannot write in {folder} ({problem})",
            remedy="name a file in a folder you can write to",
        )


def _first_non_folder(folder: Path) -> Path:
    """The first of ``folder``'s parents, top down, or ``folder``, that is not a directory."""
    return next(p for p in (*reversed(folder.parents), folder) if not p.is_dir())


def _write_problem(folder: Path) -> str | None:
    """Why no new file can be made in ``folder`` (the OS's words), or ``None``."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".gpuspark-write-check-", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(probe)
    return None
