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


def _command_paths() -> list[list[str]]:
    import typer.main

    from gpuspark.cli.main import app

    paths: list[list[str]] = []

    def walk(cmd: object, path: list[str]) -> None:
        paths.append(path)
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


def test_every_help_reads_at_80_columns() -> None:
    """Every command's --help at 80 columns: no line wider, no value placeholder on a flag
    (``--json <bool>``), sentences not broken mid-line by the source's line breaks, and text
    in brackets (``[spark]``) shown, not eaten as markup."""
    from typer.testing import CliRunner

    from gpuspark.cli.main import app

    runner = CliRunner()
    paths = _command_paths()
    assert len(paths) > 30
    for path in paths:
        res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
        assert res.exit_code == 0, (path, res.output)
        lines = res.output.splitlines()
        assert max(len(line) for line in lines) <= 80, (path, res.output)
        assert "<bool>" not in res.output, (path, res.output)
        if "--spec" in res.output:
            assert "master and [spark] settings" in " ".join(res.output.split()), path
    train = runner.invoke(app, ["train", "--help"], terminal_width=80).output
    assert "the cluster (embedded one by default); rank 0 logs epochs." in " ".join(train.split())
    assert "on the cluster (embedded one by default); rank 0 logs\n" not in train
