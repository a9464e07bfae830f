"""Value formatting shared by the spec's messages: numbers, values, flattened tables."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["flatten_table", "format_number", "show_value"]


def show_value(value: Any) -> str:
    """A value as it appears in a one-line message (TOML-like, at most 60 characters)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return format_number(value)
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def format_number(value: float) -> str:
    """``2.0`` -> ``2``, ``0.25`` -> ``0.25``."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def flatten_table(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"spark": {"ui": {"port": 4041}}}`` -> ``{"spark.ui.port": "4041"}`` (TOML dotted keys)."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_table(value, f"{name}."))
        elif isinstance(value, bool):
            flat[name] = "true" if value else "false"
        elif isinstance(value, int | float):
            flat[name] = format_number(value) if isinstance(value, float) else str(value)
        else:
            flat[name] = value
    return flat
