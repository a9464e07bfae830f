"""Fixtures shared by the data tests."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest


def _mutations(data: bytes, rng: random.Random) -> list[bytes]:
    """Three truncations and three bit-flipped copies of ``data``."""
    out = [data[: rng.randrange(1, len(data))] for _ in range(3)]
    for _ in range(3):
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        out.append(bytes(b))
    return out


@pytest.fixture
def mutations() -> Callable[[bytes, random.Random], list[bytes]]:
    """Corrupted copies of a file's bytes, for the never-crash tests of the readers."""
    return _mutations
