"""``benchmarks/profile_tests.py``: seconds per test module from a real pytest JUnit report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

from profile_tests import by_module, read_report  # noqa: E402


def test_a_pytest_report_sums_per_module(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text(
        "import time\n\nclass TestGroup:\n    def test_a(self):\n        time.sleep(0.3)\n\n"
        "def test_b():\n    pass\n"
    )
    (tmp_path / "test_two.py").write_text("def test_c():\n    pass\n")
    report = tmp_path / "junit.xml"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    out = subprocess.run(
        [*argv, f"--junitxml={report}"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    cases = read_report(report)
    assert sorted(name for _, name, _ in cases) == ["test_a", "test_b", "test_c"]
    seconds, counts = by_module(cases)
    assert dict(counts) == {"test_one": 2, "test_two": 1}  # the class counts with its module
    assert seconds["test_one"] >= 0.3 > seconds["test_two"]
