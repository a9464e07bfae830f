"""Explain a failed job: match its logs against the catalogue of known failures.

:func:`diagnose` reads files and directories (driver and executor logs, Spark event logs,
the rank logs gpuspark keeps with ``GPUSPARK_KEEP_LOGS=1``: ``rank-N.log``,
``rank-N.error.json``) and returns a :class:`Diagnosis`: one :class:`Finding` per known
message (where, which rank or host, the figures the message carries, the cause and the fix),
or, when nothing is known, the last lines that look like errors.

JSON lines (Spark event logs, gpuspark's error files) are read value by value: every string
in the record is matched line by line, so a stack trace inside ``"Full Stack Trace"`` or a
``"Failure Reason"`` is found like a line of a plain log. A gpuspark rank error file also
yields the line the driver prints for it (``rank N failed: Type: message``).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gpuspark.doctor.catalogue import Catalogue, Entry, load_catalogue
from gpuspark.errors import GpusparkError

__all__ = ["Diagnosis", "ErrorLine", "Finding", "diagnose", "diagnose_text"]

ERROR_TAIL = 10
"""How many error-looking lines an unexplained diagnosis shows."""
_EXCERPT = 400
_BINARY_SUFFIXES = (".pkl", ".lz4", ".zstd", ".zst", ".snappy", ".lzf", ".parquet", ".pt")
_ERRORISH = re.compile(r"(?i)(error|exception|traceback|fatal|fail|killed|timed out|refused|abort)")
_RANK_PREFIX = re.compile(r"^\[rank ?(\d+)\]:?")
_RANK_FILE = re.compile(r"(?:^|[-_/])rank-?(\d+)(?:\.|$)")
_NCCL_HOST = re.compile(r"^(?P<host>[\w.-]+):\d+:\d+ \[\d+\] NCCL ")


@dataclass
class Finding:
    """One known message found in the logs."""

    entry: Entry
    file: str
    line: int
    excerpt: str
    values: dict[str, str | None] = field(default_factory=dict)
    rank: int | None = None
    host: str | None = None
    count: int = 1
    """How many times the entry matched (with ``every``: 1 per finding)."""

    @property
    def cause(self) -> str:
        """The likely cause, with the figures filled in."""
        return self.entry.cause_for(self.values)

    @property
    def fixes(self) -> list[str]:
        """The fix, then the hints that apply to these figures."""
        return self.entry.fixes_for(self.values)

    @property
    def where(self) -> str:
        """``file:line`` plus rank and host when known."""
        extra = [f"rank {self.rank}"] if self.rank is not None else []
        extra += [f"host {self.host}"] if self.host else []
        return f"{self.file}:{self.line}" + (f" ({', '.join(extra)})" if extra else "")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "id": self.entry.id,
            "title": self.entry.title,
            "source": self.entry.source,
            "file": self.file,
            "line": self.line,
            "rank": self.rank,
            "host": self.host,
            "count": self.count,
            "values": {k: v for k, v in self.values.items() if v is not None},
            "excerpt": self.excerpt,
            "cause": self.cause,
            "fix": self.fixes,
            "doc": self.entry.doc,
        }


@dataclass(frozen=True)
class ErrorLine:
    """A line that looks like an error, shown when no known problem explains the logs."""

    file: str
    line: int
    text: str


@dataclass
class Diagnosis:
    """What :func:`diagnose` found."""

    findings: list[Finding]
    files: list[str]
    lines: int
    error_lines: list[ErrorLine]
    skipped: list[str] = field(default_factory=list)
    """Files not read (binary or compressed in a form gpuspark does not read)."""

    @property
    def known(self) -> bool:
        """Whether any known problem was found."""
        return bool(self.findings)

    def ids(self) -> list[str]:
        """The entry ids found, in order."""
        return [f.entry.id for f in self.findings]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "known": self.known,
            "findings": [f.as_dict() for f in self.findings],
            "files": self.files,
            "lines": self.lines,
            "error_lines": [e.__dict__ for e in self.error_lines],
            "skipped": self.skipped,
        }


# --------------------------------------------------------------------------- reading


def _files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            yield path
        else:
            raise GpusparkError(
                f"{path}: no such log file or directory",
                remedy="pass log files or directories (driver log, event log dir, rank logs)",
            )


def _open(path: Path) -> TextIO | None:
    """A text stream over the file, or ``None`` for a file that is not text."""
    if path.name.endswith(_BINARY_SUFFIXES):
        return None
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    with path.open("rb") as fh:
        if b"\0" in fh.read(8192):
            return None
    return path.open(encoding="utf-8", errors="replace")


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _strings(value)


def _json_texts(obj: Any) -> Iterator[str]:
    """The lines inside one JSON record; a rank error file also gives the driver's line."""
    if isinstance(obj, dict) and {"rank", "type", "message"} <= obj.keys():
        yield f"rank {obj['rank']} failed: {obj['type']}: {obj['message']}"
    for text in _strings(obj):
        yield from text.splitlines()


