"""Training data: shard format, writers, sources and the DDP loader.

Submodules are imported on use (``gpuspark.data.format``, ``.write``, ``.load``, ``.sources``,
``.prep``) so importing :mod:`gpuspark.data` stays cheap.
"""
