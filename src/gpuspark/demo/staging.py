"""Writing a generated directory so that it appears complete or not at all."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from gpuspark import storage
from gpuspark.errors import DatasetExistsError, GpusparkError

__all__ = ["check_output_dir", "commit_dir", "staging_dir"]


def check_output_dir(dst: Path, what: str = "destination") -> None:
    """Refuse now a ``dst`` that is a file, or that cannot be created because the nearest
    existing folder above it is a file or is not writable."""
    problem = storage.directory_problem(dst)
    if problem is None:
        return
    error = DatasetExistsError if dst.exists() else GpusparkError
    raise error(f"{what} {dst} {problem.text}", remedy=problem.remedy)


def staging_dir(dst: Path, overwrite: bool) -> Path:
    """A new temporary directory beside ``dst`` to write into, then :func:`commit_dir`.

    Raises :class:`DatasetExistsError` when ``dst`` is a non-empty directory and not
    ``overwrite``.
    """
    check_output_dir(dst)
    if dst.exists() and any(dst.iterdir()) and not overwrite:
        raise DatasetExistsError(
            f"{dst} already exists and is not empty",
            remedy="choose another destination or pass overwrite=True (--overwrite)",
        )
    dst.parent.mkdir(parents=True, exist_ok=True)
    # Not tempfile.mkdtemp: its 0700 would become the mode of the committed directory.
    # os.mkdir with 0o777 lets the umask decide, as for any directory a tool creates.
    while True:
        tmp = dst.parent / f".{dst.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir(0o777)
        except FileExistsError:
            continue
        return tmp


def commit_dir(tmp: Path, dst: Path) -> None:
    """Move a finished directory into place; an old one is removed only afterwards."""
    old = None
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        os.replace(dst, old)
    os.replace(tmp, dst)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
