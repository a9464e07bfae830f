"""The one rule for local paths vs fsspec URLs: test, join, open, list and write atomically.

A path is a **URL** when it starts with ``scheme://`` (optionally after fsspec chaining such as
``simplecache::``) and the scheme has two or more characters, so a Windows drive letter
(``C://data``) is a path. ``file:`` URLs name local files: :func:`local_path` turns
``file:///data/x``, ``file://localhost/data/x`` and Spark's ``file:/data/x`` into
``/data/x``. Local paths go to the standard library; URLs go to fsspec, imported only when
one is met. Nothing else in gpuspark decides what is local.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gpuspark.errors import GpusparkError

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "directory_problem",
    "display_name",
    "exists",
    "file_size",
    "filesystem",
    "folder_files",
    "foreign_files",
    "fresh_filesystem",
    "holds_cwd",
    "is_url",
    "is_within",
    "join",
    "list_dir",
    "local_path",
    "location",
    "new_dir_beside",
    "open_file",
    "swap_into_place",
    "write_file_list",
]

PathLike = str | os.PathLike[str]

_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]+::)*[A-Za-z][A-Za-z0-9+.-]+://")
_FILE = "file:"
_CHAIN = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]+::)+")
_URL_PARTS = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://([^/]*)(.*)$")
# schemes that name the same store (Hadoop's connectors and fsspec's aliases)
_SAME_STORE = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfss": "abfs", "wasbs": "wasb"}
_TMP_PREFIX = ".tmp-"  # the data writers treat names starting with this as leftovers


def is_url(path: PathLike) -> bool:
    """True for a remote (fsspec) URL such as ``s3://b/k`` or ``memory://x``; False for a
    plain path, a ``file:`` URL or a Windows drive (``C:\\x``, ``C://x``)."""
    text = os.fspath(path)
    return bool(_URL.match(text)) and not text.startswith(_FILE)


def local_path(uri: PathLike) -> str:
    """The local file path of a plain path or a ``file:`` URL (percent-escapes decoded).

    Raises :class:`~gpuspark.errors.GpusparkError` for a remote URL, which has no local path.
    """
    from urllib.parse import unquote

    text = os.fspath(uri)
    if is_url(text):
        raise GpusparkError(
            f"{text} is a remote URL, not a local path",
            remedy="use a local directory or a file:// URL here",
        )
    if not text.startswith(_FILE):
        return text
    rest = text[len(_FILE) :]
    if rest.startswith("//"):
        rest = rest[2:]
        if rest.startswith("localhost/"):
            rest = rest[len("localhost") :]
    return unquote(rest)


def join(base: PathLike, *parts: str) -> str:
    """``base`` joined with ``parts``: with ``/`` for a URL, ``os.path.join`` for a local
    path (a ``file:`` URL becomes its local path)."""
    text = os.fspath(base)
    if is_url(text):
        return "/".join([text.rstrip("/"), *parts])
    return os.path.join(local_path(text), *parts)


def location(path: PathLike, *, resolve: bool = False) -> str:
    """The canonical form of a local path or URL, for comparing where things are by string.

    A local path (or ``file:`` URL): absolute, ``~`` expanded, ``..`` and ``//`` folded; with
    ``resolve``, symbolic links too (:meth:`pathlib.Path.resolve`: ``a/link/../b`` is where the
    link leads). A URL: fsspec chaining (``simplecache::``) dropped, scheme and host in lower
    case, schemes of one store folded (``s3a``/``s3n`` -> ``s3``, ``gcs`` -> ``gs``,
    ``abfss`` -> ``abfs``), ``..`` folded in the path, no trailing ``/``.
    """
    import posixpath
    from pathlib import Path

    text = os.fspath(path)
    if not is_url(text):
        local = os.path.expanduser(local_path(text))
        return str(Path(local).resolve()) if resolve else os.path.abspath(local)
    parts = _URL_PARTS.match(_CHAIN.sub("", text))
    if parts is None:  # pragma: no cover - is_url matched the same form
        return text
    scheme, host, inner = parts.group(1).lower(), parts.group(2).lower(), parts.group(3)
    inner = posixpath.normpath("/" + inner.lstrip("/")) if inner.strip("/") else ""
    return f"{_SAME_STORE.get(scheme, scheme)}://{host}{inner.rstrip('/')}"


def is_within(path: PathLike, root: PathLike, *, resolve: bool = False) -> bool:
    """Whether ``path`` is ``root`` or lies below it, compared as :func:`location` forms
    (local paths by :meth:`pathlib.PurePath.is_relative_to`; a URL is never inside a local
    root, nor the other way round)."""
    from pathlib import PurePath

    where, top = location(path, resolve=resolve), location(root, resolve=resolve)
    if is_url(where) != is_url(top):
        return False
    if not is_url(where):
        return PurePath(where).is_relative_to(top)
    return where == top or where.startswith(top.rstrip("/") + "/")


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec file system of a URL and the path inside it (``fsspec.core.url_to_fs``)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def fresh_filesystem(url: str) -> tuple[Any, str]:
    """:func:`filesystem` with the cached listings of the path and its parents dropped: fsspec
    caches listings per process, and other processes (ranks, tasks) write the same prefixes,
    so a stale listing would hide their objects."""
    fs, path = filesystem(url)
    fs.invalidate_cache(path)
    return fs, path


def exists(path: PathLike) -> bool:
    """Whether a local path or URL exists (file or directory)."""
    text = os.fspath(path)
    if is_url(text):
        fs, inner = fresh_filesystem(text)
        return bool(fs.exists(inner))
    return os.path.exists(local_path(text))


def file_size(path: PathLike) -> int:
    """Size in bytes of a local file or of the object at a URL."""
    text = os.fspath(path)
    if is_url(text):
        fs, inner = fresh_filesystem(text)
        return int(fs.size(inner))
    return os.path.getsize(local_path(text))


def open_file(path: PathLike, mode: str = "rb") -> IO[Any]:
    """Open a local path (``open``) or a URL (``fsspec.open``); use it as a context manager."""
    text = os.fspath(path)
    if is_url(text):
        fs, inner = fresh_filesystem(text)
        handle: IO[Any] = fs.open(inner, mode)
        return handle
    return open(local_path(text), mode)


def list_dir(path: PathLike) -> list[str]:
    """Full paths (URLs for a URL) of the entries of a directory, sorted."""
    text = os.fspath(path)
    if not is_url(text):
        local = local_path(text)
        return sorted(os.path.join(local, name) for name in os.listdir(local))
    fs, inner = fresh_filesystem(text)
    names = [n for n in fs.ls(inner, detail=False) if n.rstrip("/") != inner.rstrip("/")]
    return sorted(fs.unstrip_protocol(n) for n in names)


def display_name(fileobj: Any) -> str | None:
    """The path or URL an open file came from (``name`` of a local file, ``path`` of an
    fsspec file), or ``None`` for an in-memory buffer; for error messages."""
    name = getattr(fileobj, "name", None)
    return name if isinstance(name, str) else getattr(fileobj, "path", None)


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one.

    Locally: a temporary file in the same directory, fsync, then ``os.replace``. The file is
    created with mode ``0o666`` so that the kernel applies the process umask, as for any
    file (``0644`` under umask ``022``), not the ``0600`` of ``tempfile.mkstemp``. On error
    the temporary file is removed. A URL is written in one ``pipe_file`` call: object stores
    make an object visible only once it is complete.
    """
    text = os.fspath(path)
    if is_url(text):
        fs, inner = filesystem(text)
        fs.pipe_file(inner, data)
        return
    final = local_path(text)
    # The random part goes last: a reader that lists the folder by pattern (Prometheus reads
    # file_sd ``*.json``, and Go's glob matches dot files) must never pick up a half-written
    # temporary file. The prefix marks it as a leftover for the data writers.
    tmp = os.path.join(
        os.path.dirname(os.path.abspath(final)),
        f"{_TMP_PREFIX}{os.path.basename(final)}.{uuid.uuid4().hex[:12]}",
    )
    try:
        _write_new(tmp, data)
        os.replace(tmp, final)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def atomic_write_text(path: PathLike, text: str, encoding: str = "utf-8") -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded with ``encoding``."""
    atomic_write_bytes(path, text.encode(encoding))


def _write_new(path: str, data: bytes) -> None:
    """Create ``path`` (it must not exist; mode 0o666 less the umask), write, fsync."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@dataclass(frozen=True)
class DirectoryProblem:
    """Why a local path cannot become a directory to write into; ``text`` follows the path
    in a message (``"<what> <path> <text>"``)."""

    text: str
    remedy: str


def directory_problem(path: PathLike) -> DirectoryProblem | None:
    """``None`` when ``path`` is a directory, or can be created because the nearest existing
    folder above it is a writable directory; else what is wrong. URLs are left to the writer."""
    text = os.fspath(path)
    if is_url(text):
        return None
    target = os.path.abspath(os.path.expanduser(local_path(text)))
    if os.path.exists(target):
        if os.path.isdir(target):
            return None
        return DirectoryProblem(
            "is a file, not a directory", "pass a directory, or remove the file"
        )
    parent = os.path.dirname(target)
    while not os.path.lexists(parent) and parent != os.path.dirname(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return DirectoryProblem(
            f"cannot be created: {parent} is a file, not a directory",
            "choose a path below a directory",
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        return DirectoryProblem(
            f"cannot be created: {parent} is not writable",
            "choose a path you can write to, or check the permissions",
        )
    return None


# -- folders a gpuspark command writes whole ------------------------------------------------
# Written beside the destination, listed in a marker file, renamed into place; replaced only
# when the marker lists every file in it (a folder of the user's is never emptied).
_SHOWN = 3


def new_dir_beside(dst: Path) -> Path:
    """A new empty folder beside ``dst`` to write into (mode from the umask)."""
    # Not tempfile.mkdtemp: its 0700 would become the mode of the committed folder.
    while True:
        tmp = dst.parent / f".{dst.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir(0o777)
        except FileExistsError:
            continue
        return tmp


def folder_files(root: Path) -> list[str]:
    """Every file and link under ``root`` (links to folders included, not followed)."""
    found = []
    for here, dirs, files in os.walk(root):
        rel = Path(here).relative_to(root)
        links = [d for d in dirs if os.path.islink(os.path.join(here, d))]
        found += [(rel / name).as_posix() for name in [*files, *links]]
    return found


def write_file_list(folder: Path, marker: str, payload: dict[str, Any]) -> None:
    """``folder/marker``: ``payload`` and every file of ``folder`` (write it last)."""
    files = sorted(folder_files(folder))
    text = json.dumps({**payload, "files": files}, indent=2, default=str)
    atomic_write_text(folder / marker, text + "\n")


def foreign_files(dst: Path, marker: str, writer: str) -> str | None:
    """Why ``dst`` is not wholly ``writer``'s output (no readable ``marker``, or files it
    does not list), or ``None`` when it is."""
    try:
        text: bytes | None = (dst / marker).read_bytes()
    except OSError:
        text = None
    return unlisted_files(folder_files(dst), text, marker, writer)


def unlisted_files(present: list[str], text: bytes | None, marker: str, writer: str) -> str | None:
    """Why a folder holding ``present`` (relative paths) whose ``marker`` reads ``text``
    (``None``: missing) is not wholly ``writer``'s output, or ``None`` when it is."""
    present = [f for f in present if f != marker]
    try:
        listed = set(json.loads(text or b"")["files"])
    except (ValueError, KeyError, TypeError):
        shown = ", ".join(sorted(present)[:_SHOWN]) or "folders only"
        return f"was not written by {writer} (no readable {marker}; it holds {shown})"
    extra = sorted(f for f in present if f not in listed)
    if extra:
        more = f" and {len(extra) - _SHOWN} more" if len(extra) > _SHOWN else ""
        return f"holds files {writer} did not write ({', '.join(extra[:_SHOWN])}{more})"
    return None


def holds_cwd(dst: Path) -> bool:
    """Whether ``dst`` is the current directory or holds it."""
    try:
        here = Path.cwd().resolve()
    except OSError:
        return False
    there = dst.resolve()
    return here == there or there in here.parents


def swap_into_place(tmp: Path, dst: Path) -> None:
    """Rename ``tmp`` to ``dst``; an old ``dst`` is moved aside first and removed after."""
    old = None
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
        os.replace(dst, old)
    os.replace(tmp, dst)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
