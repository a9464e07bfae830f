"""The collective timeout: the spec's ``[training] collective_timeout_s`` (or the launch's
``collective_timeout``, ``--collective-timeout``) becomes the default timeout of
``init_process_group`` in every rank, so a rank whose peer is gone fails within it instead of
gloo's 30 minutes."""

from __future__ import annotations

import datetime
import math
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from gpuspark.cli.main import main
from gpuspark.errors import LaunchError, SpecError
from gpuspark.launch import make_request, prepare, run
from gpuspark.launch._internal.worker import _collective_timeout_arg, set_collective_timeout
from gpuspark.spec import example_spec, parse_spec

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _noop() -> None:
    return None


def _spec(timeout: str | None = None) -> Any:
    """The example spec; with ``timeout``, its ``[training] collective_timeout_s`` set so."""
    text = example_spec()
    if timeout is not None:
        line = re.search(r"^collective_timeout_s = .*$", text, re.M)
        assert line is not None, "the example spec has a [training] collective_timeout_s"
        text = text.replace(line.group(0), f"collective_timeout_s = {timeout}")
    return parse_spec(text)


def test_the_spec_default_is_ten_minutes_and_a_field_sets_it() -> None:
    assert _spec().training.collective_timeout_s == 600
    spec = _spec("45")
    assert spec.training.collective_timeout_s == 45


@pytest.mark.parametrize("bad", ["0", "-5", '"10m"'])
def test_the_spec_refuses_a_timeout_that_is_not_positive_seconds(bad: str) -> None:
    with pytest.raises((SpecError, ValueError), match="collective_timeout_s"):
        _spec(bad)


def test_the_launch_takes_the_spec_timeout_unless_it_sets_its_own() -> None:
    spec = _spec("45")
    req = make_request(_noop, num_processes=2, local=True, gpus_per_process=0)
    assert req.collective_timeout is None
    prepare(req, spec)
    assert req.collective_timeout == 45.0
    own = make_request(_noop, num_processes=2, local=True, gpus_per_process=0)
    own.collective_timeout = 7
    prepare(own, spec)
    assert own.collective_timeout == 7
    assert "collective timeout: 7 s" in own.materialize().splitlines()


@pytest.mark.parametrize("bad", [0, -1, "10", True, math.inf, math.nan])
def test_the_request_refuses_a_timeout_that_is_not_positive_seconds(bad: object) -> None:
    with pytest.raises(LaunchError, match="collective_timeout="):
        make_request(_noop, num_processes=2, collective_timeout=bad)


def test_the_rank_default_timeout_is_set_for_every_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed import distributed_c10d

    for name in ("default_pg_timeout", "default_pg_nccl_timeout"):  # restored afterwards
        monkeypatch.setattr(distributed_c10d, name, getattr(distributed_c10d, name))
    gloo, nccl = distributed_c10d.Backend("gloo"), distributed_c10d.Backend("nccl")
    set_collective_timeout(None)
    assert distributed_c10d._get_default_timeout(gloo) == datetime.timedelta(minutes=30)
    set_collective_timeout(3.5)
    for backend in (gloo, nccl):
        assert distributed_c10d._get_default_timeout(backend) == datetime.timedelta(seconds=3.5)


def test_the_script_worker_takes_the_timeout_after_the_log_dir() -> None:
    argv = ["--log-dir", "/d", "--collective-timeout", "12.5", "-m", "pkg.train", "--lr", "1"]
    assert _collective_timeout_arg(argv) == 12.5
    assert argv == ["--log-dir", "/d", "-m", "pkg.train", "--lr", "1"]
    plain = ["--log-dir", "/d", "train.py", "--collective-timeout", "3"]
    assert _collective_timeout_arg(plain) is None and len(plain) == 5  # the script's own


def wait_for_a_peer_that_never_comes() -> None:
    """Rank 0 all-reduces; rank 1 never does (it sleeps): rank 0's collective times out."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # no timeout here: the launch's is the default
    if dist.get_rank() == 1:
        time.sleep(120)
    dist.all_reduce(torch.ones(4))


def test_a_rank_waiting_for_a_gone_peer_fails_within_the_collective_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(LaunchError) as caught:
        run(
            wait_for_a_peer_that_never_comes,
            num_processes=2,
            local=True,
            gpus_per_process=0,
            collective_timeout=3,
        )
    took = time.monotonic() - start
    assert "rank 0 failed" in str(caught.value) and "Timed out waiting 3000ms" in str(caught.value)
    assert took < 60, took


SCRIPT = """
    import os, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        time.sleep(120)
    dist.all_reduce(torch.ones(4))
"""


def test_launch_collective_timeout_reaches_a_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent(SCRIPT))
    args = ["launch", "--local", "-n", "2", "--gpus-per-process", "0"]
    rc = main([*args, "--collective-timeout", "3", str(script)])
    out = capsys.readouterr()
    assert rc == 1
    assert "Timed out waiting 3000ms" in out.out + out.err
