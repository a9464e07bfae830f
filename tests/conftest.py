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

from _s3 import s3, s3_server  # noqa: F401  (fixtures: the test S3 server)


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


_SHARED_CLUSTER = frozenset({"local_cluster", "spark_factory", "spark"})


def _on_shared_cluster(item: pytest.Item) -> bool:
    return not _SHARED_CLUSTER.isdisjoint(getattr(item, "fixturenames", ()))


# pytest-xdist 3.8's ``loadgroup`` finds a test's group in its node id, which it rewrites on the
# worker; pytest 9 no longer lets a plugin change a node id, so every test would be a unit of its
# own. Here each worker writes its tests' groups to a file, and the controller's scheduler reads
# them (``pytest_xdist_make_scheduler``).
_UNITS_ENV = "TESTS_XDIST_UNITS_DIR"


def pytest_configure(config: pytest.Config) -> None:
    """On the controller of a ``--dist loadgroup`` run: a folder for the workers' groups (the
    workers inherit this environment)."""
    import tempfile

    if getattr(config.option, "dist", "no") == "loadgroup" and not hasattr(config, "workerinput"):
        os.environ[_UNITS_ENV] = tempfile.mkdtemp(prefix="pytest-units-")


def pytest_unconfigure(config: pytest.Config) -> None:
    """On the controller: remove the groups' folder."""
    import shutil

    if not hasattr(config, "workerinput") and os.environ.get(_UNITS_ENV):
        shutil.rmtree(os.environ.pop(_UNITS_ENV), ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before the worker tells the controller its collection
def pytest_collection_finish(session: pytest.Session) -> None:
    """On a worker: write each test's group (its ``xdist_group`` marker) for the scheduler."""
    import json

    folder, worker = os.environ.get(_UNITS_ENV), getattr(session.config, "workerinput", None)
    if not folder or not worker:  # not a worker (a pytest that a test runs inherits the env)
        return
    units = {}
    for item in session.items:
        mark = item.get_closest_marker("xdist_group")
        units[item.nodeid] = str(mark.args[0]) if mark and mark.args else item.nodeid
    name = worker["workerid"]
    tmp = os.path.join(folder, f".{name}.json.tmp")
    with open(tmp, "w") as out:
        json.dump(units, out)
    os.replace(tmp, os.path.join(folder, f"{name}.json"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: xdist's scope scheduling, a unit being the tests of one group."""
    folder = os.environ.get(_UNITS_ENV)
    if getattr(config.option, "dist", "no") != "loadgroup" or not folder:
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        _units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._units is None:
                self._units = _read_units(folder)
            return self._units.get(nodeid, nodeid)

    return GroupScheduling(config, log)


def _read_units(folder: str) -> dict[str, str]:
    """The groups the workers wrote (they collected the same tests)."""
    import json
    from pathlib import Path

    units: dict[str, str] = {}
    for path in sorted(Path(folder).glob("*.json")):
        units.update(json.loads(path.read_text()))
    return units


@pytest.hookimpl(trylast=True)  # after `-m` deselected: only the tests that run count
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the run and make its units of work.

    The modules with a test on the shared cluster run first, whole, as one unit: with
    ``make test``'s 2 workers (pytest-xdist, ``--dist loadgroup``) one worker runs them, in
    this order, so the run starts one shared cluster, a module's own fixtures are built once,
    and the longest unit starts at once. Every other module is a unit of its own, in its
    place, for whichever worker is free.

    Among the first, the tests that build a session with other settings (marker
    ``own_session``) run last in their module, and their modules after every other module,
    each in its order: the shared session is rebuilt for each of them (about 10 s, with cold
    executors and Python workers), and then not again for every default-session test that
    would have followed."""
    shared = {i.path for i in items if _on_shared_cluster(i)}
    order = {path: n for n, path in enumerate(dict.fromkeys(i.path for i in items))}
    own = {i.path for i in items if i.get_closest_marker("own_session")}

    def key(item: pytest.Item) -> tuple[int, int, bool]:
        if item.path not in shared:
            return (2, 0, False)
        if item.path not in own:
            return (0, 0, False)
        return (1, order[item.path], item.get_closest_marker("own_session") is not None)

    items.sort(key=key)  # stable: every other test keeps its place
    for item in items:
        group = "shared-cluster" if item.path in shared else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


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
