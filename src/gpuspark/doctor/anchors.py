"""Literal texts a catalogue pattern cannot match without: the fast first pass of the matcher.

Running some forty regular expressions on every line of a 50 MB driver log is slow; looking
for one literal text per entry with ``bytes.find`` over a whole block is not. A pattern's
*anchors* are, for each of its top-level alternatives, the longest run of literal characters
that every match of that alternative contains: a line that holds none of them cannot match,
so the regular expression only runs on lines that hold one.

Only characters that read the same in a plain log line and inside a JSON string are kept in an
anchor (printable ASCII without ``"``, ``\\`` and ``/``, which JSON writers may escape), so the
raw bytes of a JSON event-log line can be searched too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["MIN_ANCHOR", "is_safe", "literal_runs", "required_literals"]

MIN_ANCHOR = 4
"""Shorter literal runs are too common to be worth a search: the pattern gets no anchors."""

_QUANTIFIERS = "?*{"
_NUMERIC_ESCAPE = re.compile(r"\\[xuUN0-7]")
"""Escapes longer than two characters (``\\x41``, ``\\N{...}``, octal): not read here."""
_JSON_UNSAFE = set('"\\/')


def _safe(ch: str) -> bool:
    return " " <= ch <= "~" and ch not in _JSON_UNSAFE


def _scan(pattern: str, start: int = 0) -> Iterator[tuple[int, int]]:
    """``(index, group depth after it)`` of every character from ``start`` that is neither
    escaped nor inside a character class."""
    depth, i = 0, start
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            i = _class_end(pattern, i)
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        yield i, depth
        i += 1


def _split_top(pattern: str) -> list[str]:
    """``pattern`` cut at its top-level ``|`` (not inside a group or a character class)."""
    cuts = [i for i, depth in _scan(pattern) if depth == 0 and pattern[i] == "|"]
    bounds = zip([-1, *cuts], [*cuts, len(pattern)], strict=True)
    return [pattern[a + 1 : b] for a, b in bounds]


def _class_end(pattern: str, i: int) -> int:
    """The index just after the character class that opens at ``i``."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


def _group_end(pattern: str, i: int) -> int:
    """The index just after the group that opens at ``i``."""
    return next((j + 1 for j, depth in _scan(pattern, i) if depth == 0), len(pattern))


def _skip_quantifier(pattern: str, i: int) -> int:
    if i < len(pattern) and pattern[i] == "{":
        i = pattern.find("}", i) + 1 or len(pattern)
    elif i < len(pattern) and pattern[i] in "?*+":
        i += 1
    if i < len(pattern) and pattern[i] in "?+":  # lazy or possessive
        i += 1
    return i


def _runs(branch: str) -> list[str]:
    """The runs of literal characters that every match of ``branch`` contains, in order."""
    runs: list[str] = []
    run: list[str] = []
    i = 0

    def cut() -> None:
        if run:
            runs.append("".join(run))
            run.clear()

    while i < len(branch):
        ch = branch[i]
        if ch == "\\" and i + 1 < len(branch) and not branch[i + 1].isalnum():
            literal, i = branch[i + 1], i + 2
        elif ch in "\\([.^$" or ch in _QUANTIFIERS or ch == "+":
            end = {"\\": i + 2, "(": 0, "[": 0}.get(ch, i + 1)
            if ch == "(":
                end = _group_end(branch, i)
            elif ch == "[":
                end = _class_end(branch, i)
            cut()
            i = _skip_quantifier(branch, end)
            continue
        else:
            literal, i = ch, i + 1
        if i < len(branch) and branch[i] in _QUANTIFIERS:  # the literal is optional
            cut()
            i = _skip_quantifier(branch, i)
            continue
        run.append(literal)
        if i < len(branch) and branch[i] == "+":  # once at least, then repeated
            cut()
            i = _skip_quantifier(branch, i)
    cut()
    return runs


def _best(runs: list[str]) -> str:
    """The longest JSON-safe piece of any run."""
    pieces = [""]
    for run in runs:
        piece: list[str] = []
        for ch in [*run, "\0"]:
            if _safe(ch):
                piece.append(ch)
            else:
                pieces.append("".join(piece))
                piece = []
    return max(pieces, key=len)


def literal_runs(pattern: str) -> list[list[str]] | None:
    """For each top-level alternative of ``pattern``, the runs of literal characters that
    every match of it contains; ``None`` when the pattern sets flags (``(?i)``) or uses an
    escape this reader does not follow (``\\x41``)."""
    if any(f"(?{flag}" in pattern for flag in "aiLmsux") or _NUMERIC_ESCAPE.search(pattern):
        return None
    return [_runs(branch) for branch in _split_top(pattern)]


def is_safe(text: str) -> bool:
    """Whether ``text`` reads the same inside a JSON string (an anchor may only hold these)."""
    return all(_safe(ch) for ch in text)


def required_literals(pattern: str) -> tuple[str, ...] | None:
    """One literal per top-level alternative of ``pattern``, such that every match contains
    one of them; ``None`` when an alternative has no literal of at least
    :data:`MIN_ANCHOR` characters, or the pattern cannot be read: every line must then be
    tried."""
    branches = literal_runs(pattern)
    if branches is None:
        return None
    anchors = [_best(runs) for runs in branches]
    if any(len(a) < MIN_ANCHOR for a in anchors):
        return None
    return tuple(dict.fromkeys(anchors))
