"""Every command example in README.md and in the pages of docs/ runs as written, or says why
it cannot.

The convention (docs/development.md, "Documentation examples are tested"):

- Every fenced block tagged ``bash``, ``console``, ``sh``, ``shell`` or ``python`` is RUN here,
  unless a marker comment stands on the lines just above its opening fence (blank lines
  between are fine). Markers:

  ``<!-- readme-test: illustrative: REASON -->``
      not run; REASON says why (a real cluster, 8 GPUs, a fragment with a placeholder, ...).
  ``<!-- readme-test: slow -->``
      run only with ``-m slow`` (the full demo, benchmarks), with the blocks after it in its
      section; the blocks before it also run by default. Run it before committing.
  ``<!-- readme-test: continues: SECTION -->``
      run in the directory of the ``## SECTION`` heading, after its blocks (it uses their files).

  A marker that does not stand above a fence, an unknown marker or an illustrative marker
  without a reason fails. So a new example is tested unless its author says why not.
- Run blocks are grouped by ``## `` section (``###`` belong to theirs) of their page and run
  in page order, one fresh directory per section as the working directory, ``HOME`` a fresh
  directory with ``GPUSPARK_STATE_DIR``/``GPUSPARK_MONITOR_DIR``/``GPUSPARK_LOG_DIR`` under
  it, and the running interpreter's ``bin`` first on ``PATH`` (so ``gpuspark`` is the
  installed console script). Shell blocks run exactly as written with ``bash -euo
  pipefail`` (``console``: the ``$ `` lines); Python blocks run as a script with that
  interpreter. Any embedded cluster a section left running is stopped with ``gpuspark
  cluster down`` (same environment: only the cluster this test started). A section using
  Spark carries the ``spark`` marker.
- Statically, for every block (run or not), every inline ``gpuspark ...`` code span and the
  ``make`` lines: the sub-command exists and each ``-o``/``--option`` it uses exists on that
  command (resolved on the Click command of ``gpuspark.cli.main.app``; nothing executes);
  ``make`` targets exist in the Makefile; Python blocks compile.
- Every page of ``docs/`` (``DOCS_PAGES``) is held to the same convention as the README, and
  its run blocks run the same way, except the pages in ``RUN_ELSEWHERE``, whose own tests run
  them (and check what they write); their command lines are checked here too. Blocks of other
  languages (``text`` output, ``toml`` and ``yaml`` fragments, synopses without a language)
  are not run; synopses' ``gpuspark`` lines must parse.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
QUICKSTART = "Quickstart on this machine"
SHELLS = {"bash", "console", "sh", "shell"}
RUN_LANGS = SHELLS | {"python"}
MARKER = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->\s*$")
KINDS = {"illustrative", "slow", "continues"}
FENCE = re.compile(r"^```(\S*)\s*$")
SPARK_USE = re.compile(
    r"gpuspark (?:-v )?(?:cluster up|launch (?!--dry-run)|prep |train |demo)"
    r"|LocalCluster|job_session|prep_(?:dicom|images)\(|write_dataframe\("
)
BLOCK_TIMEOUT_S = 900


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it is, its language, text and markers."""

    line: int
    lang: str
    section: str
    text: str
    markers: dict[str, str]
    page: str = "README.md"

    @property
    def runs(self) -> bool:
        """Whether this module runs the block (a shell or Python block not marked illustrative)."""
        return self.lang in RUN_LANGS and "illustrative" not in self.markers


@dataclass
class Unit:
    """The blocks run in one directory: a section's own, then those that continue it."""

    section: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def slow(self) -> bool:
        return any("slow" in b.markers for b in self.blocks)

    def fast_part(self) -> Unit:
        """The blocks before the first slow one (they cannot depend on a slow block)."""
        cut = next((i for i, b in enumerate(self.blocks) if "slow" in b.markers), None)
        return Unit(self.section, self.blocks[:cut])

    @property
    def spark(self) -> bool:
        return any(SPARK_USE.search(b.text) for b in self.blocks)


