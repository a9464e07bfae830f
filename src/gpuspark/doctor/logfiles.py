"""The log files ``doctor logs`` reads: which paths, and their bytes in blocks of whole lines.

A :class:`LogSource` is one file (plain or ``.gz``) or a text in memory. The matcher reads it
forward once in blocks of whole lines (:meth:`LogSource.blocks`, raw bytes: only the lines that
can matter are decoded), then the error tail is read from its end (:meth:`LogSource.suffix`).
Paths are checked before anything is read: a path that is not there, or that is not a regular
file or a directory (a FIFO, ``/dev/zero``), is refused with one line, and nothing ever opens a
FIFO (it would block).
"""

from __future__ import annotations

import gzip
import os
import stat
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gpuspark.errors import GpusparkError

__all__ = ["BLOCK", "LogSource", "check_paths", "log_sources"]

BLOCK = 4 << 20
"""Bytes read at a time (a block is cut back to its last whole line)."""
_BINARY_SUFFIXES = (".pkl", ".lz4", ".zstd", ".zst", ".snappy", ".lzf", ".parquet", ".pt")
_SNIFF = 8192
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}
_REMEDY = "pass log files or directories (driver log, event log dir, rank logs)"


@dataclass
class LogSource:
    """One log: a file (``path``) or a text in memory (``data``)."""

    name: str
    path: Path | None = None
    data: bytes | None = None
    size: int = 0
    """Bytes the forward pass read (the tail reads no further: a growing log stays put)."""
    lines: int = 0
    """Lines the forward pass counted."""

    @classmethod
    def from_text(cls, name: str, text: str) -> LogSource:
        """A source over ``text``."""
        return cls(name, data=text.encode("utf-8", "replace"))

    def _open(self) -> BinaryIO:
        import io

        if self.data is not None:
            return io.BytesIO(self.data)
        assert self.path is not None
        if self.path.suffix == ".gz":
            return gzip.open(self.path, "rb")  # type: ignore[return-value]
        return self.path.open("rb")

    def is_text(self) -> bool:
        """False for a file that is not text (a known binary suffix, or NUL bytes early on)."""
        if self.data is not None:
            return True
        if self.name.endswith(_BINARY_SUFFIXES):
            return False
        with self._open() as fh:
            return b"\0" not in fh.read(_SNIFF)

    def blocks(self) -> Iterator[tuple[int, bytes]]:
        """``(number of the first line, whole lines)`` from the start; sets :attr:`size` and
        :attr:`lines` when done. The last line gets a newline if it had none."""
        first, carry, size = 1, b"", 0
        with self._open() as fh:
            while chunk := fh.read(BLOCK):
                size += len(chunk)
                data = carry + chunk
                cut = data.rfind(b"\n") + 1
                carry, block = data[cut:], data[:cut]
                if block:
                    yield first, block
                    first += block.count(b"\n")
        if carry:
            yield first, carry + b"\n"
            first += 1
        self.size, self.lines = size, first - 1

    def suffix(self, span: int) -> tuple[int, bytes, bool]:
        """The whole lines within the last ``span`` bytes the forward pass read:
        ``(number of the first line, bytes, whether they start at the file's start)``."""
        start = max(0, self.size - span)
        data = self._tail_bytes(start)
        if start > 0:
            data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
        count = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        return self.lines - count + 1, data, start == 0

    def _tail_bytes(self, start: int) -> bytes:
        if self.data is not None:
            return self.data[start : self.size]
        with self._open() as fh:
            if isinstance(fh, gzip.GzipFile):  # no cheap seek back: stream, keep the end
                return _stream_tail(fh, self.size - start, self.size)
            fh.seek(start)
            return fh.read(self.size - start)


def _stream_tail(fh: BinaryIO, span: int, size: int) -> bytes:
    kept: deque[bytes] = deque()
    held = read = 0
    while read < size and (chunk := fh.read(min(BLOCK, size - read))):
        read += len(chunk)
        kept.append(chunk)
        held += len(chunk)
        while held - len(kept[0]) >= span:
            held -= len(kept.popleft())
    data = b"".join(kept)
    return data[len(data) - span :] if len(data) > span else data


def _kind(mode: int) -> str | None:
    """What a non-regular, non-directory file is (``None`` for a file or a directory)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _checked(path: Path) -> os.stat_result:
    """``path``'s status, or one line saying why it cannot be read as logs."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise GpusparkError(f"{path}: no such log file or directory", remedy=_REMEDY) from None
    except OSError as exc:
        raise GpusparkError(f"{path}: cannot be read ({exc.strerror})", remedy=_REMEDY) from None
    kind = _kind(st.st_mode)
    if kind is not None:
        raise GpusparkError(f"{path} is not a regular file ({kind})", remedy=_REMEDY)
    return st


def check_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The paths as :class:`~pathlib.Path`, each a log file or a directory, else one error
    naming the first that is not (missing, or a FIFO, a device, a socket)."""
    out = [Path(raw) for raw in paths]
    for path in out:
        _checked(path)
    return out


def log_sources(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[LogSource], list[str]]:
    """The files at ``paths`` (directories read recursively, in name order) as sources, and
    the entries of directories that are not regular files (skipped, never opened)."""
    sources: list[LogSource] = []
    skipped: list[str] = []
    for path in check_paths(paths):
        if not path.is_dir():
            sources.append(LogSource(str(path), path=path))
            continue
        for p in sorted(path.rglob("*")):
            try:
                mode = p.stat().st_mode
            except OSError:  # a dangling link, or gone since the listing
                skipped.append(str(p))
                continue
            if stat.S_ISREG(mode):
                sources.append(LogSource(str(p), path=p))
            elif not stat.S_ISDIR(mode):
                skipped.append(str(p))
    return sources, skipped
