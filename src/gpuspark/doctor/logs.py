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

Speed: each entry has *anchors* (literal texts every match holds, see
:mod:`gpuspark.doctor.anchors`); a block of a file is searched for them with ``bytes.find``, and
only lines holding one are decoded and matched. The error tail is read from the end of the
last files, not from every line. Lines logged at INFO, DEBUG or TRACE, and log4j configuration
text, are never error lines.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuspark.doctor.catalogue import Catalogue, Entry, load_catalogue
from gpuspark.doctor.logfiles import LogSource, log_sources

__all__ = ["Diagnosis", "ErrorLine", "Finding", "diagnose", "diagnose_text"]

ERROR_TAIL = 10
"""How many error-looking lines an unexplained diagnosis shows."""
_EXCERPT = 400
_ERROR_WORDS = ("error", "exception", "traceback", "fatal", "fail", "killed", "timed out",
                "refused", "abort")  # fmt: skip
_ERRORISH = re.compile("(?i)" + "|".join(_ERROR_WORDS))
_ERROR_BYTES = tuple(w.encode() for w in _ERROR_WORDS)
_RANK_TAG = r"(?:\[rank ?\d+\]:?\s*)?"
_QUIET = re.compile(
    _RANK_TAG + r"(?:(?:(?!(?:ERROR|WARN|WARNING|FATAL|SEVERE)\b)\S*[^\s:]\s+){0,3}?"
    r"(?:INFO|DEBUG|TRACE)\b|\[?[ID]\d{4} \d\d:\d\d:\d\d)"
)
"""A line logged at INFO, DEBUG or TRACE (log4j, Python logging, NCCL, glog's I/D prefix):
the level within the first words, none of which ends with ":" ("ValueError: INFO ...")."""
_QUIET_LEVELS = {"INFO", "DEBUG", "TRACE"}
_CONFIG = re.compile(
    r"\s*(?:rootLogger|rootCategory|appender|logger|status|filter|property|log4j)[\w.$-]*\s*="
)
"""A line of a log4j (1 or 2) properties file."""
_COMMENT = re.compile(r"\s*[#!]")
_TAIL_SPAN = 1 << 18
"""Bytes from a file's end first read for its error tail (grown until the tail is full)."""
_RANK_RECORD = b'"rank"'
"""In a block: maybe a gpuspark rank error record, whose driver line every entry may match."""
_JOIN_IDS = ("torch-rank-never-joined", "torch-store-clients-missing")
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
    """Files not read: binary, compressed in a form gpuspark does not read, or in a directory
    but not a regular file (a FIFO, a socket, a device, a dangling link)."""

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


# --------------------------------------------------------------------------- lines


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


def _record(line: str) -> Any:
    """The JSON value of a line that holds one record, else ``None``."""
    stripped = line.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        try:
            return json.loads(stripped)
        except ValueError:
            return None
    return None


def _texts(line: str) -> Iterator[str]:
    record = _record(line)
    if record is None:
        yield line
    else:
        yield from _json_texts(record)


def _quiet_record(record: Any) -> bool:
    """A structured log record (Spark's JSON layout, JSON loggers) at INFO or below."""
    if not isinstance(record, dict):
        return False
    level = record.get("level", record.get("levelname", record.get("severity")))
    return str(level).upper() in _QUIET_LEVELS


def _leveled_texts(line: str) -> Iterator[tuple[str, bool]]:
    """``(text, quiet)`` for each text of ``line``: quiet when logged at INFO or below."""
    record = _record(line)
    if record is None:
        yield line, bool(_QUIET.match(line))
        return
    quiet = _quiet_record(record)
    for text in _json_texts(record):
        yield text, quiet


def _line_at(data: bytes, start: int) -> tuple[str, int]:
    """The line of ``data`` that starts at ``start`` (decoded) and the offset of its end."""
    end = data.find(b"\n", start)
    end = len(data) if end < 0 else end
    return data[start:end].decode("utf-8", "replace").rstrip("\r"), end


def _starts(data: bytes, needles: Iterable[bytes], low: bytes | None = None) -> set[int]:
    """Where the lines of ``data`` that hold any of ``needles`` start (searched in ``low``,
    e.g. ``data.lower()``, when given)."""
    hay = data if low is None else low
    out: set[int] = set()
    for needle in needles:
        pos = hay.find(needle)
        while pos >= 0:
            start = hay.rfind(b"\n", 0, pos) + 1
            out.add(start)
            end = hay.find(b"\n", pos)
            pos = -1 if end < 0 else hay.find(needle, end)
    return out


