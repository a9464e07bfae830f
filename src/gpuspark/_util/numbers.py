"""Small integer arithmetic."""

from __future__ import annotations

__all__ = ["round_up"]


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` (>= 1) that is at least ``n``."""
    return -(-n // multiple) * multiple
