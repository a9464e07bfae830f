"""The scripts in ``examples/`` run as their docstrings say, each in a fresh directory and
``HOME``, and do what they print. (``examples/ddp_tutorial.py`` is run by
``tests/launch/test_torchrun_parity.py``.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_readme_commands import user_env  # tests/test_readme_commands.py

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(name: str, args: list[str], tmp_path: Path, timeout: float = 600) -> str:
    """``python examples/NAME ARGS`` in a fresh directory; its output, asserting exit 0."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=work,
        env=user_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    return out


def test_every_example_has_a_test() -> None:
    tested = set(re.findall(r'run_example\(\s*"([\w.]+)"', Path(__file__).read_text()))
    parity = (ROOT / "tests" / "launch" / "test_torchrun_parity.py").read_text()
    tested |= {name for name in ["ddp_tutorial.py"] if f"examples/{name}" in parity}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_fsdp_example_shards_the_model_over_two_ranks(tmp_path: Path) -> None:
    out = run_example("fsdp_train.py", ["--epochs", "2"], tmp_path)
    losses = re.search(r"fsdp on 2 ranks: loss per epoch \[([\d.]+), ([\d.]+)\]", out)
    assert losses and float(losses[2]) < float(losses[1]), out
    per_rank = re.search(r"parameter bytes per rank \[(\d+), (\d+)\] of (\d+)", out)
    assert per_rank, out
    a, b, full = (int(x) for x in per_rank.groups())
    assert abs(a - full / 2) <= 64 and abs(b - full / 2) <= 64, out


@pytest.mark.slow  # a Spark session, a DataFrame job and 2 ranks: about a minute
def test_from_dataframe_example_trains_and_caches(tmp_path: Path) -> None:
    args = ["--master", "local[2]", "--local", "--rows", "20000", "--epochs", "2"]
    out = run_example("from_dataframe_train.py", args, tmp_path)
    assert "table dataset: 20000 rows" in out, out
    result = re.search(r"2 ranks x 10000 rows: .* accuracy on rank 0's rows ([\d.]+)", out)
    assert result and float(result[1]) > 0.85, out  # the label is x1 + x2 > 0 with 5% noise
    again = subprocess.run(  # the same DataFrame again: from the cache
        [sys.executable, str(EXAMPLES / "from_dataframe_train.py"), *args, "--epochs", "1"],
        cwd=tmp_path / "work",
        env=user_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "from the cache, no Spark job" in again.stdout, again.stdout + again.stderr


@pytest.mark.slow  # Spark writes, prepares and the recipe trains: one to three minutes
def test_parquet_to_tabular_example_scores_the_test_split(tmp_path: Path) -> None:
    args = ["--master", "local[2]", "--local", "--rows", "20000", "--epochs", "2"]
    out = run_example("parquet_to_tabular.py", args, tmp_path)
    assert "synth-risk: 20000 rows" in out and "prep parquet: 20000 rows" in out, out
    auc = re.search(r"test split: \{.*'auc': ([\d.]+)", out)
    assert auc and float(auc[1]) > 0.75, out
    assert (tmp_path / "work" / "risk-example" / "run" / "best.pt").is_file()
