"""JVM start-up options of drivers and executors on this machine (:mod:`gpuspark.cluster.jvm`):
the driver's class-data-sharing archive when it exists, the light JIT/GC options where asked,
the user's own JVM options winning, ``GPUSPARK_JVM_TUNING=0`` turning it off, and what a
failed archive build leaves. The archive build itself (a real driver JVM writing its
classes, about 30 s) is ``slow``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cluster import jvm
from gpuspark.cluster.session import session_plan

DRIVER = "spark.driver.extraJavaOptions"
EXECUTOR = "spark.executor.extraJavaOptions"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Archives under a fresh folder (not the user's ~/.gpuspark/jvm)."""
    monkeypatch.setattr(jvm, "archive_dir", lambda: tmp_path / "jvm")
    monkeypatch.delenv("GPUSPARK_JVM_TUNING", raising=False)
    return tmp_path / "jvm"


def _archive(home: Path) -> Path:
    path = jvm.archive_path()
    assert path is not None, "Java is installed here (make setup)"
    assert path.parent == home
    home.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a real archive")  # only its existence is read here
    return path


def test_no_archive_no_light_options_leaves_the_conf_alone(home: Path) -> None:
    conf: dict[str, str] = {}
    jvm.java_options(conf, driver_light=False, executor_light=False)
    assert conf == {}


def test_the_archive_goes_to_the_driver_only(home: Path) -> None:
    path = _archive(home)
    conf: dict[str, str] = {}
    jvm.java_options(conf, driver_light=False, executor_light=False)
    assert f"-XX:SharedArchiveFile={path}" in conf[DRIVER] and jvm.LIGHT not in conf[DRIVER]
    assert EXECUTOR not in conf


def _executor_archive(home: Path) -> Path:
    path = jvm.executor_archive_path()
    assert path is not None and path.parent == home
    home.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a real archive")
    return path


def test_the_executor_archive_goes_with_its_empty_conf_folder_where_asked(home: Path) -> None:
    path = _executor_archive(home)
    conf: dict[str, str] = {}
    jvm.java_options(conf, driver_light=False, executor_light=True, executor_archive=True)
    assert conf[EXECUTOR] == f"{jvm.LIGHT} -XX:SharedArchiveFile={path} {jvm._QUIET}"
    folder = Path(conf["spark.executorEnv.SPARK_CONF_DIR"])
    assert folder == home / "executor-conf" and folder.is_dir() and not any(folder.iterdir())
    data: dict[str, str] = {}  # a data job's executors: the archive, the JVM's own JIT and GC
    jvm.java_options(data, driver_light=False, executor_light=False, executor_archive=True)
    assert data[EXECUTOR] == f"-XX:SharedArchiveFile={path} {jvm._QUIET}"
    elsewhere: dict[str, str] = {}  # not the embedded cluster's executors
    jvm.java_options(elsewhere, driver_light=False, executor_light=False)
    assert elsewhere == {}


def test_no_executor_archive_built_no_conf_folder(home: Path) -> None:
    conf: dict[str, str] = {}
    jvm.java_options(conf, driver_light=False, executor_light=True, executor_archive=True)
    assert conf == {EXECUTOR: jvm.LIGHT}


def test_the_users_own_executor_options_keep_their_conf_folder(home: Path) -> None:
    _executor_archive(home)
    conf = {EXECUTOR: "-Xshare:off"}
    jvm.java_options(conf, driver_light=False, executor_light=True, executor_archive=True)
    assert conf == {EXECUTOR: "-Xshare:off"}


