"""``gpuspark doctor``: live checks of a node and a cluster before jobs fail, and the diagnosis
of a failed job's logs from a catalogue of known messages (each with its cause and fix)."""

from __future__ import annotations

__all__: list[str] = []
