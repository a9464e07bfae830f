"""``gpuspark quota status --plot FILE`` (issue: hardening, case 11): a path the chart could not
be written to is refused with one line before the spec is read or a scheduler asked; the chart
replaces a file atomically, leaving no temporary file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.main import main
from gpuspark.schedulers import Target, TeamUsage

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "cluster.toml")
STATUS = ["quota", "status", "--spec", EXAMPLE, "--master", "yarn", "--url", "http://unused"]


def _forbidden(*_: Any, **__: Any) -> Any:
    raise AssertionError("work started before --plot was checked")


def _bad(tmp: Path, kind: str) -> tuple[Path, str]:
    """A path no chart can be written to. Tests run as root, which ignores permission bits:
    the unwritable folders are below a regular file."""
    plain = tmp / "plain.txt"
    plain.write_text("a file, not a folder\n")
    (tmp / "a-dir").mkdir()
    return {
        "dir": (tmp / "a-dir", "is a directory, not a file"),
        "parent-missing": (tmp / "no-such" / "q.png", "does not exist"),
        "parent-is-a-file": (plain / "q.png", f"{plain} is a file"),
        "below-a-file": (plain / "deeper" / "q.png", f"{plain} is a file"),
    }[kind]


@pytest.mark.parametrize("kind", ["dir", "parent-missing", "parent-is-a-file", "below-a-file"])
def test_a_plot_path_that_cannot_be_written_is_refused_first(
    kind: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("gpuspark.spec.resolve_spec", _forbidden)
    monkeypatch.setattr("gpuspark.quota.status.quota_status", _forbidden)
    path, text = _bad(tmp_path, kind)
    assert main([*STATUS, "--plot", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: --plot {path}"), err
    assert text in err and "Traceback" not in err


def test_a_read_only_folder_is_found_by_trying_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root writes anywhere the permission bits forbid, but not on a read-only mount."""

    def read_only(*_: Any, **__: Any) -> Any:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr("gpuspark.quota.status.quota_status", _forbidden)
    monkeypatch.setattr("tempfile.mkstemp", read_only)
    assert main([*STATUS, "--plot", str(tmp_path / "q.png")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: --plot {tmp_path / 'q.png'}: cannot write in {tmp_path} (Read-only file "
        "system) (name a file in a folder you can write to)"
    )


def test_the_chart_replaces_a_file_atomically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [TeamUsage("vision", 4, 12, 2, 1, 0), TeamUsage("radiology", 8, 16, 8, 2, 1)]
    where = Target(kind="yarn", url="http://unused")
    monkeypatch.setattr("gpuspark.quota.status.quota_status", lambda *_, **__: (where, rows))
    png = tmp_path / "teams.png"
    png.write_text("an older chart")
    assert main([*STATUS, "--plot", str(png)]) == 0
    assert f"chart: {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["teams.png"]  # no temporary file left
