"""Training data: shard format, writers, sources and the DDP loader.

Submodules are imported on use (``gpuspark.data.format`` with the table format in
``.format.table``, ``.write``, ``.load``, ``.sources``, ``.prep``, ``.frame``) so importing
:mod:`gpuspark.data` stays cheap. :func:`from_dataframe` (a Spark DataFrame to training data,
see :mod:`gpuspark.data.frame`) is available here too, loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["from_dataframe"]


def __getattr__(name: str) -> Any:
    if name == "from_dataframe":
        from gpuspark.data.frame import from_dataframe

        return from_dataframe
    raise AttributeError(f"module 'gpuspark.data' has no attribute {name!r}")
