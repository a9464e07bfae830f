"""Spark Connect without a server: ``sc://`` masters map to the Connect backend, a session
plan carries only session settings and says what does not apply, data jobs are refused in
one line naming the classic alternative, and a client without the ``[connect]`` extra's
packages gets one line naming the extra (the module hidden in a subprocess)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuspark.cluster.session import session_plan
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


def test_data_jobs_over_connect_are_one_line_naming_the_classic_alternative() -> None:
    with pytest.raises(ClusterError) as err:
        session_plan(URL, kind="data")
    assert "do not run over Spark Connect" in err.value.message
    assert "\n" not in str(err.value)
    assert "cluster up` without --connect" in str(err.value.remedy)


def test_a_connect_dataframe_is_refused_for_data_jobs() -> None:
    class DataFrame:  # stands for pyspark.sql.connect.dataframe.DataFrame
        __module__ = "pyspark.sql.connect.dataframe"

    assert is_connect_session(DataFrame()) and not is_connect_session(object())
    with pytest.raises(ClusterError, match="from_dataframe does not run over Spark Connect"):
        require_classic(DataFrame(), "from_dataframe")
    require_classic(object(), "from_dataframe")  # a classic one passes


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
