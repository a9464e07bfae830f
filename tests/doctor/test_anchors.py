"""Anchors (gpuspark.doctor.anchors): the literal texts a pattern cannot match without, found
first with ``bytes.find`` so that the patterns only run on the lines that hold one."""

from __future__ import annotations

import pytest

from gpuspark.doctor.anchors import literal_runs, required_literals
from gpuspark.doctor.catalogue import load_catalogue, parse_catalogue
from gpuspark.errors import GpusparkError

CATALOGUE = load_catalogue()


@pytest.mark.parametrize(
    ("pattern", "anchors"),
    [
        (r"Lost executor (?P<e>\S+) on", ("Lost executor ",)),
        (r"abc?defg", ("defg",)),  # "c" is optional: the run stops before it
        (r"foo+barbaz", ("barbaz",)),  # "foo" then more o's: "foo" is held, "barbaz" longer
        (r"x[abc]yzzy+", ("yzzy",)),
        (r"a\.b\.cdef|ghijk", ("a.b.cdef", "ghijk")),  # one per top-level alternative
        (r"(?:Job (?P<job>\d+)|Stage) cancelled (?P<r>.+)", (" cancelled ",)),
        (r'say "hello world" now', ("hello world",)),  # JSON escapes quotes: cut there
        (r"NET/IB ?: No device found", (": No device found",)),
        (r"(?i)case blind text", None),  # flags: every line is tried
        (r"ab\x41cdefgh", None),  # an escape this reader does not follow
        (r"ab|long enough", None),  # one alternative has no anchor of 4 characters
    ],
)
def test_required_literals(pattern: str, anchors: tuple[str, ...] | None) -> None:
    assert required_literals(pattern) == anchors


def test_literal_runs_stop_at_groups_classes_and_optional_characters() -> None:
    assert literal_runs(r"Task (?P<t>\d+) in stage [\d.]+ failed (\d+) times?") == [
        ["Task ", " in stage ", " failed ", " time"]
    ]


def test_every_entry_has_anchors_that_its_example_holds() -> None:
    """An entry without anchors would be tried on every line of every log (slow)."""
    for entry in CATALOGUE.entries:
        assert entry.anchors, entry.id
        lines = [ln for ln in entry.example.splitlines() if entry.pattern.search(ln)]
        assert all(any(a in ln for a in entry.anchors) for ln in lines), entry.id


def _raw(**overrides: object) -> dict:
    base = {
        "id": "x-y",
        "title": "t",
        "source": "spark",
        "pattern": "Task (?P<n>\\d+) in stage 3 failed 4 times",
        "cause": "c",
        "fix": "f",
        "example": "Task 3 in stage 3 failed 4 times",
    }
    return {"entry": [{**base, **overrides}]}


def test_a_chosen_anchor_must_be_a_literal_of_the_pattern() -> None:
    assert parse_catalogue(_raw(anchor=" times")).entries[0].anchors == (" times",)
    for bad in ("Task 3", "absent", " in"):  # across a group, not in it, too short
        with pytest.raises(GpusparkError, match="is not a literal every match"):
            parse_catalogue(_raw(anchor=bad))
