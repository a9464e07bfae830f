"""The launch request (gpuspark.launch.request): shape checks and the dry run, no Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuspark.errors import LaunchError
from gpuspark.launch import LaunchRequest


def _req(**kw: Any) -> LaunchRequest:
    return LaunchRequest(**{"num_processes": 4, "payload": b"x", **kw})


def test_request_rejects_uneven_split_with_remedy() -> None:
    """The message names the flags first, then the Python keywords (issue 17)."""
    with pytest.raises(LaunchError) as exc:
        _req(num_processes=5, processes_per_task=2)
    assert exc.value.message == (
        "-n 5 (num_processes=5) is not a multiple of --nproc-per-node 2 (processes_per_task=2)"
    )
    assert exc.value.remedy == "use -n 4, 6, or another --nproc-per-node"


@pytest.mark.parametrize(
    ("kw", "text"),
    [
        ({"gpus_per_process": 0.5}, "whole GPUs"),
        ({"backend": "ncl"}, "did you mean 'nccl'"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"local": True, "processes_per_task": 2}, "local mode"),
        ({"script": ["a.py"]}, "exactly one"),
        ({"module": True}, "runs a module by name, not a function"),
        ({"tee": True}, "log_dir"),
    ],
)
def test_request_rejects_bad_values(kw: dict[str, Any], text: str) -> None:
    with pytest.raises(LaunchError, match=text):
        _req(**kw)


def test_request_materialize_is_a_dry_run() -> None:
    req = LaunchRequest(
        num_processes=4, processes_per_task=2, script=["train.py", "--lr", "0.1"], max_restarts=1
    )
    text = req.materialize()
    assert req.num_tasks == 2 and req.gpus_per_task == 2
    assert "barrier stage: 2 tasks, task resource profile cpus=1 gpu=2" in text
    assert "torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d" in text
    assert text.rstrip().endswith("train.py --lr 0.1")


def test_cli_launch_dry_run_prints_the_plan(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuspark.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["launch", "--dry-run", "-n", "2", "t.py"]) == 1
    assert "script t.py: does not exist" in capsys.readouterr().err  # checked on the driver
    (tmp_path / "t.py").write_text("print('hi')\n")
    code = main(["launch", "--dry-run", "-n", "4", "--processes-per-task", "2", "t.py", "--", "-x"])
    text = capsys.readouterr().out
    assert code == 0
    assert "barrier stage: 2 tasks, task resource profile cpus=1 gpu=2" in text
    assert f"{tmp_path / 't.py'} -x" in text  # absolute: ranks start in other directories
