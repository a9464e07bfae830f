"""The data options several modules take, checked in one place: CT windows, target shapes and
sizes, split fractions and split names.

Each check names the option and the value it got, and says what it expects. Typed values
only, except where a function says it also reads text: the CLI parses the text forms
(``"z,y,x"``, ``"L,W"``, ``"0.8,0.1,0.1"``) and hands the library tuples and floats.

Plain Python over the standard library (no numpy, torch or Spark), so that the CLI, the
sources (in Spark tasks), the prep jobs, the loaders and the recipes use the same checks.
Windows raise :class:`~gpuspark.errors.WindowError` (a ``ValueError``); shapes, sizes and
fractions ``ValueError``; a split name that cannot be a file name
:class:`~gpuspark.errors.GpusparkError`; a split a dataset does not have
:class:`~gpuspark.errors.LoaderError`. Callers that own an error type (a prep job's
:class:`~gpuspark.errors.PrepError`) turn the ``ValueError`` into theirs with its message.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from typing import Any

from gpuspark.errors import GpusparkError, LoaderError, WindowError, did_you_mean

__all__ = [
    "RAW_WINDOW_NAMES",
    "SPLIT_NAMES",
    "WINDOW_NAMES",
    "WINDOW_PRESETS",
    "check_size",
    "check_split_known",
    "check_split_name",
    "check_window_pair",
    "parse_split",
    "window_values",
    "zyx",
]

# --------------------------------------------------------------------------- CT windows

WINDOW_PRESETS: dict[str, tuple[float, float]] = {
    "soft-tissue": (40.0, 400.0),
    "lung": (-600.0, 1500.0),
    "bone": (400.0, 1800.0),
}
"""Window presets: name -> ``(level, width)`` in HU."""
RAW_WINDOW_NAMES = ("hu", "raw", "none")
"""Names of "no window": raw Hounsfield units."""
WINDOW_NAMES = (*WINDOW_PRESETS, *RAW_WINDOW_NAMES)
"""Every window name the library takes as it is."""


def check_window_pair(pair: Any) -> tuple[float, float]:
    """``(level, width)`` in HU as floats: two finite numbers, the width above 0."""
    if isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2:
        raise WindowError(f"window must be (level, width), got: {pair!r}")
    try:
        level, width = float(pair[0]), float(pair[1])
    except (TypeError, ValueError) as exc:
        raise WindowError(f"window must be (level, width) in HU, got: {pair!r}") from exc
    if not width > 0 or math.isinf(width):
        raise WindowError(f"window width must be > 0, got: {width}")
    if not math.isfinite(level):
        raise WindowError(f"window level must be a finite number, got: {level}")
    return level, width


def window_values(spec: Any, *, text_pairs: bool = True) -> tuple[str, float | None, float | None]:
    """``(name, level, width)`` of a window: a preset name (:data:`WINDOW_PRESETS`), a raw
    name or None (``("hu", None, None)``), a ``(level, width)`` pair, or with ``text_pairs``
    the text ``"LEVEL,WIDTH"`` (e.g. ``"50,350"``). A pair is named ``"L,W"``."""
    if spec is None:
        return "hu", None, None
    if isinstance(spec, str):
        key = spec.lower()
        if key in RAW_WINDOW_NAMES:
            return "hu", None, None
        if key in WINDOW_PRESETS:
            return (key, *WINDOW_PRESETS[key])
        close = did_you_mean(spec, list(WINDOW_PRESETS))
        presets = ", ".join(WINDOW_PRESETS)
        if not text_pairs:
            raise WindowError(
                f"window {spec!r} is not a preset{close}",
                remedy=f"use one of {presets}, hu, or a (level, width) pair",
            )
        try:
            pair: Sequence[float] = [float(x) for x in spec.split(",")]
        except ValueError:
            pair = ()
        if len(pair) != 2:
            raise WindowError(
                f"window {spec!r} is not a preset or LEVEL,WIDTH{close}",
                remedy=f"use one of {presets}, hu, or e.g. 40,400",
            )
        spec = pair
    elif not isinstance(spec, Sequence):
        raise WindowError(f"window must be a preset name, (level, width) or a Window: {spec!r}")
    level, width = check_window_pair(spec)
    return f"{level:g},{width:g}", level, width


# --------------------------------------------------------------------------- shapes, sizes


def zyx(value: Sequence[Any] | None, kind: type, name: str) -> Any:
    """``(z, y, x)``: three positive finite numbers of type ``kind`` (``int`` for a shape in
    voxels, ``float`` for a spacing in mm) as a tuple, or None. Text is the CLI's to parse."""
    if value is None:
        return None
    if isinstance(value, str):
        raise ValueError(f"{name} must be a tuple (z, y, x), got text {value!r}")
    try:
        out = tuple(kind(x) for x in value)
        exact = all(kind(x) == x for x in value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{name} must be three numbers (z, y, x), got: {value!r}") from exc
    if len(out) != 3 or not exact or not all(x > 0 and math.isfinite(x) for x in out):
        what = "integers" if kind is int else "numbers"
        raise ValueError(f"{name} must be three positive {what} (z, y, x), got: {value!r}")
    return out


def check_size(value: int, name: str = "size") -> int:
    """A target size in pixels (an image's side): at least 1."""
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got: {value}")
    return value


# --------------------------------------------------------------------------- splits

SPLIT_NAMES = ("train", "val", "test")
"""The names of split fractions, in their order."""


def parse_split(
    split: str | Sequence[float] | None, *, text: bool = True
) -> tuple[float, ...] | None:
    """Split fractions (train, val[, test]) as a tuple, or None: 1 to 3 fractions in
    [0, 1] summing to 1. With ``text``, also ``"0.8,0.1,0.1"``."""
    if split is None:
        return None
    if isinstance(split, str) and not text:
        raise ValueError(
            f"split must be a sequence of fractions such as (0.8, 0.1, 0.1), got text {split!r}"
        )
    try:
        parts = [float(x) for x in (split.split(",") if isinstance(split, str) else split)]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"split must be fractions like 0.8,0.1,0.1, got: {split!r}") from exc
    fractions = all(0 <= p <= 1 for p in parts) and abs(sum(parts) - 1) <= 1e-6
    if not 1 <= len(parts) <= 3 or not fractions:
        raise ValueError(
            f"split must be 1 to 3 non-negative fractions (train,val,test) summing to 1, "
            f"got: {split!r}"
        )
    return tuple(parts)


def check_split_name(split: str) -> str:
    """``split`` if it can be part of a file name, else a :class:`GpusparkError`."""
    if not re.fullmatch(r"[\w.=-]+", split):
        raise GpusparkError(
            f"split name {split!r} is not usable in a file name",
            remedy="use letters, digits, '_', '-', '.' or '='",
        )
    return split


def check_split_known(split: str, names: Collection[str], where: str) -> str:
    """``split`` if it is one of the dataset's split ``names``, else a :class:`LoaderError`
    naming the dataset (``where``) and its splits."""
    if split not in names:
        known = sorted(names)
        raise LoaderError(
            f"{where} has no split {split!r}{did_you_mean(split, known)}",
            remedy=f"use one of {known}" if known else "this dataset has no splits; use split=None",
        )
    return split
