"""Script ranks forked from the agent (gloo, static rendezvous) behave as ``python script.py``:
``__main__``, the script's directory on the path, its own ``atexit`` handlers (and none it did
not register), its exit code, and torch already imported when it starts (the point of the
fork: a new interpreter spent seconds importing it again). Local launches, no Spark."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from gpuspark.cli.main import main

SCRIPT = textwrap.dedent(
    """
    import atexit, json, os, sys
    torch_before = "torch" in sys.modules
    import helper  # beside the script
    atexit.register(lambda: print("ATEXIT " + os.environ["RANK"], flush=True))
    print("SEEN " + json.dumps({"name": __name__, "argv": sys.argv[1:], "helper": helper.X,
                                "torch_before": torch_before,
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


def test_a_forked_script_rank_runs_as_python_would(
    script: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = ["launch", "--local", "--gpus-per-process", "0", "-n", "2", str(script)]
    assert main([*argv, "--x", "1"]) == 0
    out = capfd.readouterr().out
    seen = _seen(out)
    assert sorted(seen) == [0, 1], out
    for rank in (0, 1):
        assert seen[rank]["name"] == "__main__"
        assert seen[rank]["argv"] == ["--x", "1"]
        assert seen[rank]["helper"] == 42
        assert seen[rank]["torch_before"] is True  # forked from the agent: no second import
        assert seen[rank]["handlers"] == 1  # only its own: the agent's were cleared
        assert f"[rank {rank}] ATEXIT {rank}" in out


def test_a_forked_script_ranks_exit_code_fails_the_launch_naming_it(
    script: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = ["launch", "--local", "--gpus-per-process", "0", "-n", "2", str(script), "--fail"]
    assert main(argv) != 0
    captured = capfd.readouterr()
    text = captured.out + captured.err
    assert "rank 1" in text and "SystemExit" in text and "3" in text, text