def parse_markers(lines: list[str], fence: int, seen: set[int]) -> tuple[dict[str, str], list[str]]:
    """The markers on the lines above ``lines[fence]`` (kind -> argument) and any problems;
    the marker lines' indexes are added to ``seen``."""
    markers: dict[str, str] = {}
    problems: list[str] = []
    i = fence - 1
    while i >= 0 and (not lines[i].strip() or MARKER.match(lines[i].strip())):
        found = MARKER.match(lines[i].strip())
        if found:
            seen.add(i)
            kind, _, arg = found.group(1).partition(":")
            kind, arg = kind.strip(), arg.strip()
            if kind not in KINDS:
                problems.append(f"line {i + 1}: unknown readme-test marker {kind!r}")
            elif kind in ("illustrative", "continues") and not arg:
                problems.append(f"line {i + 1}: '{kind}:' needs a reason or a section")
            markers[kind] = arg
        i -= 1
    return markers, problems


def readme_blocks(text: str) -> tuple[list[Block], list[str]]:
    """Every fenced block of ``text`` in order, and the problems of the marker convention."""
    lines = text.splitlines()
    blocks: list[Block] = []
    problems: list[str] = []
    seen: set[int] = set()
    section, i = "", 0
    while i < len(lines):
        if lines[i].startswith("## "):
            section = lines[i][3:].strip()
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        markers, found = parse_markers(lines, i, seen)
        problems += found
        body = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(Block(i + 1, opening.group(1).lower(), section, body, markers))
        if markers and opening.group(1).lower() not in RUN_LANGS:
            problems.append(f"line {i + 1}: readme-test marker above a ```{opening.group(1)} block")
        i = end + 1
    for j, line in enumerate(lines):
        if MARKER.match(line.strip()) and j not in seen:
            problems.append(f"line {j + 1}: readme-test marker not directly above a fence")
    return blocks, problems


def run_units(blocks: list[Block]) -> list[Unit]:
    """Run blocks grouped by section (``continues`` ones appended to theirs), README order."""
    units: dict[str, Unit] = {}
    for block in (b for b in blocks if b.runs):
        section = block.markers.get("continues", block.section)
        units.setdefault(section, Unit(section)).blocks.append(block)
    return list(units.values())


# --- static check of command lines ---------------------------------------------------------


def logical_lines(block: Block) -> list[str]:
    """Command lines of a block: ``\\``-continuations joined; in blocks without a language
    (synopses) indented lines continue the one above; ``console`` keeps its ``$ `` lines."""
    out: list[str] = []
    for raw in block.text.splitlines():
        line = raw.rstrip()
        if block.lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if out and (out[-1].endswith("\\") or (block.lang == "" and raw[:1].isspace())):
            out[-1] = out[-1].rstrip("\\").rstrip() + " " + line.strip()
        else:
            out.append(line.strip())
    return [line for line in out if line]


def commands_in(line: str, program: str) -> list[list[str]]:
    """The ``program ...`` commands of one line (split at ``&&``, ``||`` and ``;``), as words
    without comments or the brackets of synopses."""
    found = []
    for part in re.split(r"&&|\|\||;", line):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            words = part.split()
        words = [w.strip("[](){}") for w in words]
        words = [w for w in words if w]
        if words and (words[0] == program or words[0].endswith(f"bin/{program}")):
            found.append(words)
    return found


def _options_of(command: Any) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(o for o in [*param.opts, *param.secondary_opts] if o.startswith("-"))
    return names


def _takes_value(command: Any, name: str) -> bool:
    """Whether option ``name`` of ``command`` is followed by a value (not a flag)."""
    for param in command.params:
        if name in [*param.opts, *param.secondary_opts]:
            return not (getattr(param, "is_flag", False) or getattr(param, "count", False))
    return False


@functools.cache
def _cli() -> Any:
    """The Click command tree of ``gpuspark`` (built once: it is read, never run)."""
    import typer

    from gpuspark.cli.main import app

    return typer.main.get_command(app)


