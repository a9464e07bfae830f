"""The base of every spec model: plain data, unknown keys forbidden, frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["SpecModel"]


class SpecModel(BaseModel):
    """A part of the cluster spec (pydantic v2): unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
