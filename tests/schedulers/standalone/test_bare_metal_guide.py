"""The bare-metal guide (``docs/bare-metal.md``) under the README's convention
(``tests/test_readme_commands.py``): markers are well formed, every shell block either runs
here as written or is marked illustrative with its reason, every ``gpuspark`` command it shows
parses, and the rendering section runs and writes what the guide's table lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_readme_commands import (  # tests/test_readme_commands.py
    SHELLS,
    Unit,
    block_argv,
    cli_problems,
    readme_blocks,
    run_block,
    run_units,
    static_cases,
    user_env,
)

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "bare-metal.md"
TEXT = GUIDE.read_text(encoding="utf-8")
BLOCKS, PROBLEMS = readme_blocks(TEXT)
UNITS = run_units(BLOCKS)
STATIC = [case for case in static_cases(TEXT) if case[1][0] == "gpuspark"]


def test_markers_follow_the_convention() -> None:
    assert not PROBLEMS, "\n".join(PROBLEMS)


def test_every_shell_block_runs_or_says_why_not() -> None:
    shell = [b for b in BLOCKS if b.lang in SHELLS]
    assert len(shell) == 3
    for block in shell:
        assert block.runs or block.markers.get("illustrative"), f"line {block.line}"
    assert [u.section for u in UNITS] == ["2. Render"]


@pytest.mark.parametrize(("where", "words", "complete"), STATIC, ids=[c[0][:80] for c in STATIC])
def test_command_line_parses(where: str, words: list[str], complete: bool) -> None:
    assert not cli_problems(words, complete=complete), where


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.section[:60])
def test_the_guide_runs_as_written(unit: Unit, tmp_path: Path) -> None:
    work, home, scripts = tmp_path / "work", tmp_path / "user", tmp_path / "scripts"
    for path in (work, home, scripts):
        path.mkdir()
    for block in unit.blocks:
        rc, out = run_block(block_argv(block, scripts), work, user_env(home))
        assert rc == 0, f"docs/bare-metal.md line {block.line} failed (exit {rc}):\n{out[-4000:]}"
    table = TEXT.split("What it writes:")[1].split("\n\n")[1]
    listed = re.findall(r"`([^`]+)`", "\n".join(row.split("|")[1] for row in table.splitlines()))
    out = work / "standalone"
    for name in listed:
        name = name.replace("<host>", "dgx01")
        if "/" not in name and name.endswith(".service"):
            name = f"systemd/{name}"
        assert (out / name).is_file(), name
