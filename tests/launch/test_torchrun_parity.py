"""``gpuspark launch`` takes a torchrun command line: script arguments after the script,
``-m``, ``--nproc-per-node``, ``--log-dir`` and ``--tee``; a script written for torchrun
(``examples/ddp_tutorial.py``) runs unchanged. Locally (fast, no Spark) and on the shared
embedded cluster (``spark``)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.main import main
from gpuspark.launch import make_request, run

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = "examples/ddp_tutorial.py"

# What torchrun documents for a worker (torch.distributed.run, "Environment Variables").
TORCHRUN_ENV = (
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
)

# A rank that prints its command line and environment (no torch: it starts in a blink).
ENV_SCRIPT = textwrap.dedent(
    f"""
    import json, os, sys
    keys = {TORCHRUN_ENV!r} + ("CUDA_VISIBLE_DEVICES",)
    seen = {{k: os.environ.get(k) for k in keys}}
    print("ENV " + json.dumps({{"name": __name__, "argv": sys.argv[1:], **seen}}))
    print(f"stderr of rank {{os.environ['RANK']}}", file=sys.stderr)
    """
)


def _envs(text: str) -> dict[int, dict[str, Any]]:
    """Each rank's ``ENV`` line in ``text``: a rank's log file, or the console, where each
    line carries ``[rank r] ``."""
    found = {}
    for line in text.splitlines():
        body = re.sub(r"^\[rank \d+\] ", "", line)
        if body.startswith("ENV "):
            env = json.loads(body.removeprefix("ENV "))
            found[int(env["RANK"])] = env
    return found


@pytest.fixture()
def env_script(tmp_path: Path) -> Path:
    path = tmp_path / "show_env.py"
    path.write_text(ENV_SCRIPT)
    return path


def _local(*argv: str) -> list[str]:
    return ["launch", "--local", "--gpus-per-process", "0", *argv]


# ---------------------------------------------------------------------------- local


@pytest.mark.parametrize(
    ("after", "seen"),
    [
        (["--epochs", "1", "--lr", "0.1"], ["--epochs", "1", "--lr", "0.1"]),
        (["--", "--epochs", "1"], ["--epochs", "1"]),  # the older form still works
        (["--dry-run", "-n", "3", "--help"], ["--dry-run", "-n", "3", "--help"]),  # the script's
    ],
    ids=["torchrun-form", "double-dash", "launch-option-names"],
)
def test_everything_after_the_script_is_the_scripts(
    env_script: Path, capfd: pytest.CaptureFixture[str], after: list[str], seen: list[str]
) -> None:
    assert main(_local("-n", "2", str(env_script), *after)) == 0
    envs = _envs(capfd.readouterr().out)
    assert sorted(envs) == [0, 1]
    assert all(env["argv"] == seen for env in envs.values())


def test_nproc_per_node_alone_is_one_node_of_that_many_ranks(
    env_script: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``--nproc-per-node 2`` without ``-n``: torchrun's single node, every variable it sets."""
    assert main(_local("--nproc-per-node", "2", str(env_script))) == 0
    envs = _envs(capfd.readouterr().out)
    assert [(e["RANK"], e["LOCAL_RANK"]) for _, e in sorted(envs.items())] == [
        ("0", "0"),
        ("1", "1"),
    ]
    for env in envs.values():
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "2"
        assert env["GROUP_RANK"] == "0" and env["ROLE_RANK"] == env["RANK"]
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0" and env["TORCHELASTIC_RUN_ID"]
        assert env["MASTER_ADDR"] and env["MASTER_PORT"]