def cli_problems(words: list[str], *, complete: bool) -> list[str]:
    """Why ``gpuspark WORDS...`` would not parse: an unknown sub-command or option. With
    ``complete``, the words must reach a command (not stop at a group), unless a placeholder
    (``COMMAND``, ``...``) stands for the rest. Typer's Click command tree is read (groups
    have ``commands``); Click itself is vendored by Typer, so it is not imported here."""
    command: Any = _cli()
    path = ["gpuspark"]
    value_next = False
    for word in words[1:]:
        if word == "--":
            break
        if value_next:  # the value of a group's option (`gpuspark plan --spec FILE ...`)
            value_next = False
            continue
        if re.match(r"--?[A-Za-z]", word):
            name = word.split("=", 1)[0]
            if name not in _options_of(command):
                return [f"'{' '.join(path)}' has no option {name}"]
            value_next = "=" not in word and _takes_value(command, name)
            continue
        if not hasattr(command, "commands"):
            if not command.context_settings.get("allow_interspersed_args", True):
                break  # the first argument ends the command's options (launch SCRIPT ARGS...)
            continue  # an argument or an option's value
        if word == "..." or word.isupper() or "|" in word:
            return []  # a placeholder for the sub-command
        sub = command.commands.get(word)
        if sub is None:
            return [f"'{' '.join(path)}' has no sub-command {word!r}"]
        command, path = sub, [*path, word]
    runs_alone = getattr(command, "invoke_without_command", False)  # `gpuspark doctor`
    eager = {"--help", "--version"} & set(words)  # they print and exit before any sub-command
    if complete and hasattr(command, "commands") and not eager and not runs_alone:
        return [f"'{' '.join(path)}' needs a sub-command"]
    return []


def _makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, re.M))


def static_cases(text: str) -> list[tuple[str, list[str], bool]]:
    """(where, words, complete) for every ``gpuspark``/``make`` command the README shows."""
    blocks, _ = readme_blocks(text)
    cases = []
    for block in blocks:
        if block.lang == "python":
            continue
        for line in logical_lines(block):
            for program in ("gpuspark", "make"):
                for words in commands_in(line, program):
                    cases.append((f"line {block.line}: {' '.join(words)}", words, True))
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    for span in re.findall(r"`(gpuspark(?: [^`]*)?)`", prose):
        for words in commands_in(span, "gpuspark"):
            cases.append((f"inline: {span}", words, False))
    return cases


TEXT = README.read_text()
BLOCKS, MARKER_PROBLEMS = readme_blocks(TEXT)
UNITS = run_units(BLOCKS)
STATIC = static_cases(TEXT)

# --- the pages of docs/ --------------------------------------------------------------------

RUN_ELSEWHERE = {
    "kubernetes.md": "tests/schedulers/kubernetes/test_k8s_guide.py",
    "bare-metal.md": "tests/schedulers/standalone/test_bare_metal_guide.py",
}
"""Pages whose run blocks another test runs (it also checks what they write)."""
DOCS_PAGES = {
    path.relative_to(DOCS).as_posix(): path.read_text(encoding="utf-8")
    for path in sorted(DOCS.rglob("*.md"))
}


def page_blocks(page: str, text: str) -> tuple[list[Block], list[str]]:
    """The blocks of one docs page, each section named ``PAGE: SECTION`` (so sections of two
    pages never share a unit), and the page's marker problems."""
    blocks, problems = readme_blocks(text)
    out = []
    for block in blocks:
        markers = dict(block.markers)
        if "continues" in markers:
            markers["continues"] = f"{page}: {markers['continues']}"
        out.append(replace(block, page=page, section=f"{page}: {block.section}", markers=markers))
    return out, [f"{page} {problem}" for problem in problems]


def _docs() -> tuple[list[Block], list[str], list[tuple[str, list[str], bool]]]:
    blocks: list[Block] = []
    problems: list[str] = []
    cases = []
    for page, text in DOCS_PAGES.items():
        found, wrong = page_blocks(page, text)
        blocks += found
        problems += wrong
        cases += [(f"{page} {where}", words, done) for where, words, done in static_cases(text)]
    return blocks, problems, cases


DOCS_BLOCKS, DOCS_MARKER_PROBLEMS, DOCS_STATIC = _docs()
DOCS_UNITS = run_units([b for b in DOCS_BLOCKS if b.page not in RUN_ELSEWHERE])


def _continues_problems(blocks: list[Block]) -> list[str]:
    sections = {b.section for b in blocks}
    return [
        f"{b.page} line {b.line}: 'continues: {b.markers['continues']}' names no ## section"
        for b in blocks
        if "continues" in b.markers and b.markers["continues"] not in sections
    ]


def test_markers_follow_the_convention() -> None:
    problems = list(MARKER_PROBLEMS) + _continues_problems(BLOCKS)
    assert not problems, "\n".join(problems)