def test_a_missing_executor_archive_is_built_in_the_background(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _archive(home)  # the driver's exists
    started: list[Any] = []
    monkeypatch.setattr(jvm.subprocess, "Popen", lambda *a, **k: started.append(a))
    jvm.build_in_background()
    assert len(started) == 1
    _executor_archive(home)
    jvm.build_in_background()
    assert len(started) == 1


def test_light_options_where_asked(home: Path) -> None:
    conf = {DRIVER: "-Dlog4j2.configurationFile=x.xml"}
    jvm.java_options(conf, driver_light=True, executor_light=True)
    assert conf[DRIVER] == f"-Dlog4j2.configurationFile=x.xml {jvm.LIGHT}"
    assert conf[EXECUTOR] == jvm.LIGHT


@pytest.mark.parametrize(
    "own", ["-XX:+UseG1GC", "-XX:+UseParallelGC", "-XX:TieredStopAtLevel=4", "-Xshare:off"]
)
def test_the_users_own_jvm_choice_wins(home: Path, own: str) -> None:
    _archive(home)
    conf = {DRIVER: own, EXECUTOR: own}
    jvm.java_options(conf, driver_light=True, executor_light=True)
    assert conf == {DRIVER: own, EXECUTOR: own}


def test_tuning_off_by_environment(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _archive(home)
    monkeypatch.setenv("GPUSPARK_JVM_TUNING", "0")
    conf: dict[str, str] = {}
    jvm.java_options(conf, driver_light=True, executor_light=True)
    assert conf == {}
    assert jvm.build_archive() is None


def test_a_local_master_gets_the_archive_a_remote_one_nothing(home: Path) -> None:
    path = _archive(home)
    local = session_plan("local[2]").conf
    assert f"-XX:SharedArchiveFile={path}" in local[DRIVER]
    assert jvm.LIGHT not in local[DRIVER] and jvm.LIGHT not in local.get(EXECUTOR, "")
    remote = session_plan("spark://10.0.0.1:7077").conf
    assert "SharedArchiveFile" not in remote.get(DRIVER, "")
    assert jvm.LIGHT not in remote.get(DRIVER, "") + remote.get(EXECUTOR, "")


def test_a_failed_build_is_not_retried_in_the_background(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, 1, "", "Error: no JVM today\n")

    monkeypatch.setattr(jvm, "_java_major", lambda java: 17)
    monkeypatch.setattr(jvm.subprocess, "run", failing)
    assert jvm.build_archive() is None  # the driver's, then the executors'
    targets = [jvm.archive_path(), jvm.executor_archive_path()]
    failed = []
    for target in targets:
        assert target is not None and not target.exists()
        assert "no JVM today" in target.with_suffix(".failed").read_text()
        failed.append(target.with_suffix(".failed").name)
    assert sorted(p.name for p in home.iterdir() if p.is_file()) == sorted(failed)  # no temp
    started: list[Any] = []
    monkeypatch.setattr(jvm.subprocess, "Popen", lambda *a, **k: started.append(a))
    jvm.build_in_background()
    assert started == []


def test_old_archives_beyond_three_are_removed(home: Path) -> None:
    home.mkdir(parents=True)
    old = []
    for i in range(4):
        p = home / f"driver-old{i}.jsa"
        p.write_bytes(b"x")
        os.utime(p, (1000 + i, 1000 + i))
        old.append(p)
    current = home / "driver-new.jsa"
    current.write_bytes(b"x")
    jvm._remove_stale(current)
    assert sorted(p.name for p in home.iterdir()) == ["driver-new.jsa", "driver-old2.jsa",
                                                       "driver-old3.jsa"]  # fmt: skip


def test_a_killed_builds_half_written_archive_is_removed(home: Path) -> None:
    home.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    orphan = home / f".driver-k.jsa.{dead.pid}.tmp"  # its builder was killed mid-write
    running = home / f".driver-k.jsa.{os.getpid()}.tmp"  # a build still under way
    for p in (orphan, running):
        p.write_bytes(b"x")
    current = home / "driver-new.jsa"
    current.write_bytes(b"x")
    jvm._remove_stale(current)
    assert not orphan.exists()
    assert running.exists()


@pytest.mark.slow  # a real driver JVM writes its classes at exit (~30 s)
def test_the_built_archive_is_mapped_by_a_local_driver(home: Path) -> None:
    built = jvm.build_archive()
    assert built is not None and built.stat().st_size > 10_000_000
    assert jvm.build_archive() == built  # built once
    # -Xshare:on: a driver JVM that cannot map the archive refuses to start
    code = (
        "import sys; from pyspark.sql import SparkSession; "
        "from gpuspark.cluster.plan import local_defaults; "
        "b = SparkSession.builder.master('local[1]'); "
        "[b.config(k, v) for k, v in local_defaults().items()]; "
        f"b.config('{DRIVER}', '-XX:SharedArchiveFile={built} -Xshare:on'); "
        "s = b.getOrCreate(); print('rows', s.range(3).count()); s.stop()"
    )
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env
    )
    assert out.returncode == 0 and "rows 3" in out.stdout, out.stderr[-2000:]


@pytest.mark.slow  # a temporary one-worker cluster; its executor writes its classes (~60 s)
def test_the_built_executor_archive_is_mapped_by_an_embedded_clusters_executor(
    home: Path, tmp_path: Path
) -> None:
    from gpuspark.cluster.executor_archive import executor_class_path
    from gpuspark.cluster.local import LocalCluster

    built = jvm.build_executor_archive()
    assert built is not None and built.stat().st_size > 10_000_000
    assert jvm.build_executor_archive() == built  # built once
    state = tmp_path / "state"
    # -Xshare:on: an executor that cannot map the archive refuses to start (and Spark starts
    # another, forever: the child process has a timeout)
    own = {
        EXECUTOR: f"-XX:SharedArchiveFile={built} -Xshare:on",
        "spark.executorEnv.SPARK_CONF_DIR": str(jvm.executor_conf_dir()),
    }
    code = (
        "from gpuspark.cluster.local import LocalCluster\n"
        f"with LocalCluster(workers=1, cores=1, gpus=0, state_dir={str(state)!r}) as c:\n"
        f"    s = c.session(**{own!r})\n"
        "    print('sum', s.sparkContext.parallelize(range(10), 2).sum())\n"
        "    s.stop()\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=240
        )
    finally:
        LocalCluster(state_dir=state).stop()  # whatever the child left running
    assert out.returncode == 0 and "sum 45" in out.stdout, out.stderr[-2000:]
    class_path = executor_class_path(state)
    assert class_path is not None and class_path.startswith(str(jvm.executor_conf_dir()))
