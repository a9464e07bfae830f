"""``make test``'s time budget: a green run over ``GPUSPARK_TEST_BUDGET_S`` fails (the hook in
tests/conftest.py), so no change quietly doubles the default run's time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_a_green_run_over_its_budget_fails(tmp_path: Path) -> None:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_a():\n    time.sleep(1.0)\n")
    env = {**os.environ, "GPUSPARK_TEST_BUDGET_S": "0.5"}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_slow.py"]
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "1 passed" in out.stdout, out.stdout + out.stderr
    assert out.returncode == 1, out.stdout + out.stderr
    assert "over its budget of 0.5 s (GPUSPARK_TEST_BUDGET_S)" in out.stdout, out.stdout


def test_tests_on_sessions_of_their_own_run_last(tmp_path: Path) -> None:
    """Marker ``own_session``: last in its module, its module after the others; a test that
    ``-m`` deselects moves nothing."""
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_a.py").write_text(
        "import pytest\n\ndef test_a1():\n    pass\n\n"
        "@pytest.mark.own_session\ndef test_a2():\n    pass\n\ndef test_a3():\n    pass\n"
    )
    (tmp_path / "test_b.py").write_text("def test_b1():\n    pass\n")
    (tmp_path / "test_c.py").write_text(
        "import pytest\n\ndef test_c1():\n    pass\n\n"
        "@pytest.mark.slow\n@pytest.mark.own_session\ndef test_c2():\n    pass\n"
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only"]
    argv += ["-m", "not slow", "-W", "ignore::pytest.PytestUnknownMarkWarning"]
    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [line.split("::")[1] for line in out.stdout.splitlines() if "::" in line]
    assert ids == ["test_b1", "test_c1", "test_a1", "test_a3", "test_a2"], out.stdout
