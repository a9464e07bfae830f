"""torchrun's own spellings on ``gpuspark launch``'s command line (hardening issue 13): each
torchrun option is taken where it means the same (``--tee 3`` was taken for the script
``3``) or refused in one line that gives gpuspark's equivalent (``--nnodes`` said "No such
option ... (Possible options: --module)"). Dry runs and direct calls: no rank starts."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from gpuspark.cli._torchrun import torchrun_args
from gpuspark.cli.main import main
from gpuspark.errors import LaunchError


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return path


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    """The ``--dry-run --json`` plan of a local CPU launch with ``argv``."""
    words = ["launch", "--local", "--gpus-per-process", "0", "--dry-run", "--json", *argv]
    assert main(words) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("tee", "shown"),
    [
        (["--tee", "3"], True),
        (["-t", "3"], True),
        (["-t3"], True),
        (["--tee=3"], True),
        (["--tee"], True),  # gpuspark's own flag
        (["--tee", "0"], False),  # torchrun's default: nothing teed
    ],
    ids=["tee-3", "t-3", "t3", "tee=3", "flag", "tee-0"],
)
def test_torchrun_tee_takes_its_value_not_the_script(
    script: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], tee: list[str], shown: bool
) -> None:
    """``--tee 3 train.py --x``: train.py is the script, as under torchrun."""
    plan = _plan(capsys, "--log-dir", str(tmp_path / "logs"), *tee, str(script), "--x")
    assert (plan["script"], plan["script_args"], plan["tee"]) == (str(script), ["--x"], shown)


def test_torchrun_underscore_forms_are_taken(
    script: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    argv = ["--nproc_per_node=2", "--log_dir", str(logs), "--max_restarts", "2", "--nnodes", "1"]
    plan = _plan(capsys, *argv, str(script))
    assert (plan["ranks"], plan["ranks_per_node"], plan["max_restarts"]) == (2, 2, 2)
    assert plan["log_dir"] == str(logs)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--nnodes", "2", "--nproc-per-node", "4"],
            "--nnodes 2 is torchrun's: gpuspark launch counts ranks (use -n 8 --nproc-per-node"
            " 4: 2 nodes x 4 rank(s), each node a Spark barrier task)",
        ),
        (
            ["--nnodes=2"],
            "--nnodes 2 is torchrun's: gpuspark launch counts ranks (use -n 2*N --nproc-per-node"
            " N: 2 nodes x N rank(s), each node a Spark barrier task)",
        ),
        (["--nnodes", "1:4"], "for an elastic MIN:MAX, -n MAX*N --min-ranks MIN*N"),
        (["--standalone"], "(use --local: one node of all the ranks on this machine)"),
        (["--rdzv_endpoint", "h:29400"], "--rdzv-endpoint is torchrun's rendezvous"),
        (["--master-port", "29500"], "the ranks meet at task 0's host on a free port"),
        (["-r", "3"], "(use --log-dir D: each rank's stdout and stderr"),
        (["--tee", "1"], "--tee 1 is torchrun's per-stream form"),
        (["-t", "0:3"], "--tee 0:3 is torchrun's per-stream form"),
        (["--nproc-per-node", "gpu"], "--nproc-per-node gpu is torchrun's count"),
        (["--role", "trainer"], "--role is a torchrun option that gpuspark launch has no"),
    ],
    ids=[
        "nnodes",
        "nnodes-alone",
        "nnodes-range",
        "standalone",
        "rdzv",
        "master-port",
        "redirects",
        "tee-1",
        "tee-per-rank",
        "nproc-gpu",
        "role",
    ],
)
def test_other_torchrun_options_are_refused_with_the_equivalent(
    script: Path, capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    assert main(["launch", "--local", "--dry-run", *argv, str(script)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert line in err


def _torchrun_options() -> list[str]:
    """Every option torchrun's parser declares (read from torch's source: no torch import)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        pytest.skip("torch is not installed")
    source = (Path(spec.origin).parent / "distributed" / "run.py").read_text()
    parser = source[source.index("def get_args_parser") :]
    parser = parser[: parser.index("\ndef ", 1)]
    names = re.findall(r'^\s+"(-[-a-z_]+)",$', parser, flags=re.MULTILINE)
    assert "--nnodes" in names and "--tee" in names and "-r" in names
    return names


def test_every_torchrun_option_is_taken_or_refused_with_an_equivalent() -> None:
    """No torchrun option before the script falls through to click ("No such option") or
    lets its value become the script."""
    valued = {"-n", "--log-dir", "--max-restarts", "--nproc-per-node"}
    for opt in _torchrun_options():
        if opt in ("-m", "--module"):
            continue  # the same flag in both
        try:
            words = torchrun_args([opt, "3", "train.py", "--x"], valued)
        except LaunchError as exc:
            assert exc.remedy, opt
            continue
        assert words[-2:] == ["train.py", "--x"], (opt, words)
        assert opt not in words or opt in valued | {"--tee"}, (opt, words)


def test_a_lenient_parse_drops_a_refused_option() -> None:
    """The parse that looks for ``--json`` (cli.main) must not fail on it."""
    words = torchrun_args(["--nnodes", "2", "--json", "train.py"], {"-n"}, strict=False)
    assert words == ["--json", "train.py"]
