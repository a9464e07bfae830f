"""The top-level command: version, help, usage errors, known errors as one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

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
        if "settings the job uses" in " ".join(res.output.split()):  # a job's --spec
            assert "master and [spark] settings" in " ".join(res.output.split()), path
    train = runner.invoke(app, ["train", "--help"], terminal_width=80).output
    assert "the cluster (embedded one by default); rank 0 logs epochs." in " ".join(train.split())
    assert "on the cluster (embedded one by default); rank 0 logs\n" not in train


# Commands that read a spec but take it as a positional argument only, each with its reason.
_SPEC_ARGUMENT_ONLY: dict[str, str] = {}


def test_every_command_that_reads_a_spec_takes_spec_and_its_env_var() -> None:
    """One vocabulary: ``--spec`` (and ``GPUSPARK_SPEC``) wherever a spec is read; a
    positional spec only as the optional, deprecated older form."""
    import typer.main

    from gpuspark.cli.main import app

    def walk(cmd: Any, path: tuple[str, ...]) -> Any:
        yield " ".join(path), cmd
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            yield from walk(sub, (*path, name))

    readers = {}
    for path, cmd in walk(typer.main.get_command(app), ()):
        if any("spec" in (p.name or "") for p in cmd.params):
            readers[path] = cmd
    assert {"validate", "render spark", "render k8s", "launch", "plan"} <= set(readers)
    assert set(_SPEC_ARGUMENT_ONLY) <= set(readers)  # the list names what exists
    for path, cmd in readers.items():
        if path in _SPEC_ARGUMENT_ONLY:
            continue
        spec = [p for p in cmd.params if "--spec" in p.opts]
        assert spec and spec[0].envvar == "GPUSPARK_SPEC", path
        assert all(not p.required for p in cmd.params if "spec" in (p.name or "")), path


def _spec_commands() -> list[list[str]]:
    return [
        ["validate"],
        *(["render", name] for name in ("spark", "monitoring", "yarn", "kueue", "volcano", "k8s")),
    ]


def test_validate_and_render_read_the_spec_option_or_its_env_var(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "cluster.toml"
    assert main(["init", str(spec)]) == 0
    for words in _spec_commands():
        out = ["-o", str(tmp_path / "-".join(words))] if words[0] == "render" else []
        monkeypatch.delenv("GPUSPARK_SPEC", raising=False)
        assert main([*words, "--spec", str(spec), *out]) == 0, words
        assert capsys.readouterr().err == "", words
        monkeypatch.setenv("GPUSPARK_SPEC", str(spec))
        assert main([*words, *out]) == 0, words
        assert capsys.readouterr().err == "", words


def test_the_spec_as_an_argument_still_works_for_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The older form: one deprecation line on stderr; it wins over the environment (it was
    typed), and refuses to be combined with --spec."""
    spec = tmp_path / "cluster.toml"
    assert main(["init", str(spec)]) == 0
    monkeypatch.setenv("GPUSPARK_SPEC", str(tmp_path / "no-such.toml"))
    capsys.readouterr()
    assert main(["validate", str(spec)]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"deprecated: the spec as an argument; use gpuspark validate --spec {spec} "
        "(or GPUSPARK_SPEC): the argument goes in the next release\n"
    )
    assert f"{spec} is valid" in captured.out
    assert main(["render", "yarn", str(spec), "--spec", str(spec)]) == 2
    assert "the spec is also given as an argument" in capsys.readouterr().err


def test_no_spec_at_all_is_a_usage_error_naming_both_ways(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUSPARK_SPEC", raising=False)
    for words in _spec_commands():
        assert main(words) == 2, words
        err = capsys.readouterr().err
        assert "--spec FILE or GPUSPARK_SPEC" in err and err.count("\n") == 1, (words, err)
