"""The deployment guide (``docs/kubernetes.md``) under the README's convention
(``tests/test_readme_commands.py``, which covers README.md only): markers are well formed,
every shell block either runs here as written or is marked illustrative with its reason,
every ``gpuspark`` and ``make`` command it shows parses, and the blocks that need no cluster
(``init``, ``validate``, ``render k8s``) run."""

from __future__ import annotations

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

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "kubernetes.md"
TEXT = GUIDE.read_text(encoding="utf-8")
BLOCKS, PROBLEMS = readme_blocks(TEXT)
UNITS = run_units(BLOCKS)
STATIC = [case for case in static_cases(TEXT) if case[1][0] == "gpuspark"]


def test_markers_follow_the_convention() -> None:
    sections = {b.section for b in BLOCKS}
    problems = list(PROBLEMS)
    for block in BLOCKS:
        target = block.markers.get("continues")
        if target is not None and target not in sections:
            problems.append(f"line {block.line}: 'continues: {target}' names no ## section")
    assert not problems, "\n".join(problems)


def test_every_shell_block_runs_or_says_why_not() -> None:
    shell = [b for b in BLOCKS if b.lang in SHELLS]
    assert len(shell) >= 10
    for block in shell:
        assert block.runs or block.markers.get("illustrative"), f"line {block.line}"
    assert [u.section for u in UNITS] == ["3. Describe the cluster: the spec"]


@pytest.mark.parametrize(("where", "words", "complete"), STATIC, ids=[c[0][:80] for c in STATIC])
def test_command_line_parses(where: str, words: list[str], complete: bool) -> None:
    assert not cli_problems(words, complete=complete), where


def test_make_targets_exist() -> None:
    makefile = (GUIDE.parents[1] / "Makefile").read_text()
    shown = [case for case in static_cases(TEXT) if case[1][0] == "make"]
    assert shown
    for where, words, _ in shown:
        targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        for target in targets:
            assert f"\n{target}:" in makefile, where


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.section[:60])
def test_the_guide_runs_as_written(unit: Unit, tmp_path: Path) -> None:
    work, home, scripts = tmp_path / "work", tmp_path / "user", tmp_path / "scripts"
    for path in (work, home, scripts):
        path.mkdir()
    for block in unit.blocks:
        rc, out = run_block(block_argv(block, scripts), work, user_env(home))
        assert rc == 0, f"docs/kubernetes.md line {block.line} failed (exit {rc}):\n{out[-4000:]}"
    spark = work / "k8s" / "spark"
    assert (spark / "spark-defaults.conf").is_file()
    assert (spark / "executor-pod-template.yaml").is_file()
