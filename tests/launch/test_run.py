"""Running ranks (gpuspark.launch.run): local mode, the CLI, the real embedded Spark cluster."""

from __future__ import annotations

import datetime
import os
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from gpuspark.errors import LaunchError
from gpuspark.launch import restart_count, run

# Executors cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# A rank that never joins fails its peers in 2 minutes, not gloo's default 30.
INIT_TIMEOUT = datetime.timedelta(seconds=120)


# ---------------------------------------------------------------------------- rank functions


def all_reduce_env(value: float) -> dict[str, Any]:
    """Sum ``value * (rank + 1)`` over ranks; gather each rank's launch environment."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=INIT_TIMEOUT)
    rank = dist.get_rank()
    t = torch.tensor([value * (rank + 1)])
    dist.all_reduce(t)
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    mine = {k: os.environ[k] for k in keys}
    mine["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    mine["MASTER"] = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    print(f"rank {rank} sum {t.item():g}")
    dist.destroy_process_group()
    return {"sum": t.item(), "ranks": everyone}


def write_relative(name: str) -> str:
    """Write ``name`` + this rank's number, a relative path; return the working directory."""
    Path(f"{name}-{os.environ['RANK']}.txt").write_text(os.environ["RANK"])
    return os.getcwd()


def fail_on(bad_rank: int, pid_dir: str) -> int:
    """Record this rank's pid, then raise on ``bad_rank``; the others wait in a barrier."""
    import torch.distributed as dist

    Path(pid_dir, str(os.getpid())).touch()
    dist.init_process_group("gloo", timeout=INIT_TIMEOUT)
    if dist.get_rank() == bad_rank:
        raise ValueError(f"boom on rank {bad_rank}")
    dist.barrier()
    time.sleep(60)
    return 0


def train_with_progress(progress_dir: str, steps: int, kill_rank: int) -> list[Any]:
    """Count steps in a progress file per rank; ``kill_rank`` SIGKILLs itself mid-run once."""
    import signal

    import torch
    import torch.distributed as dist

    from gpuspark.train import restart_count

    dist.init_process_group("gloo", timeout=INIT_TIMEOUT)
    rank = dist.get_rank()
    path = Path(progress_dir, f"rank{rank}.txt")
    done = int(path.read_text()) if path.exists() else 0
    starts = restart_count()
    for step in range(done, steps):
        t = torch.ones(1)
        dist.all_reduce(t)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(str(step + 1))
        os.replace(tmp, path)
        if rank == kill_rank and starts == 0 and step == steps // 2:
            os.kill(os.getpid(), signal.SIGKILL)
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, {"rank": rank, "resumed_from": done, "starts": starts})
    dist.destroy_process_group()
    return out


def fail_first_start() -> int:
    """Fail on the first start of the job; report the start count afterwards."""
    from gpuspark.train import restart_count

    if restart_count() == 0:
        raise RuntimeError("first attempt fails")
    return restart_count()


DDP_SCRIPT = textwrap.dedent(
    """
    # A plain torchrun-style DDP script: env vars and init_process_group("gloo"), nothing else.
    import argparse, os
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.steps):
        opt.zero_grad()
        model(torch.full((8, 4), float(rank))).sum().backward()
        opt.step()
    print(f"ddp rank {rank}/{world} local {os.environ['LOCAL_RANK']} done")
    if rank == 0:
        w = model.module.weight.detach().sum().item()
        open(args.out, "w").write(f"{world} {w:.6f}")
    dist.destroy_process_group()
    """
)


def _alive_with(marker: str) -> list[int]:
    """Pids of live processes whose environment holds ``marker`` (the job's agent and ranks)."""
    pids = []
    needle = f"GPUSPARK_TEST_MARK={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path("/proc", entry, "environ").read_bytes()
            state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != "Z":
            pids.append(int(entry))
    return pids


# ---------------------------------------------------------------------------- restart count


