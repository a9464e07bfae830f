"""The catalogue of known failures: load and check ``catalogue.toml``, explain a match.

The catalogue is data (``catalogue.toml`` next to this module): one entry per known message,
with its exact pattern, the likely cause, the fix and a log excerpt in its published form.
:func:`load_catalogue` checks it as it loads (unique ids, patterns that compile, an example
that the pattern matches, hints that name the pattern's groups), so a broken entry fails at
once and names itself. :func:`catalogue_markdown` renders the README's table from it.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuspark.doctor.anchors import MIN_ANCHOR, is_safe, literal_runs, required_literals
from gpuspark.errors import GpusparkError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "CATALOGUE_FILE",
    "SOURCES",
    "Catalogue",
    "Entry",
    "Hint",
    "Xid",
    "catalogue_markdown",
    "fill",
    "load_catalogue",
    "parse_catalogue",
    "parse_size",
]

CATALOGUE_FILE = Path(__file__).with_name("catalogue.toml")
SOURCES = ("yarn", "spark", "python", "torch", "nccl", "gloo", "cuda", "kernel", "gpuspark")
"""Where a message comes from, in the order the README table lists them."""

_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_SIZE = re.compile(r"^\s*([\d.]+)\s*([KMGT]?)(i?)B\s*$")
_XID_KINDS = ("application", "reset", "drain", "info")


def parse_size(text: str) -> float:
    """``"3.75 GiB"`` / ``"10 GB"`` / ``"512 B"`` -> bytes (GiB = 2**30, GB = 10**9)."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    power = " KMGT".index(m.group(2) or " ")
    base = 1024 if m.group(3) else 1000
    return float(m.group(1)) * base**power


class _Blank(dict[str, str]):
    """Format map: a figure the line did not carry shows as ``?``."""

    def __missing__(self, key: str) -> str:
        return "?"


def fill(text: str, values: Mapping[str, str | None]) -> str:
    """``text`` with ``{name}`` replaced by the extracted figures (``?`` when absent)."""
    return text.format_map(_Blank({k: v for k, v in values.items() if v is not None}))


@dataclass(frozen=True)
class Hint:
    """An extra fix line, given when ``when`` holds for the extracted figures.

    ``when`` is a group name (true when the line carried it) or ``"a > b"`` comparing two
    size groups (``"reserved_unallocated > tried"``).
    """

    when: str
    text: str

    def names(self) -> list[str]:
        """The groups ``when`` reads."""
        return [part.strip() for part in self.when.split(">")]

    def applies(self, values: Mapping[str, str | None]) -> bool:
        """Whether the hint holds for these figures."""
        names = self.names()
        got = [values.get(n) for n in names]
        if any(v is None for v in got):
            return False
        if len(names) == 1:
            return True
        try:
            return parse_size(str(got[0])) > parse_size(str(got[1]))
        except ValueError:
            return False


@dataclass(frozen=True)
class Entry:
    """One known failure: how to recognise it and what to do about it."""

    id: str
    title: str
    source: str
    pattern: re.Pattern[str]
    cause: str
    fix: str
    example: str
    expect: dict[str, str] = field(default_factory=dict)
    doc: str | None = None
    hints: tuple[Hint, ...] = ()
    superseded_by: tuple[str, ...] = ()
    network: str | None = None
    """Only reported when the cluster's compute network is of this kind."""
    anchors: tuple[str, ...] | None = None
    """Literal texts one of which every match contains (searched before the pattern runs);
    ``None``: the pattern is tried on every line."""

    def cause_for(self, values: Mapping[str, str | None]) -> str:
        """The cause with the line's figures filled in."""
        return fill(self.cause, values)

    def fixes_for(self, values: Mapping[str, str | None]) -> list[str]:
        """The fix, then every hint that applies, figures filled in."""
        out = [fill(self.fix, values)]
        out += [fill(h.text, values) for h in self.hints if h.applies(values)]
        return out


@dataclass(frozen=True)
class Xid:
    """What an NVIDIA XID code means and what to do (``kind``: application, reset, drain,
    info)."""

    code: int
    meaning: str
    kind: str
    action: str


@dataclass(frozen=True)
class Catalogue:
    """Every entry, in file order, and the XID table."""

    entries: tuple[Entry, ...]
    xids: dict[int, Xid]

    def entry(self, entry_id: str) -> Entry:
        """The entry called ``entry_id``."""
        for e in self.entries:
            if e.id == entry_id:
                return e
        raise KeyError(entry_id)

    def enrich(self, values: dict[str, str | None]) -> dict[str, str | None]:
        """Add what the catalogue knows about the figures: an ``xid`` gets ``xid_meaning``,
        ``xid_kind`` and ``xid_action``."""
        if values.get("xid") is None:
            return values
        code = int(str(values["xid"]))
        xid = self.xids.get(code)
        out = dict(values)
        if xid is None:
            out["xid_meaning"] = "a code this catalogue does not list"
            out["xid_kind"] = "unknown"
            out["xid_action"] = (
                f"look XID {code} up in NVIDIA's XID catalogue; drain the node if unsure"
            )
        else:
            out["xid_meaning"], out["xid_kind"], out["xid_action"] = (
                xid.meaning,
                xid.kind,
                xid.action,
            )
        return out


