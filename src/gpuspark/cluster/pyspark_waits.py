"""Two waits inside PySpark that a gpuspark command need not sit through.

- **pandas at the first Py4J call.** ``SparkContext`` passes its first Python values to the new
  driver JVM through PySpark's Py4J converters, whose NumPy check imports
  ``pyspark.testing.utils``, which imports pandas: 0.6 s on a 2-core machine, with nothing else
  going on, between the JVM's gateway coming up and the SparkContext starting in it.
  :func:`preload_pandas` imports pandas on a background thread while the driver JVM starts,
  so the converters find it loaded.
- **The accumulator server at stop.** ``SparkContext.stop`` ends by shutting down the
  driver's accumulator server, whose connection handler looks for the shutdown flag once a
  second and whose ``serve_forever`` loop polls every 0.5 s: 0.9 s after the JVM side has
  already stopped. :func:`stop_session` stops the JVM side first, as PySpark does, and lets
  the server finish on a daemon thread.

Both reach into PySpark's internals defensively: if an attribute is missing (another PySpark
version), the session starts and stops exactly as PySpark does by itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
from typing import Any

__all__ = ["preload_pandas", "stop_session"]

log = logging.getLogger(__name__)


def _import_quietly(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception as exc:  # the converters import it again and report it then
        log.debug("preloading %s failed: %s", name, exc)


def preload_pandas() -> threading.Thread | None:
    """Import pandas on a daemon thread (returned) unless it is loaded or not installed."""
    if "pandas" in sys.modules or importlib.util.find_spec("pandas") is None:
        return None
    thread = threading.Thread(
        target=_import_quietly, args=("pandas",), name="gpuspark-preload-pandas", daemon=True
    )
    thread.start()
    return thread


def stop_session(spark: Any) -> None:
    """``spark.stop()``, with a classic session's accumulator server shut down on a daemon
    thread once the JVM side has stopped (a Spark Connect session stops as it is)."""
    sc = getattr(spark, "_sc", None)
    server = getattr(sc, "_accumulatorServer", None) if sc is not None else None
    if sc is None or server is None or not hasattr(server, "shutdown"):
        spark.stop()
        return
    sc._accumulatorServer = None  # SparkContext.stop skips it then
    try:
        spark.stop()
    finally:
        server.server_shutdown = True  # ends the handler's poll at its next look
        threading.Thread(
            target=server.shutdown, name="gpuspark-accumulator-stop", daemon=True
        ).start()