def _texts(line: str) -> Iterator[str]:
    stripped = line.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        try:
            yield from _json_texts(json.loads(stripped))
            return
        except ValueError:
            pass
    yield line.rstrip("\r\n")


def _lines(stream: TextIO) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(stream, 1):
        for text in _texts(line):
            yield n, text


# --------------------------------------------------------------------------- matching


def _rank_host(
    text: str, name: str, values: dict[str, str | None]
) -> tuple[int | None, str | None]:
    rank: int | None = None
    if values.get("rank") is not None:
        rank = int(str(values["rank"]))
    elif (m := _RANK_PREFIX.match(text)) or (m := _RANK_FILE.search(name)):
        rank = int(m.group(1))
    host = values.get("host")
    if host is None and (m := _NCCL_HOST.match(text)):
        host = m.group("host")
    return rank, host


class _Matcher:
    """Matches lines; keeps findings (first per entry, or every one) and the error tail."""

    def __init__(self, cat: Catalogue, network: str | None, every: bool) -> None:
        self.cat = cat
        self.entries = [e for e in cat.entries if e.network is None or e.network == network]
        self.every = every
        self.findings: list[Finding] = []
        self.first: dict[str, Finding] = {}
        self.error_lines: list[ErrorLine] = []
        self.lines = 0

    def line(self, name: str, n: int, text: str) -> None:
        self.lines += 1
        hits = [(e, m) for e in self.entries if (m := e.pattern.search(text))]
        ids = {e.id for e, _ in hits}
        for entry, match in hits:
            if not ids.intersection(entry.superseded_by):
                self._add(entry, match, name, n, text)
        if _ERRORISH.search(text):
            self.error_lines = [*self.error_lines[-(ERROR_TAIL - 1) :], ErrorLine(name, n, text)]

    def _add(self, entry: Entry, match: re.Match[str], name: str, n: int, text: str) -> None:
        if not self.every and entry.id in self.first:
            self.first[entry.id].count += 1
            return
        values = self.cat.enrich(dict(match.groupdict()))
        rank, host = _rank_host(text, name, values)
        excerpt = text.strip()
        if len(excerpt) > _EXCERPT:
            start = max(0, match.start() - 100)
            excerpt = "…" + text[start : start + _EXCERPT].strip() + "…"
        finding = Finding(entry, name, n, excerpt, values, rank, host)
        self.findings.append(finding)
        self.first.setdefault(entry.id, finding)


def diagnose(
    paths: Iterable[str | os.PathLike[str]],
    *,
    network: str | None = None,
    every: bool = False,
    catalogue: Catalogue | None = None,
) -> Diagnosis:
    """Match every line of the logs at ``paths`` (files or directories, read recursively)
    against the catalogue.

    ``network`` is the cluster's compute network (``"infiniband"`` / ``"ethernet"``, from the
    spec): entries that only mean something on one kind are reported only then. ``every``
    lists each occurrence; by default each entry is reported once, at its first line, with a
    count. A path that does not exist raises :class:`~gpuspark.errors.GpusparkError`.
    """
    matcher = _Matcher(catalogue or load_catalogue(), network, every)
    files: list[str] = []
    skipped: list[str] = []
    for path in _files(paths):
        stream = _open(path)
        if stream is None:
            skipped.append(str(path))
            continue
        files.append(str(path))
        with stream:
            for n, text in _lines(stream):
                matcher.line(str(path), n, text)
    return Diagnosis(matcher.findings, files, matcher.lines, matcher.error_lines, skipped)


def diagnose_text(
    text: str,
    name: str = "<text>",
    *,
    network: str | None = None,
    every: bool = False,
    catalogue: Catalogue | None = None,
) -> Diagnosis:
    """:func:`diagnose` for log text already in memory (an exception message, an excerpt)."""
    import io

    matcher = _Matcher(catalogue or load_catalogue(), network, every)
    for n, line in _lines(io.StringIO(text)):
        matcher.line(name, n, line)
    return Diagnosis(matcher.findings, [name], matcher.lines, matcher.error_lines)
