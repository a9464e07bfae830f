"""The image's entrypoint (deploy/image/entrypoint.sh) keeps Spark's Kubernetes image contract:
``driver`` -> spark-submit in client mode, ``executor`` -> the KubernetesExecutorBackend JVM
from the ``SPARK_*`` variables Spark sets in the pod, anything else run as given; always
under tini.

The script runs here, outside any image, with test stand-ins on PATH: a fake ``tini`` that
checks its options and runs the command, a fake ``java`` and a fake ``spark-submit`` that print
their arguments one a line. The real tini, java and spark-submit run in the image test
(tests/deploy/test_image.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ENTRYPOINT = Path(__file__).resolve().parents[2] / "deploy" / "image" / "entrypoint.sh"

# Test stand-ins, not the real programs.
FAKE_TINI = """#!/bin/sh
# fake tini (test stand-in): records that it ran, checks its options, runs the command
[ "$1" = -s ] && [ "$2" = -- ] || { echo "fake tini: expected '-s --', got: $*" >&2; exit 97; }
echo ran >"$FAKE_TINI_MARK"
shift 2
exec "$@"
"""
FAKE_PRINT_ARGS = """#!/bin/sh
# fake {name} (test stand-in): prints its arguments, one a line
echo "fake {name}"
for arg in "$@"; do printf '%s\\n' "$arg"; done
"""

EXECUTOR_ENV = {
    "SPARK_EXECUTOR_MEMORY": "4096m",
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@driver-svc.ns.svc:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "8",
    "SPARK_APPLICATION_ID": "spark-0123456789abcdef",
    "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "app-exec-3",
}


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def fakes(tmp_path: Path) -> dict[str, Path]:
    """A folder on PATH with the fake tini and java, a fake SPARK_HOME and JAVA_HOME."""
    bin_dir = tmp_path / "bin"
    _executable(bin_dir / "tini", FAKE_TINI)
    _executable(bin_dir / "java", FAKE_PRINT_ARGS.format(name="java on PATH"))
    spark_home = tmp_path / "spark"
    _executable(spark_home / "bin" / "spark-submit", FAKE_PRINT_ARGS.format(name="spark-submit"))
    java_home = tmp_path / "jdk"
    _executable(java_home / "bin" / "java", FAKE_PRINT_ARGS.format(name="java"))
    return {
        "bin": bin_dir,
        "spark_home": spark_home,
        "java_home": java_home,
        "mark": tmp_path / "tini-ran",
    }


def _run(
    fakes: dict[str, Path], *args: str, java_home: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """The entrypoint with a clean environment: only PATH, the fakes' homes and ``env``."""
    base = {
        "PATH": f"{fakes['bin']}:/usr/bin:/bin",
        "SPARK_HOME": str(fakes["spark_home"]),
        "FAKE_TINI_MARK": str(fakes["mark"]),
    }
    if java_home:
        base["JAVA_HOME"] = str(fakes["java_home"])
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_executor_runs_the_kubernetes_executor_backend(fakes: dict[str, Path]) -> None:
    spark_home = fakes["spark_home"]
    result = _run(
        fakes,
        "executor",
        **EXECUTOR_ENV,
        # Spark numbers the executor's JVM options; their order is numeric, not by name.
        SPARK_JAVA_OPT_10="-Dspark.k=10",
        SPARK_JAVA_OPT_2="-Dspark.driver.port=7078",
        SPARK_JAVA_OPT_0="-Dspark.app.name=with space",
        SPARK_CLASSPATH="/opt/extra/a.jar",
        SPARK_EXTRA_CLASSPATH="/opt/extra/b.jar",
        SPARK_CONF_DIR="/opt/spark/conf",
    )
    assert _lines(result) == [
        "fake java",
        "-Dspark.app.name=with space",
        "-Dspark.driver.port=7078",
        "-Dspark.k=10",
        "-Xms4096m",
        "-Xmx4096m",
        "-cp",
        f"/opt/spark/conf:/opt/extra/a.jar:{spark_home}/jars/*:/opt/extra/b.jar",
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
        "--driver-url",
        EXECUTOR_ENV["SPARK_DRIVER_URL"],
        "--executor-id",
        "3",
        "--cores",
        "8",
        "--app-id",
        "spark-0123456789abcdef",
        "--hostname",
        "10.1.2.3",
        "--resourceProfileId",
        "0",
        "--podName",
        "app-exec-3",
    ]
    assert fakes["mark"].read_text() == "ran\n"  # under tini
    assert "KubernetesExecutorBackend" in result.stderr  # the command is logged


