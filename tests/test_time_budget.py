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
