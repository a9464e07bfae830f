"""Every command's ``--help`` shows all of its text: nothing in square brackets is eaten as
markup, and every option's default and environment variable are visible.

The click command tree is walked from the root (new commands are checked without being
listed here); each command group is also rendered on its own, as a documentation generator
or ``typer.main.get_command(sub_app)`` would render it.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
import typer.main

from gpuspark.cli.main import app

WIDTH = 80
_SPACE_BEFORE_MARK = re.compile(r"\S+ +[.,)]")
_DEFAULT = re.compile(r"\bdefault: \S")


def _walk(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``(path, command)`` for ``command`` and every command below it."""
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _walk(sub, (*path, name))


def _typers(typer_app: typer.Typer, name: str = "gpuspark") -> Iterator[tuple[str, typer.Typer]]:
    """``(name, app)`` of ``typer_app`` and of every Typer app added below it."""
    yield name, typer_app
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            yield from _typers(group.typer_instance, f"{name} {group.name}")


def _context(command: Any, path: tuple[str, ...], root: Any) -> Any:
    """A click context for ``command`` at ``path`` below ``root``, at :data:`WIDTH` columns."""
    ctx = root.context_class(root, info_name="gpuspark", terminal_width=WIDTH)
    cmd = root
    for name in path:
        cmd = cmd.commands[name]
        ctx = cmd.context_class(cmd, info_name=name, parent=ctx)
    return ctx


def _flat(text: str) -> str:
    """``text`` with every run of white space made one space."""
    return " ".join(text.split())


def _bare(text: str) -> str:
    """``text`` without white space (a line may wrap anywhere, after a hyphen too)."""
    return "".join(text.split())


def _brackets(text: str) -> list[str]:
    """Every outermost ``[...]`` in ``text``."""
    out, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth, start = depth + 1, (i if depth == 0 else start)
        elif char == "]" and depth:
            depth -= 1
            if depth == 0:
                out.append(text[start : i + 1])
    return out


def _sources(command: Any) -> list[str]:
    """The help texts the source gives ``command``: its own and its parameters'."""
    texts = [command.help or "", command.short_help or ""]
    texts += [getattr(p, "help", None) or "" for p in command.params]
    return [t for t in texts if t]


def _shown_default(param: Any) -> bool:
    """Whether click knows a default of ``param`` that help must show (not ``None``, not an
    off flag, not an empty list)."""
    default = param.default
    if default is None or (getattr(param, "is_flag", False) and default is False):
        return False
    return not (isinstance(default, list | tuple) and not default)


def _render(command: Any, ctx: Any) -> str:
    """``command``'s help text in ``ctx``, also where it is printed rather than returned (rich)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        page = command.get_help(ctx)
    return page + printed.getvalue()


def _problems(command: Any, ctx: Any) -> list[str]:
    """What ``command``'s help (rendered in ``ctx``) loses."""
    page = _render(command, ctx)
    problems = []
    sources = _sources(command)
    for source in sources:
        for bracket in _brackets(source):
            if _bare(bracket) not in _bare(page):
                problems.append(f"{bracket!r} of the help text is not shown")
    if any("[" in s for s in sources):
        allowed = {m for s in sources for m in _SPACE_BEFORE_MARK.findall(_flat(s))}
        for mark in set(_SPACE_BEFORE_MARK.findall(_flat(page))) - allowed:
            problems.append(f"{mark!r}: a space before a mark (text in brackets eaten?)")
    for param in command.params:
        record = param.get_help_record(ctx)
        if record is None or param.name == "help":
            continue
        text = record[1]
        if _bare(text) not in _bare(page):
            problems.append(f"{param.name}: help {text!r} is not shown as such")
        if _shown_default(param) and not _DEFAULT.search(text):
            problems.append(f"{param.name}: default {param.default!r} not shown")
        if getattr(param, "envvar", None) and f"env var: {param.envvar}" not in _flat(text):
            problems.append(f"{param.name}: env var {param.envvar} not shown")
    return problems


def _tree_problems(root: Any) -> dict[str, list[str]]:
    """``{command path: problems}`` of every command below (and including) ``root``."""
    found = {}
    for path, command in _walk(root):
        problems = _problems(command, _context(command, path, root))
        if problems:
            found[" ".join(("gpuspark", *path))] = problems
    return found


def _assert_none(found: dict[str, list[str]]) -> None:
    lines = [f"{path}: {problem}" for path, problems in found.items() for problem in problems]
    assert not lines, "\n".join(lines)


def test_walk_reaches_every_command() -> None:
    """The walk is not vacuous: groups, their subcommands and nested groups are reached."""
    paths = {" ".join(p) for p, _ in _walk(typer.main.get_command(app))}
    assert {"cluster up", "render spark", "prep images", "plan calibrate"} <= paths
    assert len(paths) > 40


def test_every_help_shows_brackets_defaults_and_env_vars() -> None:
    """``gpuspark ... --help`` of every command, as the user runs it."""
    _assert_none(_tree_problems(typer.main.get_command(app)))


_GROUPS = list(_typers(app))[1:]


@pytest.mark.parametrize(("name", "sub"), _GROUPS, ids=[name for name, _ in _GROUPS])
def test_every_command_group_renders_the_same_on_its_own(name: str, sub: typer.Typer) -> None:
    """A command group's help, rendered from its own Typer app, loses nothing either: the
    markup setting is the project's, not each app's."""
    assert sub.rich_markup_mode is None, name
    _assert_none(_tree_problems(typer.main.get_command(sub)))


def test_cluster_up_shows_its_defaults() -> None:
    """The example of issue 31: the values click knows and the hand-written ones."""
    root = typer.main.get_command(app)
    command = root.commands["cluster"].commands["up"]
    page = _flat(_render(command, _context(command, ("cluster", "up"), root)))
    assert "[default: 120.0; x>=0.1]" in page
    assert "master and [spark] settings the job uses [default: the built-in" in page
    assert "[env var: GPUSPARK_SPEC]" in page


def test_the_check_catches_eaten_markup() -> None:
    """The same check on a command rendered with rich markup reports the lost brackets."""
    demo = typer.Typer(rich_markup_mode="rich")

    @demo.command()
    def one(
        spec: str = typer.Option("x", help="Whose [spark] settings [default: y]."),
        count: int = typer.Option(3, show_default=False, help="How many."),
        name: str = typer.Option("n", envvar="DEMO_NAME", show_envvar=False, help="Name."),
    ) -> None:
        """Do one thing."""

    problems = " ".join(_tree_problems(typer.main.get_command(demo))["gpuspark"])
    assert "'[spark]' of the help text is not shown" in problems
    assert "'settings .': a space before a mark" in problems
    assert "count: default 3 not shown" in problems
    assert "name: env var DEMO_NAME not shown" in problems