def test_module_runs_as_python_dash_m(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """``-m pkg.mod ARGS``: the module from the launch's directory, as ``__main__``."""
    (tmp_path / "toypkg").mkdir()
    (tmp_path / "toypkg" / "__init__.py").write_text("")
    (tmp_path / "toypkg" / "show.py").write_text(ENV_SCRIPT)
    monkeypatch.chdir(tmp_path)
    assert main(_local("-n", "2", "-m", "toypkg.show", "--x", "1")) == 0
    envs = _envs(capfd.readouterr().out)
    assert sorted(envs) == [0, 1]
    assert all(e["name"] == "__main__" and e["argv"] == ["--x", "1"] for e in envs.values())


def test_log_dir_one_file_per_rank_console_rank_0(
    env_script: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank_0.log").write_text("an earlier launch's line\n")  # replaced
    assert main(_local("-n", "2", "--log-dir", str(logs), str(env_script), "--a")) == 0
    out = capfd.readouterr().out
    assert sorted(p.name for p in logs.iterdir()) == ["rank_0.log", "rank_1.log"]
    for rank in (0, 1):
        lines = (logs / f"rank_{rank}.log").read_text().splitlines()
        assert _envs(lines[0])[rank]["argv"] == ["--a"]
        assert f"stderr of rank {rank}" in lines  # stdout and stderr, as printed
        assert "an earlier launch's line" not in lines
    assert "[rank 0] stderr of rank 0" in out and "[rank 1]" not in out  # console: rank 0
    assert f"rank output: {logs}/rank_<r>.log; console: rank 0 only" in out


def test_tee_shows_every_rank_too(
    env_script: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "new" / "logs"  # made for the launch
    assert main(_local("-n", "2", "--log-dir", str(logs), "--tee", str(env_script))) == 0
    out = capfd.readouterr().out
    assert "[rank 0] stderr of rank 0" in out and "[rank 1] stderr of rank 1" in out
    assert "stderr of rank 1" in (logs / "rank_1.log").read_text()


def echo_kwargs(**kwargs: Any) -> dict[str, Any]:
    return kwargs


def test_run_leaves_the_new_option_names_to_the_function() -> None:
    """``run(fn, log_dir=...)`` passed ``log_dir`` to ``fn`` before the option existed: it
    still does; the options are set through ``make_request``."""
    got = run(echo_kwargs, num_processes=1, local=True, log_dir="runs", tee=True, module="m")
    assert got == {"log_dir": "runs", "tee": True, "module": "m"}
    req = make_request(echo_kwargs, num_processes=1, log_dir="runs", tee=True)
    assert req.log_dir == str(Path("runs").absolute()) and req.tee


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["--tee", "{script}"], "--tee (tee=True) shows every rank"),
        (["--log-dir", "{script}", "{script}"], "is a file, not a folder"),
        (["--log-dir", "{script}/logs", "{script}"], "a file, not a folder"),
        (["-m", "toypkg/show.py"], "not a module name"),
        (["--local", "-n", "4", "--nproc-per-node", "2", "{script}"], "in local mode"),
        (["-n", "3", "--nproc-per-node", "2", "{script}"], "not a multiple"),
    ],
    ids=["tee-alone", "log-dir-file", "log-dir-under-file", "module-path", "local-2-nodes", "3/2"],
)
def test_refused_in_one_line(
    env_script: Path, capsys: pytest.CaptureFixture[str], argv: list[str], text: str
) -> None:
    words = [w.format(script=env_script) for w in argv]
    assert main(["launch", "--dry-run", *words]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert text in err


def test_dry_run_shows_the_torchrun_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["--dry-run", "-n", "4", "--nproc-per-node", "2", "--log-dir", "logs"]
    assert main(["launch", *argv, "-m", "toypkg.train", "--epochs", "1"]) == 0
    text = capsys.readouterr().out
    assert "--nnodes=2 --nproc-per-node=2" in text
    lines = {line.partition(":")[0]: line for line in text.splitlines()}
    assert lines["entrypoint"] == "entrypoint: -m toypkg.train --epochs 1"
    assert lines["per node"].endswith("--node-rank=<task> -m toypkg.train --epochs 1")
    assert f"rank output: {tmp_path}/logs/rank_<r>.log" in text
    assert not (tmp_path / "logs").exists()  # a dry run makes nothing


# ---------------------------------------------------------------------------- Spark


@pytest.fixture()
def on_shared_cluster(spark: Any, local_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``gpuspark launch`` without --master runs on the active session: the shared cluster's
    (whose 4 simulated GPUs the up-front check reads)."""
    monkeypatch.setenv("GPUSPARK_STATE_DIR", str(local_cluster.state_dir))
    return spark


def test_ddp_tutorial_runs_unchanged_locally(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The tutorial script, as written for torchrun, arguments after it: two local ranks."""
    monkeypatch.chdir(ROOT)
    args = ["launch", "--local", "-n", "2", "--gpus-per-process", "0", "--metrics-port", "0"]
    assert main([*args, TUTORIAL, "--steps", "3"]) == 0
    out = capfd.readouterr().out
    for rank in (0, 1):
        assert f"rank {rank}/2 (local {rank}) step 2 loss " in out, out
        assert f"rank {rank}/2 done: weights agree True" in out, out


@pytest.mark.spark
@pytest.mark.slow  # ~25 s: the same script on two barrier tasks; locally above by default
def test_ddp_tutorial_runs_unchanged_on_spark(
    on_shared_cluster: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The tutorial script, as written for torchrun, arguments after it: two barrier tasks."""
    monkeypatch.chdir(ROOT)
    assert main(["launch", "-n", "2", TUTORIAL, "--steps", "3"]) == 0
    out = capfd.readouterr().out
    for rank in (0, 1):
        assert f"[rank {rank}] rank {rank}/2 (local 0) step 2 loss " in out, out
        assert f"[rank {rank}] rank {rank}/2 done: weights agree True" in out, out
    assert "[gpuspark] 2 ranks finished" in out


@pytest.mark.spark
@pytest.mark.slow  # ~25-60 s; the local tests above cover --nproc-per-node and --log-dir
def test_two_nodes_of_two_ranks_on_spark_with_a_log_dir(
    on_shared_cluster: Any, env_script: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``-n 4 --nproc-per-node 2``: 2 tasks x 2 processes (2 GPUs each), torchrun's variables;
    every rank's output in its own file on the driver, rank 0 alone on the console."""
    logs = tmp_path / "logs"
    argv = ["launch", "-n", "4", "--nproc-per-node", "2", "--log-dir", str(logs)]
    assert main([*argv, str(env_script), "--tag", "x"]) == 0
    out = capfd.readouterr().out
    assert "[rank 0] stderr of rank 0" in out and "[rank 1]" not in out, out
    envs = {}
    for rank in range(4):
        text = (logs / f"rank_{rank}.log").read_text()
        assert f"stderr of rank {rank}" in text
        envs[rank] = _envs(text)[rank]
    shape = [(e["GROUP_RANK"], e["LOCAL_RANK"]) for _, e in sorted(envs.items())]
    assert shape == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    for env in envs.values():
        assert env["LOCAL_WORLD_SIZE"] == "2" and env["WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "4"
        assert env["argv"] == ["--tag", "x"]
    gpus = [envs[r]["CUDA_VISIBLE_DEVICES"] for r in range(4)]
    assert gpus[0] == gpus[1] and gpus[2] == gpus[3]  # a task's ranks share its 2 GPUs
    assert sorted({gpus[0], gpus[2]}) == ["0,1", "2,3"]
