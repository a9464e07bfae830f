"""Writing a generated directory so that it appears complete or not at all, and replacing
only what a generator wrote.

Every directory a ``gpuspark datasets`` generator commits carries :data:`MARKER`, a small
JSON file naming the command and every file it wrote. ``overwrite`` replaces a directory only
when it carries the marker and holds nothing else: a folder of the user's (``.``, a home, a
project) is refused with one line, never emptied. The new directory is written beside the
old one and renamed into place; the old one is removed only after that.

A URL destination (``s3://bucket/raw``) is written in a local temporary folder, then uploaded
file by file with the marker last; the earlier output's objects that the new marker does not
list are removed after it (an object store has no folder rename).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from gpuspark import storage
from gpuspark.errors import DatasetExistsError, GpusparkError

__all__ = ["MARKER", "check_output_dir", "commit_dir", "output_path", "staging_dir"]

MARKER = ".gpuspark-generated.json"
"""The file that marks a directory as written by a ``gpuspark datasets`` command."""


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
    if storage.is_url(os.fspath(dst)):
        url = _url(dst)
        storage.check_writable(str(url), "destination")
        check_replaceable(url, overwrite)
        return Path(tempfile.mkdtemp(prefix="gpuspark-generated-"))
    dst = output_path(dst)
    check_output_dir(dst)
    check_replaceable(dst, overwrite)
    dst.parent.mkdir(parents=True, exist_ok=True)
    return storage.new_dir_beside(dst)


def _url(dst: str | os.PathLike[str]) -> storage.RemotePath:
    return storage.RemotePath(storage.location(os.fspath(dst)))


def check_replaceable(dst: storage.Location, overwrite: bool) -> None:
    """Raise :class:`DatasetExistsError` unless ``dst`` (a folder, or a URL's prefix) is
    missing, empty, or (with ``overwrite``) a generator's output holding only the files it
    wrote."""
    if not storage.names(dst):
        return
    if not overwrite:
        raise DatasetExistsError(
            f"{dst} already exists and is not empty",
            remedy="choose another destination or pass --overwrite (overwrite=True)",
        )
    if isinstance(dst, Path) and storage.holds_cwd(dst):
        raise DatasetExistsError(
            f"{dst} is the current directory or holds it; --overwrite does not replace it",
            remedy="choose a new destination, e.g. a subfolder",
        )
    problem = storage.foreign_files_at(dst, MARKER, "gpuspark")
    if problem:
        raise DatasetExistsError(
            f"{dst} {problem}; --overwrite replaces only a folder that a gpuspark datasets "
            "command wrote, and nothing was changed",
            remedy="choose a new or empty destination, or remove that folder yourself",
        )


def commit_dir(tmp: Path, dst: str | os.PathLike[str], command: str = "datasets") -> None:
    """Mark ``tmp`` as ``command``'s output and move it into place; an old ``dst`` is checked
    again (files may have appeared while the new one was written) and removed only after."""
    storage.write_file_list(tmp, MARKER, {"command": command})
    if storage.is_url(os.fspath(dst)):
        _commit_remote(tmp, _url(dst))
        return
    dst = output_path(dst)
    check_replaceable(dst, overwrite=True)
    storage.swap_into_place(tmp, dst)


def _commit_remote(tmp: Path, url: storage.RemotePath) -> None:
    """Upload ``tmp`` below ``url`` (marker last), drop the earlier output's other objects,
    remove ``tmp``."""
    old = storage.files_below(url)
    if old:
        check_replaceable(url, overwrite=True)
    new = storage.upload_tree(tmp, url, last=MARKER)
    for rel in sorted(set(old) - set(new)):
        storage.remove(url / rel)
    shutil.rmtree(tmp, ignore_errors=True)
