"""Shared fixtures: one real embedded Spark standalone cluster for the whole test session.

The cluster has 2 workers x 2 GPU addresses (simulated here: no NVIDIA GPU), 8 task slots and
4g each, shaped by the built-in spec. ``spark`` is the default session on it, built through the
one session path (2 GPUs per executor, 0.25 GPU per task); ``spark_factory.get(**conf)`` gives
a session with other settings, rebuilding only when the settings change.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session", autouse=True)
def _python_for_executors() -> None:
    """Executors must run this interpreter, or tasks fail with ModuleNotFoundError."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session", autouse=True)
def _monitor_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Prometheus target files of the tests' clusters and runs go to a temp dir, not $HOME."""
    old = os.environ.get("GPUSPARK_MONITOR_DIR")
    path = tmp_path_factory.mktemp("gpuspark-monitor")
    os.environ["GPUSPARK_MONITOR_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("GPUSPARK_MONITOR_DIR", None)
    else:
        os.environ["GPUSPARK_MONITOR_DIR"] = old


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Spark master + 2 workers, each advertising 2 GPU addresses."""
    from gpuspark.cluster.local import LocalCluster

    state_dir = tmp_path_factory.mktemp("gpuspark-cluster")
    cluster = LocalCluster(workers=2, cores=8, memory="4g", gpus=2, state_dir=state_dir)
    with cluster:
        yield cluster


class SparkFactory:
    """Hands out one SparkSession at a time; rebuilds it only when the conf changes."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self._conf: dict[str, str] | None = None
        self._spark: Any = None

    def get(self, **overrides: Any) -> Any:
        """A data session on the cluster with ``overrides`` (``spark.x`` keys) applied last."""
        conf = {k: str(v) for k, v in overrides.items()}
        if self._spark is not None and conf == self._conf and self._alive():
            return self._spark
        self.stop()
        self._spark = self.cluster.session(app_name="gpuspark-tests", **conf)
        self._conf = conf
        return self._spark

    def _alive(self) -> bool:
        """False when a test stopped the shared session (``getOrCreate`` hands out the active
        session, and a test that stops what it got stops this one)."""
        from py4j.protocol import Py4JError
        from pyspark.sql import SparkSession

        try:
            active = SparkSession.getActiveSession()
        except Py4JError:  # a test interrupted mid-call (its timeout) left the gateway unusable
            return False
        return active is not None and active.sparkContext is self._spark.sparkContext

    def stop(self) -> None:
        """Stop the current session, if any."""
        if self._spark is not None:
            spark, self._spark, self._conf = self._spark, None, None
            try:
                spark.stop()
            except Exception as exc:  # a broken session is replaced, not fatal
                print(f"conftest: stopping the previous session failed: {exc}", file=sys.stderr)


@pytest.fixture(scope="session")
def spark_factory(local_cluster: Any) -> Iterator[SparkFactory]:
    """Sessions on the shared cluster with chosen settings (rebuilds cost ~10 s)."""
    factory = SparkFactory(local_cluster)
    yield factory
    factory.stop()


@pytest.fixture()
def spark(spark_factory: SparkFactory) -> Any:
    """The default session: 2 executors x 2 GPUs, 0.25 GPU per task, 16 task slots."""
    return spark_factory.get()


@pytest.hookimpl(trylast=True)  # after `-m` deselected: only the tests that run count
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that build a session with other settings (marker ``own_session``) last
    in their module, and their modules after every other module, each in its order: the shared
    session is rebuilt for each of them (about 10 s, with cold executors and Python workers),
    and then not again for every default-session test that would have followed."""
    order = {path: n for n, path in enumerate(dict.fromkeys(i.path for i in items))}
    own = {i.path for i in items if i.get_closest_marker("own_session")}

    def key(item: pytest.Item) -> tuple[int, int, bool]:
        if item.path not in own:
            return (0, 0, False)
        return (1, order[item.path], item.get_closest_marker("own_session") is not None)

    items.sort(key=key)  # stable: every other test keeps its place


# --------------------------------------------------------------------------- the time budget

_BUDGET_ENV = "GPUSPARK_TEST_BUDGET_S"
_started: list[float] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    """Note when the run began (for :func:`pytest_sessionfinish`)."""
    import time

    _started.append(time.monotonic())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a green run that took longer than ``GPUSPARK_TEST_BUDGET_S`` seconds (``make
    test`` sets it), so that no change can quietly double the default run's time."""
    import time

    budget = os.environ.get(_BUDGET_ENV)
    if not budget or not _started or exitstatus != 0:
        return
    took = time.monotonic() - _started[0]
    if took > float(budget):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = (
            f"the test run took {took:.0f} s, over its budget of {float(budget):g} s "
            f"({_BUDGET_ENV}): move slow end-to-end tests to `slow`, or share a cluster"
        )
        if reporter is not None:
            reporter.write_line(line, red=True, bold=True)
        else:
            print(line, file=sys.stderr)
