"""``TableBatch``: rows of a table dataset as ``{column: array}``, with the number matrices kept.

A block stores the number columns of one dtype as one ``rows x k`` matrix
(:mod:`gpuspark.data.format.table.blocks`); the reader hands each number column out as a view of its
matrix. Keeping the matrices next to the columns lets a transform that wants neighbouring
number columns side by side (:class:`~gpuspark.data.frame.FeaturesLabel`, the common wide-table
case) cast one slice of a matrix in one pass instead of stacking ``k`` strided columns.

A ``TableBatch`` is an ordinary ``dict`` for everything else: a transform that replaces a
column's array is seen (:meth:`TableBatch.number_runs` only uses matrix columns whose view is
still the batch's value).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpuspark.data.format.table.blocks import BlockParts

__all__ = ["TableBatch"]

Positions = Mapping[str, tuple[str, int]]


class TableBatch(dict[str, Any]):
    """Rows as ``{column: array}``: numbers 1-D (``numpy.ma`` masked where the rows hold a
    null), other columns as decoded. ``parts.matrices[dtype]`` is the ``rows x k`` matrix the
    number columns of that dtype are views of; ``positions[name] = (dtype, j)``."""

    def __init__(self, names: Sequence[str], positions: Positions, parts: BlockParts) -> None:
        super().__init__()
        self.positions, self.parts = positions, parts
        self._views: dict[str, Any] = {}
        matrices, masks = parts.matrices, parts.masks
        for name in names:
            if name in positions:
                dtype, j = positions[name]
                column: Any = matrices[dtype][:, j]
                if name in masks:
                    column = np.ma.masked_array(column, masks[name])
                self._views[name] = column
                self[name] = column
            else:
                self[name] = parts.others[name]

    @property
    def rows(self) -> int:
        """Rows in the batch."""
        return self.parts.rows

    def number_runs(self, names: Sequence[str]) -> list[tuple[list[str], np.ndarray | None]]:
        """``names`` cut into runs: ``(run, matrix)`` where ``matrix`` is the slice of one
        number matrix holding the run's columns side by side (neighbouring columns of one
        dtype, no nulls, untouched since the batch was made), else ``([name], None)``."""
        out: list[tuple[list[str], np.ndarray | None]] = []
        run: list[str] = []
        for name in names:
            if not self._plain(name):
                if run:
                    out.append((run, self._run_matrix(run)))
                    run = []
                out.append(([name], None))
            elif run and self.positions[name] != _next(self.positions[run[-1]]):
                out.append((run, self._run_matrix(run)))
                run = [name]
            else:
                run.append(name)
        if run:
            out.append((run, self._run_matrix(run)))
        return out

    def _plain(self, name: str) -> bool:
        view = self._views.get(name)
        return view is not None and name not in self.parts.masks and dict.get(self, name) is view

    def _run_matrix(self, run: list[str]) -> np.ndarray:
        dtype, j = self.positions[run[0]]
        return self.parts.matrices[dtype][:, j : j + len(run)]


def _next(position: tuple[str, int]) -> tuple[str, int]:
    return position[0], position[1] + 1
