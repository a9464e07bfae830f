"""`gpuspark cluster up` asked for what it cannot or will not give, as a user types it.

- a shape other than the running cluster's: once "already running; nothing started", exit 0,
  the request ignored; `--hosts 3` with 2 workers once silently gave 2 hosts;
- a shape this machine cannot hold: `--workers 99` once started 99 JVMs on 2 CPUs, waited
  139 s and left 97 worker folders; now refused before anything starts;
- a start that fails half way leaves no worker folder and no process behind;
- a team whose ceiling is below the running cluster's executors: the error once named the
  spec's `executor_gpus`, while the size came from the running cluster.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.main import main
from gpuspark.cluster.machine import Machine, check_machine
from gpuspark.cluster.shape import EmbeddedShape
from gpuspark.cluster.state import ClusterState, NetnsHost, NetnsState, WorkerState, write_state
from gpuspark.errors import ClusterError
from gpuspark.spec import example_spec

# --------------------------------------------------------------------------- machine rules


def _shape(workers: int, memory: str = "1g") -> EmbeddedShape:
    return EmbeddedShape(
        workers=workers,
        gpus_per_worker=2,
        cores_per_worker=2,
        memory_per_worker=memory,
        executor_gpus=2,
        executor_cores=2,
        task_cpus=1,
        task_gpu_amount=1.0,
        executor_memory="1g",
    )


def test_machine_rules_count_cpus_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_DAEMON_MEMORY", raising=False)
    small = Machine(cpus=2, memory_mb=8192)
    check_machine(_shape(8), Machine(cpus=2, memory_mb=None))  # 4 per CPU; memory unknown
    check_machine(_shape(2, "3g"), small)  # 2 x (3072 + 512) + 512 = 7680 MiB
    with pytest.raises(ClusterError) as cpus:
        check_machine(_shape(9), Machine(cpus=2, memory_mb=None))
    assert "9 worker JVMs on 2 CPU(s), more than 4 per CPU (8)" in str(cpus.value)
    with pytest.raises(ClusterError) as memory:
        check_machine(_shape(2, "4g"), small)
    text = str(memory.value)
    assert "2 workers x (4g for executors + 512 MiB worker JVM) + 512 MiB master" in text
    assert "= 9728 MiB, more than the machine's 8192 MiB" in text
    assert "at most 1 workers of 4g" in text
    monkeypatch.setenv("SPARK_DAEMON_MEMORY", "1g")  # the daemons' own heap counts
    with pytest.raises(ClusterError, match="1024 MiB worker JVM"):
        check_machine(_shape(2, "3g"), small)


@pytest.mark.spark
def test_up_refuses_99_workers_before_starting_anything(tmp_path: Path, cli: Any) -> None:
    state = tmp_path / "state"
    proc = cli("cluster", "up", "--workers", "99", cwd=tmp_path, state=state, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    cpus = len(os.sched_getaffinity(0))
    assert f"99 worker JVMs on {cpus} CPU(s), more than 4 per CPU ({4 * cpus})" in err
    assert "99 workers x (1g for executors + 512 MiB worker JVM)" in err
    assert "nothing started" in err and "Traceback" not in err
    assert err.count("\n") == 1  # one line
    assert not state.exists()  # no folder, no state file, no process


def test_hosts_need_a_worker_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = str(tmp_path / "state")
    argv = ["cluster", "up", "--hosts", "3", "--workers", "2", "--state-dir", state]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert (
        "--hosts 3 (hosts=3) needs a worker on each host, but --workers 2 (workers=2) would give"
        " only 2 host(s)"
    ) in err
    assert not Path(state).exists()
    from gpuspark.cluster.local import LocalCluster

    assert LocalCluster(hosts=3, gpus=0, cores=1).plan_shape([]).workers == 3  # --hosts alone


def _spark_processes_of(path: Path) -> list[int]:
    """Pids whose command line names ``path`` (the cluster's JVMs name their state dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in cmdline and "java" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.spark
def test_a_start_failing_half_way_leaves_nothing_behind(tmp_path: Path, cli: Any) -> None:
    state = tmp_path / "state"
    argv = ["--workers", "2", "--cores", "1", "--gpus", "0", "--timeout", "0.1"]
    proc = cli("cluster", "up", *argv, cwd=tmp_path, state=state, timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "only 0 of 2 Spark workers registered" in proc.stderr
    assert not list(state.glob("worker-*")), "worker folders left behind"
    assert not (state / "cluster.json").exists()
    assert (state / "logs").is_dir()  # the error names the logs: they stay
    assert not _spark_processes_of(state), "Spark processes left behind"


# --------------------------------------------------------------------------- a running cluster


@pytest.mark.spark
def test_up_with_another_shape_than_the_running_one_says_so(
    local_cluster: Any, tmp_path: Path, cli: Any
) -> None:
    """The shared cluster: 2 workers x 8 cores, 4g, 2 simulated GPUs."""
    state = Path(local_cluster.state_dir)
    pid = local_cluster.state.master_pid
    more = cli("cluster", "up", "--workers", "3", cwd=tmp_path, state=state, timeout=60)
    assert more.returncode == 1, more.stdout + more.stderr
    err = more.stderr
    assert f"the embedded cluster at {local_cluster.master_url} runs 2 workers of 8 cores" in err
    assert "this request is 3 workers of" in err and "(workers 2 -> 3)" in err
    assert "`gpuspark cluster down && gpuspark cluster up --workers 3`" in err
    assert "nothing started" in err

    hosts = cli("cluster", "up", "--hosts", "3", cwd=tmp_path, state=state, timeout=60)
    assert hosts.returncode == 1 and "hosts none -> 3" in hosts.stderr
    assert "`gpuspark cluster down && gpuspark cluster up --hosts 3`" in hosts.stderr

    netns = cli("cluster", "up", "--hosts", "2", "--netns", cwd=tmp_path, state=state, timeout=60)
    assert netns.returncode == 1 and "network namespaces off -> on" in netns.stderr, netns.stderr
    assert "gpuspark cluster up --hosts 2 --netns`" in netns.stderr

    same = ["--workers", "2", "--cores", "8", "--memory", "4096m", "--gpus", "2", "--json"]
    again = cli("cluster", "up", *same, cwd=tmp_path, state=state, timeout=60)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["master_pid"] == pid
    assert local_cluster.status().alive_workers == 2  # untouched


def _netns_state(state_dir: Path, *, workers: bool = True) -> None:
    """The ``cluster.json`` a ``cluster up --hosts 2 --netns`` leaves when it is killed, its
    master (this test's own process, alive) still recorded: no root, no namespace needed."""
    net = NetnsState("abc123", "gs-abc123-br", "198.18.0.1", 24, "")
    net.hosts = [
        NetnsHost(f"gpuspark-abc123-h{i}", f"gs-abc123-h{i}", "eth0", f"198.18.0.{2 + i}")
        for i in range(2)
    ]
    state = ClusterState(
        master_url="spark://198.18.0.1:7077",
        host="198.18.0.1",
        master_pid=os.getpid(),
        master_port=7077,
        webui_port=8080,
        gpus_simulated=True,
        shape=_shape(2).as_dict(),
        hosts=2,
        netns=net,
    )
    if workers:
        state.workers = [
            WorkerState(
                i, os.getpid(), 7078, 8081, 2, "1g", ["0", "1"], "w.log", f"198.18.0.{2 + i}"
            )
            for i in range(2)
        ]
    state_dir.mkdir()
    write_state(state_dir / "cluster.json", state)


@pytest.mark.parametrize("workers", [True, False])
def test_plain_up_names_the_running_clusters_own_addresses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: bool
) -> None:
    """After a killed ``cluster up --hosts 2 --netns``, a plain ``cluster up`` said the running
    cluster was on ``2 hosts 127.0.0.2-3`` while ``cluster status`` said 198.18.0.2-3."""
    state = tmp_path / "state"
    _netns_state(state, workers=workers)
    assert main(["cluster", "up", "--state-dir", str(state)]) == 1
    err = capsys.readouterr().err
    assert "runs 2 workers of 2 cores, 1g, 2 GPUs each on 2 hosts 198.18.0.2-3 in network" in err
    assert "127.0.0.2" not in err and "(network namespaces on -> off)" in err
    asked = main(["cluster", "up", "--hosts", "3", "--netns", "--state-dir", str(state)])
    assert asked == 1
    assert "this request is 3 workers of" in capsys.readouterr().err  # no address invented


def _team_spec(tmp_path: Path) -> Path:
    """The example spec on the embedded cluster: executors of 1 GPU, team 'research' of at
    most 1 GPU, open to everyone."""
    text = example_spec().replace('master = "spark://dgx01:7077"', 'master = "local-cluster"')
    text = text.replace('root = "hdfs://namenode:8020/gpuspark"', f'root = "{tmp_path}/data"')
    text = text.replace("guaranteed_gpus = 4\nmax_gpus = 8", "guaranteed_gpus = 1\nmax_gpus = 1")
    text = text.replace('members = ["erin"]', "")
    path = tmp_path / "team.toml"
    path.write_text(text)
    return path


@pytest.mark.spark
def test_team_below_the_running_clusters_executor_names_the_cluster(
    local_cluster: Any, tmp_path: Path, cli: Any
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = _team_spec(tmp_path)
    pq.write_table(pa.table({"x": [1.0, 2.0], "y": [0, 1]}), tmp_path / "t.parquet")
    dst = tmp_path / "data" / "teams" / "research" / "out"
    args = ["prep", "parquet", str(tmp_path / "t.parquet"), str(dst), "--label", "y"]
    args += ["--spec", str(spec), "--team", "research"]
    proc = cli(*args, cwd=tmp_path, state=Path(local_cluster.state_dir), timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    assert "team 'research' may hold 1 GPU, less than one executor's 2 GPUs on the running" in err
    assert "as `gpuspark cluster up` sized them" in err
    assert "the spec's [spark] executor_gpus = 1 does not size a running cluster" in err
    assert "`gpuspark cluster down && gpuspark cluster up --gpus 1`" in err
    assert "lower [spark] executor_gpus" not in err  # the spec's is 1 already
    assert not dst.exists()