def test_restart_count_counts_restarts_and_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    monkeypatch.delenv("GPUSPARK_ATTEMPT", raising=False)
    assert restart_count() == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "2")
    monkeypatch.setenv("GPUSPARK_ATTEMPT", "1")
    assert restart_count() == 4


def parent_threads() -> dict[str, Any]:
    """Names of the threads of this rank's parent (the process it was forked from)."""
    task = Path(f"/proc/{os.getppid()}/task")
    names = sorted((t / "comm").read_text().strip() for t in task.iterdir())
    return {
        "names": names,
        "ppid": os.getppid(),
        "agent": os.environ.get("GPUSPARK_AGENT_PID"),
        "comm": Path("/proc/self/comm").read_text().strip(),
    }


def store_listeners() -> list[str]:
    """The addresses something listens on at ``MASTER_PORT`` (the job's TCP store)."""
    port = int(os.environ["MASTER_PORT"])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            addr, hex_port = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(addr)
                found.append(".".join(str(b) for b in raw[::-1]) if len(raw) == 4 else "::")
    return found


# ---------------------------------------------------------------------------- local mode


def test_local_store_listens_on_loopback_only() -> None:
    assert run(store_listeners, num_processes=2, local=True) == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("max_restarts", "fork_ok"), [(0, True), (1, True), (0, False)], ids=["static", "c10d", "omp"]
)
def test_ranks_are_forked_from_a_single_threaded_parent(
    max_restarts: int, fork_ok: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child forked from a multi-threaded process can inherit a lock nobody releases: the
    TCP store's server thread (``pt_tcpstore_uv``) once hung rank 0 for gloo's 30 minutes.
    Static launches fork ranks from an agent without that thread; c10d launches (restartable),
    and launches from a process that ran OpenMP (test_fork_safety.py), fork them from a fork
    server. This pytest process has run torch: ``fork_ok`` says what a fresh one would."""
    import gpuspark.launch.local as local_mode

    monkeypatch.setattr(local_mode, "import_launcher", lambda: fork_ok)
    out = run(parent_threads, num_processes=2, local=True, max_restarts=max_restarts)
    assert len(out["names"]) == 1 and "pt_tcpstore_uv" not in out["names"], out
    from_agent = max_restarts == 0 and fork_ok
    assert (out["ppid"] == int(out["agent"])) == from_agent
    assert out["comm"] == "gpuspark-rank0"  # what `ps -o comm` shows an operator
    if from_agent:
        assert out["names"] == ["gpuspark-agent0"]


def test_rendezvous_store_refuses_an_agent_of_another_run() -> None:
    """The static rendezvous store carries its run's token: an agent of a second run pointed
    at the same address is refused in one line and never joins; one of the run joins."""
    import socket

    from torch.distributed.elastic.rendezvous import RendezvousError, RendezvousParameters

    from gpuspark.launch._internal import rendezvous

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    store = rendezvous.host_store("127.0.0.1", port, sock.detach(), "run-a")

    def agent(run_id: str) -> Any:
        params = RendezvousParameters(
            rendezvous.BACKEND, f"127.0.0.1:{port}", run_id, 2, 2, rank=1, timeout=10
        )
        return rendezvous._create(params)

    with pytest.raises(RendezvousError, match=f"127.0.0.1:{port} belongs to run run-a, not"):
        agent("run-b").next_rendezvous()
    info = agent("run-a").next_rendezvous()
    assert (info.rank, info.world_size) == (1, 2)
    del store


def test_local_all_reduce_returns_rank0_value_and_streams_logs(capfd: Any) -> None:
    out = run(all_reduce_env, 1.5, num_processes=2, local=True, gpus_per_process=0)
    assert out["sum"] == pytest.approx(1.5 * (1 + 2))
    assert [r["RANK"] for r in out["ranks"]] == ["0", "1"]
    assert {r["WORLD_SIZE"] for r in out["ranks"]} == {"2"}
    text = capfd.readouterr().out
    assert "[rank 0] rank 0 sum 4.5" in text and "[rank 1] rank 1 sum 4.5" in text
    assert "[gpuspark] backend gloo" in text


def test_local_failure_names_rank_and_leaves_no_process(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    with pytest.raises(LaunchError) as exc:
        run(
            fail_on, 1, str(tmp_path), num_processes=2, local=True, env={"GPUSPARK_TEST_MARK": mark}
        )
    msg = str(exc.value)
    assert msg.startswith("rank 1 failed on host localhost: ValueError: boom on rank 1")
    assert "last lines of rank 1" in msg
    assert len(list(tmp_path.iterdir())) == 2
    assert _alive_with(mark) == []


def test_local_second_attempt_resumes_with_restart_count(capfd: Any) -> None:
    assert run(fail_first_start, num_processes=2, local=True, max_attempts=2) == 1
    assert "[gpuspark] retry 1 of 1 after: rank" in capfd.readouterr().out


def test_local_timeout_stops_every_rank(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    with pytest.raises(LaunchError, match="timed out after 3 s"):
        run(
            time.sleep,
            120,
            num_processes=2,
            local=True,
            timeout=3,
            env={"GPUSPARK_TEST_MARK": mark},
        )
    assert _alive_with(mark) == []


def test_cli_launch_runs_plain_ddp_script_locally(tmp_path: Path, capfd: Any) -> None:
    from gpuspark.cli.main import main

    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    out = tmp_path / "out.txt"
    code = main(
        ["launch", "--local", "-n", "2", str(script), "--", "--steps", "2", "--out", str(out)]
    )
    text = capfd.readouterr().out
    assert code == 0, text
    assert "[rank 1] ddp rank 1/2 local 1 done" in text
    assert out.read_text().startswith("2 ")


def test_cli_launch_reports_failure_in_one_line(tmp_path: Path, capsys: Any) -> None:
    from gpuspark.cli.main import main

    script = tmp_path / "bad.py"
    script.write_text("import os\nif os.environ['RANK'] == '1':\n    raise SystemExit('no data')\n")
    code = main(["launch", "--local", "-n", "2", str(script)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("error: rank 1 failed on host localhost: SystemExit: no data")


@pytest.mark.slow
def test_local_sigkill_restarts_and_resumes(tmp_path: Path) -> None:
    out = run(train_with_progress, str(tmp_path), 6, 1, num_processes=2, local=True, max_restarts=1)
    assert all(p.read_text() == "6" for p in tmp_path.glob("rank*.txt"))
    assert {r["starts"] for r in out} == {1} and {r["resumed_from"] for r in out} == {4}


# ---------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_spark_four_ranks_whole_gpus_from_spark(spark: Any, capfd: Any) -> None:
    assert spark.sparkContext.getConf().get("spark.task.resource.gpu.amount") == "0.25"
    out = run(all_reduce_env, 2.0, num_processes=4, spark=spark)
    assert out["sum"] == pytest.approx(2.0 * (1 + 2 + 3 + 4))
    ranks = out["ranks"]
    assert [r["RANK"] for r in ranks] == ["0", "1", "2", "3"]
    assert [r["GROUP_RANK"] for r in ranks] == ["0", "1", "2", "3"]
    # one whole GPU per task, each of the cluster's four addresses exactly once
    assert sorted(r["CUDA_VISIBLE_DEVICES"] for r in ranks) == ["0", "1", "2", "3"]
    text = capfd.readouterr().out
    for r in range(4):
        assert f"[rank {r}] rank {r} sum 20" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("[gpuspark] backend gloo"))
    for r in ranks:  # the rank -> GPU map agrees with what each rank saw
        assert f"{r['RANK']}->127.0.0.1 gpu {r['CUDA_VISIBLE_DEVICES']}" in line


@pytest.mark.spark
def test_spark_ranks_on_this_machine_run_in_the_launch_directory(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with --local, a relative path of a rank means the launch's directory, not the
    executor's work folder (the embedded cluster runs on this machine)."""
    monkeypatch.chdir(tmp_path)
    assert run(write_relative, "out", num_processes=2, spark=spark) == str(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("out-*.txt")) == ["out-0.txt", "out-1.txt"]


@pytest.mark.spark
def test_spark_two_tasks_of_two_processes(spark: Any) -> None:
    out = run(all_reduce_env, 1.0, num_processes=4, processes_per_task=2, spark=spark)
    assert out["sum"] == pytest.approx(10.0)
    ranks = out["ranks"]
    assert [(r["GROUP_RANK"], r["LOCAL_RANK"]) for r in ranks] == [
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("1", "1"),
    ]
    assert {r["LOCAL_WORLD_SIZE"] for r in ranks} == {"2"}
    gpus = [r["CUDA_VISIBLE_DEVICES"] for r in ranks]
    assert gpus[0] == gpus[1] and gpus[2] == gpus[3]  # a task's ranks share its 2 GPUs
    assert sorted({gpus[0], gpus[2]}) == ["0,1", "2,3"]


@pytest.mark.spark
def test_spark_failure_names_rank_2_and_leaves_no_process(spark: Any, tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    with pytest.raises(LaunchError) as exc:
        run(
            fail_on,
            2,
            str(tmp_path),
            num_processes=4,
            spark=spark,
            env={"GPUSPARK_TEST_MARK": mark},
        )
    msg = str(exc.value)
    assert msg.startswith("rank 2 failed on host 127.0.0.1: ValueError: boom on rank 2"), msg
    assert "Py4J" not in msg and "last lines of rank 2" in msg
    assert len(list(tmp_path.iterdir())) == 4
    assert _alive_with(mark) == []


@pytest.mark.spark
def test_spark_sigkill_with_max_restarts_resumes(spark: Any, tmp_path: Path) -> None:
    out = run(
        train_with_progress, str(tmp_path), 6, 1, num_processes=2, spark=spark, max_restarts=1
    )
    assert sorted(p.read_text() for p in tmp_path.glob("rank*.txt")) == ["6", "6"]
    by_rank = {r["rank"]: r for r in out}
    assert by_rank[1]["starts"] >= 1 and by_rank[1]["resumed_from"] == 4


@pytest.mark.spark
@pytest.mark.slow  # a fresh Python + torch per rank; the local CLI test covers the default run
def test_spark_cli_launch_plain_ddp_script(spark: Any, local_cluster: Any, tmp_path: Path) -> None:
    from gpuspark.cli.main import main

    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    out = tmp_path / "out.txt"
    args = ["launch", "--master", local_cluster.master_url, "-n", "2", str(script)]
    assert main([*args, "--", "--steps", "3", "--out", str(out)]) == 0
    assert out.read_text().startswith("2 ")


@pytest.mark.spark
@pytest.mark.parametrize("dry_run", [False, True])
def test_more_ranks_than_the_cluster_has_gpus_is_refused_before_a_session(
    local_cluster: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    dry_run: bool,
) -> None:
    """-n 99 on a 4-GPU cluster: one line with the numbers, from the master's status page
    (not the executors' capacity check, which needs a Spark session), dry run or not."""
    from gpuspark.cli.main import main

    monkeypatch.setenv("GPUSPARK_STATE_DIR", str(local_cluster.state_dir))
    script = tmp_path / "train.py"
    script.write_text("print('never')\n")
    argv = ["launch", *(["--dry-run"] if dry_run else []), "-n", "99", str(script)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "99 ranks x 1 GPU need 99 GPUs; the cluster at spark://" in err, err
    assert "has 4 in all (2 workers) (use -n 4 or fewer" in err, err