def test_executor_class_path_defaults(fakes: dict[str, Path]) -> None:
    """Without SPARK_CONF_DIR, $SPARK_HOME/conf comes first; HADOOP_CONF_DIR next, the jars,
    SPARK_DIST_CLASSPATH last; no empty entry (Java would read it as the work dir)."""
    spark_home = fakes["spark_home"]
    lines = _lines(
        _run(
            fakes,
            "executor",
            **EXECUTOR_ENV,
            HADOOP_CONF_DIR="/etc/hadoop",
            SPARK_DIST_CLASSPATH="/opt/hadoop/*",
        )
    )
    cp = lines[lines.index("-cp") + 1]
    assert cp == f"{spark_home}/conf:/etc/hadoop:{spark_home}/jars/*:/opt/hadoop/*"
    assert lines[1:3] == ["-Xms4096m", "-Xmx4096m"]  # no JVM options given


def test_executor_without_java_home_uses_java_on_path(fakes: dict[str, Path]) -> None:
    lines = _lines(_run(fakes, "executor", java_home=False, **EXECUTOR_ENV))
    assert lines[0] == "fake java on PATH"


def test_executor_names_the_missing_variables(fakes: dict[str, Path]) -> None:
    env = {
        k: v for k, v in EXECUTOR_ENV.items() if k not in ("SPARK_DRIVER_URL", "SPARK_EXECUTOR_ID")
    }
    result = _run(fakes, "executor", **env)
    assert result.returncode == 2
    assert "SPARK_DRIVER_URL SPARK_EXECUTOR_ID not set" in result.stderr
    assert not fakes["mark"].exists()


def test_driver_runs_spark_submit_in_client_mode(fakes: dict[str, Path]) -> None:
    spark_args = [
        "--properties-file",
        "/opt/spark/conf/spark.properties",
        "--class",
        "org.apache.spark.deploy.PythonRunner",
        "local:///opt/app/train.py",
        "--epochs",
        "2 3",
    ]
    result = _run(fakes, "driver", *spark_args, SPARK_DRIVER_BIND_ADDRESS="10.1.2.4")
    assert _lines(result) == [
        "fake spark-submit",
        "--conf",
        "spark.driver.bindAddress=10.1.2.4",
        "--deploy-mode",
        "client",
        *spark_args,
    ]
    assert fakes["mark"].read_text() == "ran\n"


def test_driver_needs_the_bind_address(fakes: dict[str, Path]) -> None:
    result = _run(fakes, "driver", "--class", "x")
    assert result.returncode == 2
    assert "SPARK_DRIVER_BIND_ADDRESS not set" in result.stderr


def test_anything_else_runs_as_given_under_tini(fakes: dict[str, Path]) -> None:
    result = _run(fakes, "sh", "-c", 'echo "$0 and $1"', "one", "two words")
    assert _lines(result) == ["one and two words"]
    assert fakes["mark"].read_text() == "ran\n"
    assert result.stderr == ""


def test_no_command_is_an_error(fakes: dict[str, Path]) -> None:
    result = _run(fakes)
    assert result.returncode == 2
    assert "expected driver, executor or a command" in result.stderr


def test_log_path_copies_the_output(fakes: dict[str, Path], tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    result = _run(fakes, "sh", "-c", "echo out; echo err >&2", K8S_SPARK_LOG_PATH=str(logs))
    assert result.stdout == "out\n"
    assert "err" in result.stderr
    # The tees have exited (closed our pipes) when run() returns: their files are complete.
    assert (logs / "stdout").read_text() == "out\n"
    assert (logs / "stderr").read_text() == "err\n"
