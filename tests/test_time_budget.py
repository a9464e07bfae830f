"""``make test``'s time budget: a green run over ``GPUSPARK_TEST_BUDGET_S`` fails (the hook in
tests/conftest.py), so no change quietly doubles the default run's time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _copy_conftest(folder: Path) -> None:
    """tests/conftest.py and the helper module it imports its fixtures from."""
    for name in ("conftest.py", "_s3.py"):
        shutil.copy(HERE / name, folder / name)


def test_a_green_run_over_its_budget_fails(tmp_path: Path) -> None:
    _copy_conftest(tmp_path)
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_a():\n    time.sleep(1.0)\n")
    env = {**os.environ, "GPUSPARK_TEST_BUDGET_S": "0.5"}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_slow.py"]
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "1 passed" in out.stdout, out.stdout + out.stderr
    assert out.returncode == 1, out.stdout + out.stderr
    assert "over its budget of 0.5 s (GPUSPARK_TEST_BUDGET_S)" in out.stdout, out.stdout


def test_tests_on_sessions_of_their_own_run_last(tmp_path: Path) -> None:
    """The modules with a test on the shared cluster first; among them, marker
    ``own_session``: last in its module, its module after the others; a test that ``-m``
    deselects moves nothing."""
    _copy_conftest(tmp_path)
    (tmp_path / "test_a.py").write_text(
        "import pytest\n\ndef test_a0():\n    pass\n\ndef test_a1(spark):\n    pass\n\n"
        "@pytest.mark.own_session\ndef test_a2(spark):\n    pass\n\n"
        "def test_a3(spark):\n    pass\n"
    )
    (tmp_path / "test_b.py").write_text(
        "def test_b1(spark):\n    pass\n\ndef test_b2():\n    pass\n"
    )
    (tmp_path / "test_c.py").write_text(
        "import pytest\n\ndef test_c1(spark):\n    pass\n\n"
        "@pytest.mark.slow\n@pytest.mark.own_session\ndef test_c2(spark):\n    pass\n"
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only"]
    argv += ["-m", "not slow", "-W", "ignore::pytest.PytestUnknownMarkWarning"]
    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [line.split("::")[1] for line in out.stdout.splitlines() if "::" in line]
    assert ids == ["test_b1", "test_b2", "test_c1", "test_a0", "test_a1", "test_a3", "test_a2"]


WHERE = """
import json, os, pytest

@pytest.fixture()
def spark():  # stands in for the shared cluster's session of tests/conftest.py
    return None

def _note(name):
    with open(os.environ["RAN_AT"], "a") as out:
        out.write(json.dumps([name, os.environ.get("PYTEST_XDIST_WORKER")]) + "\\n")
"""


def test_two_workers_share_one_cluster_and_keep_each_module_whole(tmp_path: Path) -> None:
    """``make test`` runs 2 workers: the modules with a test on the shared cluster run on one
    of them, whole and in order; every other module's tests run together on one worker."""
    _copy_conftest(tmp_path)
    for mod in "abcdef":
        tests = "".join(
            f"def test_{mod}{n}({'spark' if mod in 'ace' and n % 2 else ''}):\n"
            f"    _note('{mod}{n}')\n\n"
            for n in range(6)
        )
        (tmp_path / f"test_{mod}.py").write_text(WHERE + "\n" + tests)
    ran_at = tmp_path / "ran_at.jsonl"
    env = {**os.environ, "RAN_AT": str(ran_at)}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2"]
    argv += ["--dist", "loadgroup", "--no-loadscope-reorder"]
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    ran = [json.loads(line) for line in ran_at.read_text().splitlines()]
    assert len(ran) == 36
    shared = [(name, worker) for name, worker in ran if name[0] in "ace"]
    assert len({worker for _, worker in shared}) == 1, ran
    assert [name for name, _ in shared] == [f"{m}{n}" for m in "ace" for n in range(6)]
    for mod in "bdf":
        assert len({w for name, w in ran if name[0] == mod}) == 1, ran