def test_docs_markers_follow_the_convention() -> None:
    problems = list(DOCS_MARKER_PROBLEMS) + _continues_problems(DOCS_BLOCKS)
    assert not problems, "\n".join(problems)


def test_the_readme_has_run_and_illustrative_examples() -> None:
    """The parser sees the README's blocks (a broken parser must not pass by finding none)."""
    shell = [b for b in BLOCKS if b.lang in SHELLS]
    assert len(shell) >= 3 and sum(b.runs for b in shell) >= 1
    assert any("illustrative" in b.markers for b in shell)
    assert "Quickstart on this machine" in [u.section for u in UNITS]


def test_the_docs_have_run_and_illustrative_examples() -> None:
    """Every page is read (the run pages, the guides, the generated ones), and most of the
    shell and Python blocks run, by default or with ``-m slow``."""
    assert {"concepts.md", "launch.md", "kubernetes.md", "cli.md"} <= set(DOCS_PAGES)
    code = [b for b in DOCS_BLOCKS if b.lang in RUN_LANGS]
    assert len(code) >= 40 and sum(b.runs for b in code) >= 25
    assert sum("slow" in b.markers for b in code) >= 5
    assert len(DOCS_UNITS) >= 10 and any(not u.slow for u in DOCS_UNITS)


def test_every_page_is_linked_from_the_readme_or_the_site() -> None:
    """A page nobody can reach is a page nobody reads: each is in mkdocs.yml's nav."""
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [page for page in DOCS_PAGES if f" {page}" not in nav and f"- {page}" not in nav]
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"


ALL_STATIC = [(f"README.md {w}", words, c) for w, words, c in STATIC] + DOCS_STATIC


@pytest.mark.parametrize(
    ("where", "words", "complete"), ALL_STATIC, ids=[c[0][:80] for c in ALL_STATIC]
)
def test_command_line_parses(where: str, words: list[str], complete: bool) -> None:
    if words[0] == "make":
        missing = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        assert set(missing) <= _makefile_targets(), f"{where}: no make target {missing}"
        return
    problems = cli_problems(words, complete=complete)
    assert not problems, f"{where}: {problems}"


@pytest.mark.parametrize(
    "block",
    [b for b in [*BLOCKS, *DOCS_BLOCKS] if b.lang == "python"],
    ids=lambda b: f"{b.page}-line-{b.line}",
)
def test_python_block_compiles(block: Block) -> None:
    compile(block.text, f"{block.page}:{block.line}", "exec")


# --- running the examples ------------------------------------------------------------------


def user_env(home: Path) -> dict[str, str]:
    """A user's environment: a fresh HOME with gpuspark's directories under it, the running
    interpreter's venv first on PATH, no spec chosen and no Python forced on Spark. The JVM
    archives are those ``make setup`` built (``~/.gpuspark/jvm``): the user ran it first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSPARK_", "PYSPARK_"))}
    built = Path.home() / ".gpuspark" / "jvm"
    if built.is_dir() and not (home / ".gpuspark" / "jvm").exists():
        (home / ".gpuspark").mkdir(parents=True, exist_ok=True)
        (home / ".gpuspark" / "jvm").symlink_to(built, target_is_directory=True)
    env["HOME"] = str(home)
    env["GPUSPARK_STATE_DIR"] = str(home / ".gpuspark" / "cluster")
    env["GPUSPARK_MONITOR_DIR"] = str(home / ".gpuspark" / "monitor")
    env["GPUSPARK_LOG_DIR"] = str(home / ".gpuspark" / "logs")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def block_argv(block: Block, scripts: Path) -> list[str]:
    """The command running ``block`` as written: bash for shell blocks, python for Python."""
    if block.lang == "python":
        script = scripts / f"{Path(block.page).stem}_line_{block.line}.py"
        script.write_text(block.text)
        return [sys.executable, str(script)]
    body = "\n".join(logical_lines(block)) if block.lang == "console" else block.text
    return ["bash", "-euo", "pipefail", "-c", body]


def run_block(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run in its own process group; on timeout that group (all ours) is killed."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return 124, out + f"\n[timed out after {BLOCK_TIMEOUT_S} s]"
    return proc.returncode, out


WASTED = "will result in wasted resources"


def check_quickstart(out: str, work: Path, home: Path) -> None:
    """The quickstart did what its comments say: 2 ranks three times, simulated slots, the last
    launch started and stopped its own cluster, the data job wrote shards, and each of the 4
    Spark commands wrote its own driver log without Spark's wasted-resources warning."""
    from gpuspark.cluster.local import LocalCluster

    assert out.count("rank 0 of 2: sum 3") == 3 and out.count("rank 1 of 2: sum 3") == 3, out
    assert "simulated" in out and WASTED not in out
    assert "starting one for this job" in out
    assert LocalCluster.running(home / ".gpuspark" / "cluster") is None
    assert (work / "data" / "img-shards" / "manifest.json").exists()
    logs = sorted((home / ".gpuspark" / "logs").glob("driver-*.log"))
    assert len(logs) == 4, [p.name for p in logs]
    assert all(WASTED not in p.read_text() for p in logs)


