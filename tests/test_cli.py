"""The top-level command: version, help, usage errors, known errors as one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuspark import __version__
from gpuspark.cli.main import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"gpuspark {__version__}"


def test_usage_error_exits_2_with_click_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "no-such-command"]) == 2
    assert "No such command" in capsys.readouterr().err


def test_help_starts_without_heavy_imports() -> None:
    code = (
        "import sys; from gpuspark.cli.main import main; main(['--help']);"
        "heavy = [m for m in ('torch', 'pyspark', 'monai', 'pydicom') if m in sys.modules];"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout
