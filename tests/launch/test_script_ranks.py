"""A script's ranks run as ``python script.py`` would on both ways of starting them:
``__main__``, the script's directory on the path, its own ``atexit`` handlers, its exit code.

* forked from the agent (gloo, static rendezvous) when the launching process had not imported
  torch (a fresh ``gpuspark`` command): no new interpreter starts (nor imports torch again),
  and only the script's ``atexit`` handlers are there;
* new interpreters when it had (this pytest process, a notebook): a process that ran torch's
  OpenMP regions cannot fork (the child hangs in its first parallel op).

Local launches, no Spark."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuspark.cli.main import main

SCRIPT = textwrap.dedent(
    """
    import atexit, json, os, sys
    new_interpreter = "gpuspark.launch._internal.worker" in sys.orig_argv
    import helper  # beside the script
    atexit.register(lambda: print("ATEXIT " + os.environ["RANK"], flush=True))
    print("SEEN " + json.dumps({"name": __name__, "argv": sys.argv[1:], "helper": helper.X,
                                "new_interpreter": new_interpreter,
                                "handlers": atexit._ncallbacks()}), flush=True)
    if os.environ["RANK"] == "1" and "--fail" in sys.argv:
        sys.exit(3)
    """
)


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "helper.py").write_text("X = 42\n")
    path = tmp_path / "job" / "rank_script.py"
    path.write_text(SCRIPT)
    return path


def _seen(out: str) -> dict[int, dict]:
    found = {}
    for line in out.splitlines():
        m = re.match(r"^\[rank (\d+)\] SEEN (.*)$", line)
        if m:
            found[int(m.group(1))] = json.loads(m.group(2))
    return found


def _launch(fresh: bool, script: Path, *args: str) -> tuple[int, str]:
    argv = ["launch", "--local", "--gpus-per-process", "0", "-n", "2", str(script), *args]
    if fresh:  # a new `gpuspark` process: torch not imported before the launch
        code = "import sys; from gpuspark.cli.main import main; sys.exit(main(sys.argv[1:]))"
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        return done.returncode, done.stdout + done.stderr
    import torch  # this process runs torch first, its OpenMP team included (as a notebook)

    torch.ones(64, 512) @ torch.ones(512, 512)
    return main(argv), ""


@pytest.mark.parametrize("fresh", [True, False], ids=["forked", "new-interpreter"])
def test_a_script_rank_runs_as_python_would(
    fresh: bool, script: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out = _launch(fresh, script, "--x", "1")
    captured = capfd.readouterr()
    out += captured.out + captured.err
    assert code == 0, out
    seen = _seen(out)
    assert sorted(seen) == [0, 1], out
    for rank in (0, 1):
        assert seen[rank]["name"] == "__main__"
        assert seen[rank]["argv"] == ["--x", "1"]
        assert seen[rank]["helper"] == 42
        assert seen[rank]["new_interpreter"] is not fresh  # fresh: forked from the agent
        if fresh:
            assert seen[rank]["handlers"] == 1  # only its own: the agent's were cleared
        assert f"[rank {rank}] ATEXIT {rank}" in out


@pytest.mark.parametrize("fresh", [True, False], ids=["forked", "new-interpreter"])
def test_a_script_ranks_exit_code_fails_the_launch_naming_it(
    fresh: bool, script: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out = _launch(fresh, script, "--fail")
    captured = capfd.readouterr()
    out += captured.out + captured.err
    assert code != 0
    assert "rank 1" in out and "SystemExit" in out and "3" in out, out


READER = textwrap.dedent(
    """
    import os, sys
    print("READ " + os.environ["RANK"] + " " + repr(sys.stdin.read()), flush=True)
    """
)


@pytest.mark.parametrize(
    "fresh",
    [True, pytest.param(False, marks=pytest.mark.slow)],  # slow: ~12 s, torch imported twice
    ids=["forked", "new-interpreter"],
)
def test_rank_0_reads_the_launchers_stdin_as_under_torchrun(fresh: bool, tmp_path: Path) -> None:
    """``echo hi | gpuspark launch --local -n 2 s.py``: the ranks read nothing (hardening
    case 18); under torchrun rank 0 reads the launcher's standard input."""
    script = tmp_path / "reader.py"
    script.write_text(READER)
    argv = ["launch", "--local", "--gpus-per-process", "0", "-n", "2", str(script)]
    warm = "" if fresh else "import torch; torch.ones(64, 512) @ torch.ones(512, 512); "
    code = warm + "import sys; from gpuspark.cli.main import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, *argv], input="hi\nthere\n",
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "[rank 0] READ 0 'hi\\nthere\\n'" in out, out
    assert "[rank 1] READ 1 ''" in out, out
