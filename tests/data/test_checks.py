"""The window, shape, size and split checks of :mod:`gpuspark.data.checks` (no Spark): one
place, one message for each bad value, whichever module takes the option."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gpuspark.data import checks
from gpuspark.data.checks import (
    WINDOW_NAMES,
    check_size,
    check_split_known,
    check_split_name,
    check_window_pair,
    parse_split,
    window_values,
    zyx,
)
from gpuspark.data.load import ImageDecode
from gpuspark.data.prep.common import check_split
from gpuspark.data.sources import DicomOptions, ImageOptions, parse_window
from gpuspark.errors import GpusparkError, LoaderError, PrepError, WindowError


def test_window_names_presets_and_pairs() -> None:
    assert window_values("Lung") == ("lung", -600.0, 1500.0)
    assert window_values(None) == window_values("raw") == ("hu", None, None)
    assert window_values((50, 350)) == window_values("50,350") == ("50,350", 50.0, 350.0)
    assert set(WINDOW_NAMES) == {"soft-tissue", "lung", "bone", "hu", "raw", "none"}
    assert parse_window([40, 400]).width == 400.0


@pytest.mark.parametrize(
    ("spec", "text_pairs", "message"),
    [
        ("lugn", True, "is not a preset or LEVEL,WIDTH (did you mean 'lung'?)"),
        ("lugn", False, "is not a preset (did you mean 'lung'?)"),
        ("40,400", False, "'40,400' is not a preset"),
        ("40,x", True, "is not a preset or LEVEL,WIDTH"),
        ("40,400,1", True, "is not a preset or LEVEL,WIDTH"),
        ((40, 0), True, "window width must be > 0, got: 0.0"),
        ("40,-1", True, "window width must be > 0, got: -1.0"),
        ((40, math.nan), True, "window width must be > 0, got: nan"),
        ((math.inf, 400), True, "window level must be a finite number"),
        ((40, 400, 1), True, "window must be (level, width)"),
        (("a", 400), True, "window must be (level, width) in HU"),
        (40, True, "window must be a preset name, (level, width) or a Window"),
    ],
)
def test_bad_windows_are_refused(spec: Any, text_pairs: bool, message: str) -> None:
    with pytest.raises(WindowError) as info:
        window_values(spec, text_pairs=text_pairs)
    assert message in str(info.value)
    with pytest.raises(ValueError, match="window"):  # WindowError is a ValueError
        parse_window(spec, text_pairs=text_pairs)


def test_window_pair_for_a_re_window() -> None:
    assert check_window_pair([100, 100]) == (100.0, 100.0)
    with pytest.raises(WindowError, match="width must be > 0"):
        check_window_pair((100.0, 0.0))
    with pytest.raises(WindowError, match=r"must be \(level, width\)"):
        check_window_pair("100,100")  # text is the CLI's to parse


@pytest.mark.parametrize(
    ("value", "kind", "message"),
    [
        ("16,24,24", int, "shape must be a tuple (z, y, x), got text"),
        ((16, 24), int, "shape must be three positive integers (z, y, x)"),
        ((16, 24, 2.5), int, "shape must be three positive integers"),
        ((16, 0, 24), int, "shape must be three positive integers"),
        ((16, "a", 24), int, "shape must be three numbers (z, y, x)"),
        ((1, 0, 1), float, "spacing must be three positive numbers (z, y, x)"),
        ((1, math.nan, 1), float, "spacing must be three positive numbers"),
        ((1, math.inf, 1), float, "spacing must be three positive numbers"),
    ],
)
def test_bad_shapes_are_refused_with_one_message(value: Any, kind: type, message: str) -> None:
    name = "shape" if kind is int else "spacing"
    with pytest.raises(ValueError) as info:
        zyx(value, kind, name)
    assert message in str(info.value)
    if not isinstance(value, str):  # the source's options give the same message
        with pytest.raises(ValueError) as again:
            DicomOptions(**{name: value})
        assert str(again.value) == str(info.value)


def test_good_shapes_are_tuples_of_their_kind() -> None:
    assert zyx([16, 24, 24], int, "shape") == (16, 24, 24)
    assert zyx((1, 0.8, 0.8), float, "spacing") == (1.0, 0.8, 0.8)
    assert zyx(None, int, "shape") is None


def test_sizes() -> None:
    assert check_size(1) == 1
    for make in (lambda: check_size(0), lambda: ImageOptions(size=0), lambda: ImageDecode(size=0)):
        with pytest.raises(ValueError, match=r"^size must be >= 1, got: 0$"):
            make()


@pytest.mark.parametrize(
    ("split", "message"),
    [
        ((0.5, 0.1), "summing to 1"),
        ((0.5, 0.6, -0.1), "non-negative fractions"),
        ((0.25, 0.25, 0.25, 0.25), "1 to 3"),
        ((math.nan, 1.0), "summing to 1"),
        ((), "1 to 3"),
        ("0.8;0.2", "split must be fractions like 0.8,0.1,0.1"),
        (5, "split must be fractions like 0.8,0.1,0.1"),
    ],
)
def test_bad_splits_are_refused(split: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_split(split)
    with pytest.raises(PrepError, match="split must"):  # the prep jobs: the same message
        check_split(split)


def test_split_text_only_where_asked() -> None:
    assert parse_split("0.8,0.2") == (0.8, 0.2)
    assert parse_split((1, 0)) == (1.0, 0.0)
    assert parse_split(None) is None
    with pytest.raises(ValueError, match=r"split must be a sequence of fractions .* got text"):
        parse_split("0.8,0.2", text=False)


def test_split_names() -> None:
    assert check_split_name("val") == "val"
    with pytest.raises(GpusparkError, match="not usable in a file name"):
        check_split_name("a/b")
    assert check_split_known("val", {"train", "val"}, "ds") == "val"
    with pytest.raises(LoaderError, match=r"ds has no split 'vall' \(did you mean 'val'\?\)"):
        check_split_known("vall", {"train", "val"}, "ds")
    with pytest.raises(LoaderError, match="this dataset has no splits"):
        check_split_known("val", set(), "ds")


def test_the_module_imports_no_heavy_package() -> None:
    source = Path(checks.__file__).read_text()
    assert all(f"import {m}" not in source for m in ("numpy", "torch", "pyspark"))