def _bad(where: str, what: str) -> GpusparkError:
    return GpusparkError(
        f"{where}: {what}", remedy=f"fix the entry in {CATALOGUE_FILE.name} (gpuspark.doctor)"
    )


def _entry(raw: dict[str, Any], n: int) -> Entry:
    where = f"{CATALOGUE_FILE.name} entry {n + 1} ({raw.get('id', '?')})"
    for key in ("id", "title", "source", "pattern", "cause", "fix", "example"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise _bad(where, f"needs a non-empty '{key}'")
    if not _ID.match(raw["id"]):
        raise _bad(where, "id must be kebab-case (a-z, 0-9, -)")
    if raw["source"] not in SOURCES:
        raise _bad(where, f"source {raw['source']!r} is not one of {', '.join(SOURCES)}")
    try:
        pattern = re.compile(raw["pattern"])
    except re.error as exc:
        raise _bad(where, f"pattern does not compile: {exc}") from exc
    if not any(pattern.search(line) for line in raw["example"].splitlines()):
        raise _bad(where, "the pattern does not match its example")
    anchors = _anchors(raw, pattern, where)
    hints = tuple(Hint(h["when"], h["text"]) for h in raw.get("hints", []))
    for h in hints:
        unknown = [n for n in h.names() if n not in pattern.groupindex]
        if unknown:
            raise _bad(where, f"hint reads {unknown[0]!r}, which the pattern has no group for")
    return Entry(
        id=raw["id"],
        title=raw["title"].strip(),
        source=raw["source"],
        pattern=pattern,
        cause=raw["cause"].strip(),
        fix=raw["fix"].strip(),
        example=raw["example"],
        expect={str(k): str(v) for k, v in raw.get("expect", {}).items()},
        doc=raw.get("doc"),
        hints=hints,
        superseded_by=tuple(raw.get("superseded_by", [])),
        network=raw.get("network"),
        anchors=anchors,
    )


def _anchors(raw: dict[str, Any], pattern: re.Pattern[str], where: str) -> tuple[str, ...] | None:
    """The entry's anchors: its ``anchor`` (checked to be a literal every match holds), else
    the pattern's longest literal runs; each must be in the example lines the pattern matches."""
    chosen = raw.get("anchor")
    if chosen is None:
        anchors = required_literals(pattern.pattern)
    else:
        branches = literal_runs(pattern.pattern) or []
        held = len(branches) == 1 and any(chosen in run for run in branches[0])
        if not (held and is_safe(chosen) and len(chosen) >= MIN_ANCHOR):
            raise _bad(
                where, f"anchor {chosen!r} is not a literal every match of the pattern holds"
            )
        anchors = (chosen,)
    for line in raw["example"].splitlines():
        if anchors and pattern.search(line) and not any(a in line for a in anchors):
            raise _bad(where, f"anchors {anchors} miss the example line {line[:80]!r}")
    return anchors


def _xid(raw: dict[str, Any]) -> Xid:
    xid = Xid(int(raw["code"]), raw["meaning"], raw["kind"], raw["action"])
    if xid.kind not in _XID_KINDS:
        raise _bad(f"XID {xid.code}", f"kind {xid.kind!r} is not one of {', '.join(_XID_KINDS)}")
    return xid


def parse_catalogue(data: dict[str, Any]) -> Catalogue:
    """A checked :class:`Catalogue` from the parsed TOML."""
    entries = tuple(_entry(raw, n) for n, raw in enumerate(data.get("entry", [])))
    ids = [e.id for e in entries]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise _bad(CATALOGUE_FILE.name, f"entry id {dup[0]!r} is used twice")
    for e in entries:
        unknown = [s for s in e.superseded_by if s not in ids]
        if unknown:
            raise _bad(f"entry {e.id}", f"superseded_by names no entry {unknown[0]!r}")
    xids = [_xid(raw) for raw in data.get("xid", [])]
    return Catalogue(entries, {x.code: x for x in xids})


@functools.cache
def _default() -> Catalogue:
    with CATALOGUE_FILE.open("rb") as fh:
        return parse_catalogue(tomllib.load(fh))


def load_catalogue(path: str | Path | None = None) -> Catalogue:
    """The catalogue shipped with gpuspark (cached), or the one at ``path``."""
    if path is None:
        return _default()
    with Path(path).open("rb") as fh:
        return parse_catalogue(tomllib.load(fh))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def catalogue_markdown(catalogue: Catalogue | None = None) -> str:
    """The README's table of known failures (symptom → cause → fix), then the XID codes."""
    cat = catalogue or load_catalogue()
    rows = ["| source | symptom | likely cause | fix |", "|---|---|---|---|"]
    for source in SOURCES:
        for e in (e for e in cat.entries if e.source == source):
            symptom = f"**{_cell(e.title)}** (`{e.id}`)"
            fix = _cell(e.fix) + (f" ([doc]({e.doc}))" if e.doc else "")
            rows.append(f"| {source} | {symptom} | {_cell(e.cause)} | {fix} |")
    rows += ["", "| XID | meaning | kind | action |", "|---|---|---|---|"]
    for code in sorted(cat.xids):
        x = cat.xids[code]
        rows.append(f"| {code} | {_cell(x.meaning)} | {x.kind} | {_cell(x.action)} |")
    return "\n".join(rows) + "\n"