def check_connect_quickstart(out: str, work: Path, home: Path) -> None:
    """The quickstart through Spark Connect: 2 ranks three times, every job through the
    cluster's Connect server, the data job's shards, no cluster left running."""
    from gpuspark.cluster.local import LocalCluster

    assert out.count("rank 0 of 2: sum 3") == 3 and out.count("rank 1 of 2: sum 3") == 3, out
    assert "this job goes through it (sc://" in " ".join(out.split()), out  # wrapped lines
    assert (work / "data" / "sc-shards" / "manifest.json").exists()
    assert LocalCluster.running(home / ".gpuspark" / "cluster") is None


CHECKS: dict[int, Callable[[str, Path, Path], None]] = {
    b.line: check_connect_quickstart if "slow" in b.markers else check_quickstart
    for b in BLOCKS
    if b.section == QUICKSTART and b.runs and "gpuspark cluster up" in b.text
}


def _params() -> list[Any]:
    params = []
    for unit in [*UNITS, *DOCS_UNITS]:
        fast = unit.fast_part()
        # README.md's quickstart (docs units: "page: …") is end to end, minutes long: its slow
        # param below runs all its blocks, and `make test-compat`, which CI runs after `make
        # test`, runs it with these checks on pyspark 3.5 (its fast part) and 4.x (all of it;
        # tests/compat).
        quickstart = unit.section == QUICKSTART and unit.slow
        if fast.blocks and not quickstart:
            marks = [pytest.mark.spark] if fast.spark else []
            params.append(pytest.param(fast, marks=marks, id=unit.section[:60]))
        if unit.slow:
            marks = [pytest.mark.slow, *([pytest.mark.spark] if unit.spark else [])]
            params.append(pytest.param(unit, marks=marks, id=f"{unit.section[:60]} (slow)"))
    return params


def run_checked(
    block: Block, work: Path, home: Path, scripts: Path, env: dict[str, str]
) -> dict[str, Any]:
    """Run ``block`` as written in ``work``, assert it exited 0, then run its README checks;
    its line and seconds."""
    start = time.monotonic()
    rc, out = run_block(block_argv(block, scripts), work, env)
    print(f"{block.page} line {block.line} ({block.lang}): rc {rc}\n{out}")
    assert rc == 0, f"{block.page} line {block.line} failed (exit {rc}):\n{out[-6000:]}"
    if block.page == "README.md" and block.line in CHECKS:
        CHECKS[block.line](out, work, home)
    return {"line": block.line, "seconds": round(time.monotonic() - start, 1)}


@pytest.mark.parametrize("unit", _params())
def test_readme_section_runs_as_written(unit: Unit, tmp_path: Path) -> None:
    work, home, scripts = tmp_path / "work", tmp_path / "home", tmp_path / "scripts"
    for path in (work, home, scripts):
        path.mkdir()
    env = user_env(home)
    timings: list[dict[str, Any]] = []
    try:
        for block in unit.blocks:
            timings.append(run_checked(block, work, home, scripts, env))
    finally:
        if unit.spark:
            down = subprocess.run(
                ["gpuspark", "cluster", "down"],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            print(down.stdout + down.stderr)
        shown = (f"line {t['line']}: {t['seconds']} s" for t in timings)
        print(f"{unit.section}: " + ", ".join(shown))