def _numbered(data: bytes, first: int, starts: Iterable[int]) -> Iterator[tuple[int, int]]:
    """``(line number, start)`` for the line starts, in order (``first``: data's first line)."""
    n, prev = first, 0
    for start in sorted(starts):
        n += data.count(b"\n", prev, start)
        prev = start
        yield n, start


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
    """Matches lines; keeps findings (first per entry, or every one)."""

    def __init__(self, cat: Catalogue, network: str | None, every: bool) -> None:
        self.cat = cat
        self.entries = [e for e in cat.entries if e.network is None or e.network == network]
        self.anchored = [e for e in self.entries if e.anchors]
        self.unanchored = [e for e in self.entries if not e.anchors]
        self.needles: dict[bytes, list[Entry]] = {}
        for e in self.anchored:
            for a in e.anchors or ():
                self.needles.setdefault(a.encode(), []).append(e)
        self.every = every
        self.findings: list[Finding] = []
        self.first: dict[str, Finding] = {}

    def source(self, src: LogSource) -> None:
        """Match every line of ``src``."""
        for first, block in src.blocks():
            self.block(src.name, first, block)

    def block(self, name: str, first: int, data: bytes) -> None:
        """Match the whole lines of ``data``, whose first line is line ``first``: only the
        lines that hold an anchor (every line when an entry has none)."""
        present = [needle for needle in self.needles if needle in data]
        record = _RANK_RECORD in data  # its driver line may match any entry
        starts: Iterable[int]
        if self.unanchored:
            candidates, starts = self.entries, _all_starts(data)
        elif record:
            candidates, starts = self.entries, _starts(data, [*present, _RANK_RECORD])
        else:
            found = {id(e): e for needle in present for e in self.needles[needle]}
            candidates, starts = list(found.values()), _starts(data, present)
        for n, start in _numbered(data, first, starts):
            line, _ = _line_at(data, start)
            for text in _texts(line):
                self.text(name, n, text, candidates)

    def text(self, name: str, n: int, text: str, candidates: list[Entry]) -> None:
        """Match one text (a line, or a line of a JSON record) against ``candidates``."""
        hits = [
            (e, m)
            for e in candidates
            if (not e.anchors or any(a in text for a in e.anchors))
            and (m := e.pattern.search(text))
        ]
        ids = {e.id for e, _ in hits}
        for entry, match in hits:
            if not ids.intersection(entry.superseded_by):
                self._add(entry, match, name, n, text)

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

    def result(self) -> list[Finding]:
        """The findings, less the join timeouts that name a rank which itself waited."""
        return _drop_waiting_named(self.findings)


def _all_starts(data: bytes) -> list[int]:
    starts = [0]
    pos = data.find(b"\n")
    while 0 <= pos < len(data) - 1:
        starts.append(pos + 1)
        pos = data.find(b"\n", pos + 1)
    return starts


def _drop_waiting_named(findings: list[Finding]) -> list[Finding]:
    """A "rank R never joined" finding is wrong when rank R itself reported a join timeout:
    R was there, waiting too (rank 0 hosting torch's store waits for the clients, and the
    other ranks then wait for rank 0's address); the store's own count tells the story."""
    waited = {f.rank for f in findings if f.entry.id in _JOIN_IDS and f.rank is not None}
    return [
        f
        for f in findings
        if not (f.entry.id == _JOIN_IDS[0] and _as_int(f.values.get("missing")) in waited)
    ]


def _as_int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


# --------------------------------------------------------------------------- error tail


def _config_around(data: bytes, start: int, end: int) -> bool:
    """Whether the comment line ``data[start:end]`` belongs to log4j configuration text: the
    next line that is neither blank nor a comment is a configuration line (at the end of the
    text: the line before it is)."""
    pos = end + 1
    while pos < len(data):
        line, pos_end = _line_at(data, pos)
        if line.strip() and not _COMMENT.match(line):
            return bool(_CONFIG.match(line))
        pos = pos_end + 1
    before = data[:start].rstrip(b"\n").split(b"\n")
    for raw in reversed(before):
        line = raw.decode("utf-8", "replace")
        if line.strip() and not _COMMENT.match(line):
            return bool(_CONFIG.match(line))
    return False


def _error_lines(name: str, first: int, data: bytes) -> list[ErrorLine]:
    """The lines of ``data`` that look like errors, in order: not logged at INFO or below,
    not log4j configuration text."""
    out: list[ErrorLine] = []
    for n, start in _numbered(data, first, _starts(data, _ERROR_BYTES, data.lower())):
        line, end = _line_at(data, start)
        if _CONFIG.match(line) or (_COMMENT.match(line) and _config_around(data, start, end)):
            continue
        out += [ErrorLine(name, n, t) for t, quiet in _leveled_texts(line)
                if not quiet and _ERRORISH.search(t)]  # fmt: skip
    return out


def _file_tail(src: LogSource, need: int) -> list[ErrorLine]:
    """The last ``need`` error lines of ``src``, read from its end."""
    if src.name.endswith(".properties"):  # a log4j configuration, not a log
        return []
    span = _TAIL_SPAN
    while True:
        first, data, whole = src.suffix(span)
        found = _error_lines(src.name, first, data)
        if len(found) >= need or whole:
            return found[len(found) - need :] if len(found) > need else found
        span *= 8


def _error_tail(sources: list[LogSource]) -> list[ErrorLine]:
    """The last :data:`ERROR_TAIL` error lines of the sources, in reading order."""
    out: list[ErrorLine] = []
    for src in reversed(sources):
        if len(out) >= ERROR_TAIL:
            break
        out = _file_tail(src, ERROR_TAIL - len(out)) + out
    return out


# --------------------------------------------------------------------------- diagnose


def _diagnose(
    sources: list[LogSource],
    skipped: list[str],
    network: str | None,
    every: bool,
    catalogue: Catalogue | None,
) -> Diagnosis:
    matcher = _Matcher(catalogue or load_catalogue(), network, every)
    read: list[LogSource] = []
    for src in sources:
        if not src.is_text():
            skipped.append(src.name)
            continue
        matcher.source(src)
        read.append(src)
    lines = sum(src.lines for src in read)
    names = [src.name for src in read]
    return Diagnosis(matcher.result(), names, lines, _error_tail(read), skipped)


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
    count. A path that does not exist, or is neither a regular file nor a directory (a FIFO,
    a device), raises :class:`~gpuspark.errors.GpusparkError` before anything is read.
    """
    sources, skipped = log_sources(paths)
    return _diagnose(sources, skipped, network, every, catalogue)


def diagnose_text(
    text: str,
    name: str = "<text>",
    *,
    network: str | None = None,
    every: bool = False,
    catalogue: Catalogue | None = None,
) -> Diagnosis:
    """:func:`diagnose` for log text already in memory (an exception message, an excerpt)."""
    return _diagnose([LogSource.from_text(name, text)], [], network, every, catalogue)
