"""Spark 3.5 and 4.x: every difference between the pyspark versions gpuspark supports.

gpuspark supports :data:`PYSPARK_REQUIREMENT`. The lowest patch is 3.5.1 because training
asks for whole GPUs per task through a task resource profile on its barrier stage, with
dynamic allocation off (barrier stages refuse it, SPARK-24942). Spark 3.5.0 accepts such a
profile on standalone only (SPARK-39853, 3.4); 3.5.1 also on YARN (SPARK-45250) and Kubernetes
(SPARK-45495): 3.5.0's ``ResourceProfileManager`` says "TaskResourceProfiles are only
supported for Standalone cluster for now when dynamic allocation is disabled".

What differs, and how gpuspark deals with it (checked with pyspark 3.5.1, 4.0.0 and 4.3.0):

- settings whose defaults differ are pinned to one value for every version
  (:data:`PINNED_CONF`, part of every driver's metrics settings);
- a feature one version lacks is an entry of :data:`FEATURES`; :func:`missing` turns it into
  one line naming the version that has it.

Everything else gpuspark uses behaves the same on those versions: job tags
(``SparkContext.addJobTag``, 3.5+), barrier stages with task resource profiles,
``DataFrame.mapInArrow`` (``barrier=`` from 3.5.0), the standalone master's ``/json/`` and
its daemons' command lines, log4j2 configuration, Java 17. The version is read from the
package metadata: nothing here imports pyspark at import time.

One difference is between kinds of session, not versions: pyspark's ``functions`` and
``Window`` build classic (JVM) expressions unless a process-wide switch turns the whole
process to Spark Connect, which gpuspark leaves off so that classic sessions keep working
beside Connect ones. Code that builds expressions for a DataFrame takes them from
:func:`sql_functions` / :func:`sql_window`, which pick the module of that DataFrame's kind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FEATURES",
    "PINNED_CONF",
    "PYSPARK_MIN",
    "PYSPARK_REQUIREMENT",
    "Feature",
    "installed_version",
    "is_connect",
    "missing",
    "parse_version",
    "sql_functions",
    "sql_window",
    "version_problem",
]

PYSPARK_MIN = (3, 5, 1)
"""The lowest pyspark gpuspark supports (see the module docstring for why)."""

PYSPARK_REQUIREMENT = "pyspark>=3.5.1,<5"
"""The requirement as ``pip install`` takes it (the same as ``pyproject.toml``'s)."""

_NEXT_MAJOR = (5, 0, 0)

PINNED_CONF = {
    # Spark 3.5 registers the appStatus metrics source (job and task counters on the driver's
    # /metrics/prometheus, read by the dashboards) only when asked; Spark 4 by default.
    "spark.metrics.appStatusSource.enabled": "true",
}
"""Spark settings whose defaults differ between 3.5 and 4.x, pinned for every version."""


@dataclass(frozen=True)
class Feature:
    """Something only some pyspark versions can do."""

    since: tuple[int, int, int]
    """The first pyspark version that has it."""
    what: str
    """What it is, as a user would ask for it."""
    why: str
    """What the older versions lack."""


FEATURES = {
    "connect-server": Feature(
        (4, 0, 0),
        "a local Spark Connect server",
        "the pyspark 3.5 wheel ships no Spark Connect server (jars/spark-connect_*.jar)",
    ),
    "connect-profile": Feature(
        (4, 0, 0),
        "whole GPUs per rank over Spark Connect (a task resource profile on mapInArrow)",
        "pyspark 3.5's Connect DataFrame.mapInArrow takes barrier= but no profile=",
    ),
    "connect-progress": Feature(
        (4, 0, 0),
        "a data job's task progress over Spark Connect (SparkSession.registerProgressHandler)",
        "pyspark 3.5's Connect client receives no execution progress from the server",
    ),
}
"""Features by name that not every supported pyspark has."""


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"3.5.1"`` -> ``(3, 5, 1)`` (``"4.0.0.dev1"`` -> ``(4, 0, 0)``); ``None`` when
    ``text`` does not start with a ``MAJOR.MINOR`` version."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2)), int(found.group(3) or 0)


def installed_version() -> str | None:
    """The installed pyspark's version from its package metadata (``None``: not installed)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return None


def _show(version: tuple[int, int, int]) -> str:
    return ".".join(str(n) for n in version)


def version_problem(version: str | None) -> str | None:
    """``None`` when gpuspark supports pyspark ``version``; else one line saying why not."""
    parsed = parse_version(version)
    if parsed is None:
        return f"cannot read the pyspark version {version!r}; gpuspark needs {PYSPARK_REQUIREMENT}"
    if parsed < PYSPARK_MIN:
        return (
            f"pyspark {version} is older than gpuspark supports ({PYSPARK_REQUIREMENT}: "
            f"task resource profiles without dynamic allocation on YARN and Kubernetes)"
        )
    if parsed >= _NEXT_MAJOR:
        return f"pyspark {version} is newer than gpuspark supports ({PYSPARK_REQUIREMENT})"
    return None


def missing(feature: str, version: str | None = None) -> str | None:
    """``None`` when pyspark ``version`` (default: the installed one) has ``feature`` (a key of
    :data:`FEATURES`); else one line naming the version that has it."""
    entry = FEATURES[feature]
    version = version if version is not None else installed_version()
    parsed = parse_version(version)
    if parsed is not None and parsed >= entry.since:
        return None
    return (
        f"{entry.what} needs pyspark >= {_show(entry.since)} "
        f"(installed: {version or 'none'}; {entry.why})"
    )


def is_connect(obj: Any) -> bool:
    """Whether ``obj`` (a session, a context, a DataFrame) is a Spark Connect client's (told
    by its class's module: nothing is imported)."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


def sql_functions(obj: Any) -> Any:
    """``pyspark.sql.functions`` for expressions on ``obj`` (a session or DataFrame): the
    Spark Connect client's own module for a Connect one (see the module's docstring)."""
    if is_connect(obj):
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions

    return functions


def sql_window(obj: Any) -> Any:
    """``pyspark.sql.Window`` for ``obj``'s kind of session (see :func:`sql_functions`)."""
    if is_connect(obj):
        from pyspark.sql.connect.window import Window as ConnectWindow

        return ConnectWindow
    from pyspark.sql import Window

    return Window
