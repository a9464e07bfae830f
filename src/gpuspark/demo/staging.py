"""Writing a generated directory so that it appears complete or not at all, and replacing
only what a generator wrote.

Every directory a ``gpuspark datasets`` generator commits carries :data:`MARKER`, a small
JSON file naming the command and every file it wrote. ``overwrite`` replaces a directory only
when it carries the marker and holds nothing else: a folder of the user's (``.``, a home, a
project) is refused with one line, never emptied. The new directory is written beside the
old one and renamed into place; the old one is removed only after that.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

from gpuspark import storage
from gpuspark.errors import DatasetExistsError, GpusparkError

__all__ = ["MARKER", "check_output_dir", "commit_dir", "output_path", "staging_dir"]

MARKER = ".gpuspark-generated.json"
"""The file that marks a directory as written by a ``gpuspark datasets`` command."""
_SHOWN = 3


def output_path(dst: str | os.PathLike[str]) -> Path:
    """``dst`` as an absolute, normalised local path (``.`` and ``..`` resolved by name)."""
    return Path(os.path.abspath(os.path.expanduser(storage.local_path(os.fspath(dst)))))


def check_output_dir(dst: Path, what: str = "destination") -> None:
    """Refuse now a ``dst`` that is a file, or that cannot be created because the nearest
    existing folder above it is a file or is not writable."""
    problem = storage.directory_problem(dst)
    if problem is None:
        return
    error = DatasetExistsError if dst.exists() else GpusparkError
    raise error(f"{what} {dst} {problem.text}", remedy=problem.remedy)


def staging_dir(dst: str | os.PathLike[str], overwrite: bool) -> Path:
    """A new temporary directory beside ``dst`` to write into, then :func:`commit_dir`.

    Raises :class:`DatasetExistsError` when ``dst`` is a non-empty directory and not
    ``overwrite``, and, with ``overwrite``, when ``dst`` is not wholly a generator's output
    (see :data:`MARKER`) or holds the current directory.
    """
    dst = output_path(dst)
    check_output_dir(dst)
    check_replaceable(dst, overwrite)
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


def check_replaceable(dst: Path, overwrite: bool) -> None:
    """Raise :class:`DatasetExistsError` unless ``dst`` is missing, empty, or (with
    ``overwrite``) a generator's output holding only the files it wrote."""
    if not dst.is_dir() or not any(dst.iterdir()):
        return
    if not overwrite:
        raise DatasetExistsError(
            f"{dst} already exists and is not empty",
            remedy="choose another destination or pass overwrite=True (--overwrite)",
        )
    if _holds_cwd(dst):
        raise DatasetExistsError(
            f"{dst} is the current directory or holds it; --overwrite does not replace it",
            remedy="choose a new destination, e.g. a subfolder",
        )
    problem = _foreign_files(dst)
    if problem:
        raise DatasetExistsError(
            f"{dst} {problem}; --overwrite replaces only a folder that a gpuspark datasets "
            "command wrote, and nothing was changed",
            remedy="choose a new or empty destination, or remove that folder yourself",
        )


def commit_dir(tmp: Path, dst: str | os.PathLike[str], command: str = "datasets") -> None:
    """Mark ``tmp`` as ``command``'s output and move it into place; an old ``dst`` is checked
    again (files may have appeared while the new one was written) and removed only after."""
    dst = output_path(dst)
    _write_marker(tmp, command)
    check_replaceable(dst, overwrite=True)
    old = None
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
        os.replace(dst, old)
    os.replace(tmp, dst)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_marker(root: Path, command: str) -> None:
    files = sorted(_relative_files(root))
    storage.atomic_write_text(root / MARKER, json.dumps({"command": command, "files": files}))


def _relative_files(root: Path) -> list[str]:
    """Every file and link under ``root`` (links to folders included, not followed)."""
    found = []
    for here, dirs, files in os.walk(root):
        rel = Path(here).relative_to(root)
        links = [d for d in dirs if os.path.islink(os.path.join(here, d))]
        found += [(rel / name).as_posix() for name in [*files, *links]]
    return found


def _foreign_files(dst: Path) -> str | None:
    """Why ``dst`` is not wholly a generator's output, or ``None`` when it is."""
    present = [f for f in _relative_files(dst) if f != MARKER]
    try:
        listed = set(json.loads((dst / MARKER).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        shown = ", ".join(sorted(present)[:_SHOWN]) or "folders only"
        return f"was not written by gpuspark (no readable {MARKER}; it holds {shown})"
    extra = sorted(f for f in present if f not in listed)
    if extra:
        more = f" and {len(extra) - _SHOWN} more" if len(extra) > _SHOWN else ""
        return f"holds files gpuspark did not write ({', '.join(extra[:_SHOWN])}{more})"
    return None


def _holds_cwd(dst: Path) -> bool:
    try:
        here = Path.cwd().resolve()
    except OSError:
        return False
    there = dst.resolve()
    return here == there or there in here.parents
