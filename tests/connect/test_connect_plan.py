"""Spark Connect without a server: ``sc://`` masters map to the Connect backend, a session
plan carries only session settings and says what does not apply, DataFrame-only data jobs
(prep, from_dataframe, shards writes) get a Connect plan while jobs that need the RDD API
are refused in one line naming the classic alternative, the embedded cluster's server is
chosen or refused by the same rule, and a client without the ``[connect]`` extra's packages
gets one line naming the extra (the module hidden in a subprocess)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuspark.cluster.connect_session import through_connect
from gpuspark.cluster.session import session_plan
from gpuspark.cluster.state import ClusterState, ConnectState
from gpuspark.errors import ClusterError
from gpuspark.schedulers import ConnectBackend, backend_for, is_connect_session
from gpuspark.schedulers.connect import client_conf, redact_url, require_classic, server_only

URL = "sc://127.0.0.1:15002"


def test_sc_masters_are_the_connect_backends() -> None:
    backend = backend_for(URL)
    assert isinstance(backend, ConnectBackend)
    assert backend.is_local(URL) and not backend.is_local("sc://spark.example.com:443")
    assert backend.master_address("sc://h:1234/;token=x") == ("h", 1234)
    assert backend.master_address("sc://h") == ("h", 15002)
    assert not backend.matches("spark://127.0.0.1:7077")
    with pytest.raises(ClusterError, match="sc://host:port"):
        backend_for("mesos://x")  # the forms of master URL list Connect's too


def test_client_sets_only_session_settings() -> None:
    conf = {"spark.sql.shuffle.partitions": "8", "spark.cores.max": "4", "spark.gpuspark.team": "a"}
    assert client_conf(conf) == {"spark.sql.shuffle.partitions": "8"}
    assert server_only(conf) == ["spark.cores.max", "spark.gpuspark.team"]
    assert redact_url("sc://localhost:1/;token=s3cret;use_ssl=false") == (
        "sc://localhost:1/;token=***;use_ssl=false"
    )


def test_training_plan_is_a_connect_client_naming_what_does_not_apply() -> None:
    plan = session_plan(URL, kind="training", spark_cores_max=4, spark_sql_shuffle_partitions=3)
    assert plan.remote and plan.master == URL
    assert all(k.startswith("spark.sql.") for k in plan.conf)
    assert plan.conf["spark.sql.shuffle.partitions"] == "3"
    assert plan.env == {}
    assert [n for n in plan.notes if "spark.cores.max" in n and "server's" in n]
    assert plan.materialize().startswith(f"spark-submit --remote {URL} ")


def test_dataframe_only_data_jobs_get_a_connect_plan() -> None:
    plan = session_plan(URL, kind="data", dataframe_only=True, spark_sql_shuffle_partitions=4)
    assert plan.remote and plan.master == URL
    assert plan.conf["spark.sql.shuffle.partitions"] == "4"


def test_rdd_data_jobs_over_connect_are_one_line_naming_the_classic_alternative() -> None:
    with pytest.raises(ClusterError) as err:
        session_plan(URL, kind="data", app_name="gpuspark-predict")
    assert "this job (gpuspark-predict) does not run over Spark Connect" in err.value.message
    assert "prep, from_dataframe and shards writes do" in err.value.message
    assert "\n" not in str(err.value)
    assert "cluster up` without --connect" in str(err.value.remedy)


def test_a_connect_dataframe_is_refused_where_the_rdd_api_is_needed() -> None:
    class DataFrame:  # stands for pyspark.sql.connect.dataframe.DataFrame
        __module__ = "pyspark.sql.connect.dataframe"

    assert is_connect_session(DataFrame()) and not is_connect_session(object())
    with pytest.raises(ClusterError, match="predict does not run over Spark Connect"):
        require_classic(DataFrame(), "predict")
    require_classic(object(), "predict")  # a classic one passes


def _with_server(alive_pid: int) -> ClusterState:
    server = ConnectState("sc://127.0.0.1:15002", alive_pid, 15002, "log")
    return ClusterState("spark://127.0.0.1:1", "127.0.0.1", 1, 1, 2, True, connect=server)


def test_the_embedded_server_takes_what_runs_over_connect_and_refuses_the_rest() -> None:
    import os

    running = _with_server(os.getpid())  # a live pid: the server "runs"
    url = "sc://127.0.0.1:15002"
    assert through_connect(running, data=False, default=True) == url
    assert through_connect(running, data=True, default=True, dataframe_only=True) == url
    assert through_connect(running, data=False, default=False) is None  # spark:// named
    with pytest.raises(ClusterError, match="this job uses Spark's RDD API"):
        through_connect(running, data=True, default=True)
    with pytest.raises(ClusterError, match="would wait for them") as err:
        through_connect(running, data=True, default=False, dataframe_only=True)
    assert f"--master {url}" in str(err.value.remedy)
    stopped = _with_server(2**22 + 1)  # no such pid: the server is not running
    assert through_connect(stopped, data=True, default=True) is None
    assert through_connect(None, data=True, default=True) is None


@pytest.mark.parametrize("module", ["grpc", "google.rpc", "zstandard"])
def test_missing_connect_extra_is_one_line_naming_it(module: str, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('never runs')\n")
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules[{module!r}] = None  # as if the [connect] extra were not installed
        from gpuspark.cli.main import main
        sys.exit(main(["launch", "-n", "2", "--master", {URL!r}, "train.py"]))
        """
    )
    cmd = [sys.executable, "-c", code]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert "Spark Connect, whose client needs" in lines[0]
    assert "pip install 'gpuspark[connect]'" in lines[0]


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _ConnectSession:
    """Stands for a Spark Connect client's session: its server application's settings."""

    __module__ = "pyspark.sql.connect.session"

    def __init__(self, **values: str) -> None:
        self.conf = _Conf({k.replace("_", "."): v for k, v in values.items()})


def test_a_connect_servers_task_slots_come_from_its_settings() -> None:
    from gpuspark.data.prep.common import cores

    assert cores(_ConnectSession(spark_cores_max="4")) == 4  # the embedded cluster's server
    assert cores(_ConnectSession(spark_cores_max="8", spark_task_cpus="2")) == 4
    assert cores(_ConnectSession(spark_default_parallelism="6", spark_cores_max="8")) == 6
    assert cores(_ConnectSession(spark_executor_instances="3", spark_executor_cores="4")) == 12
    assert cores(_ConnectSession(spark_executor_instances="3")) == 2  # not enough to tell
    assert cores(_ConnectSession()) == 2
