"""MkDocs hook (``hooks:`` in mkdocs.yml): the generated parts of the documentation site.

A page asks for generated text with a placeholder comment on a line of its own::

    <!-- gpuspark:generate cli -->          every command's --help, from the Click tree
    <!-- gpuspark:generate envvars -->      the GPUSPARK_* table, from gpuspark._util.envvars
    <!-- gpuspark:generate doctor -->       the known-failure catalogue of `gpuspark doctor logs`
    <!-- gpuspark:include README.md -->     a file of the repository root (links into docs/ fixed)

Nothing generated is checked in: the site is built from the code it documents
(``mkdocs build --strict`` in ``make lint``). ``tests/docs/test_generated.py`` runs these
functions. API pages (mkdocstrings) are cleaned of Sphinx roles (``:func:`x```) in
:func:`on_page_content`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = re.compile(r"^<!-- gpuspark:(generate|include) (\S+) -->$", re.M)
HELP_WIDTH = 100


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    """Every command of the tree, depth first, in the order ``gpuspark --help`` lists them."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, [*path, name])


def command_tree() -> list[tuple[list[str], Any]]:
    """(words, Click command) for ``gpuspark`` and every sub-command."""
    import typer

    from gpuspark.cli.main import app

    return list(_commands(typer.main.get_command(app), ["gpuspark"]))


def help_text(words: list[str], command: Any) -> str:
    """``gpuspark WORDS --help`` as printed at a fixed width (no terminal involved)."""
    import click

    ctx = click.Context(
        command, info_name=" ".join(words), terminal_width=HELP_WIDTH, max_content_width=HELP_WIDTH
    )
    return command.get_help(ctx).rstrip()


def cli_reference() -> str:
    """Markdown: an index of every command with its one-line summary, then each --help."""
    tree = command_tree()
    lines = ["| command | what it does |", "|---|---|"]
    for words, command in tree[1:]:
        anchor = "-".join(words)
        summary = command.get_short_help_str(limit=120).replace("|", "\\|")
        lines.append(f"| [`{' '.join(words)}`](#{anchor}) | {summary} |")
    for words, command in tree:
        lines += ["", f"## {' '.join(words)} {{ #{'-'.join(words)} }}", ""]
        lines += ["```text", help_text(words, command), "```"]
    return "\n".join(lines) + "\n"


def envvars_reference() -> str:
    """Markdown: the table of every ``GPUSPARK_*`` variable."""
    from gpuspark._util import envvars

    return envvars.markdown_table()


def doctor_catalogue() -> str:
    """Markdown: the known failures and XID codes of ``gpuspark doctor logs``."""
    from gpuspark.doctor.catalogue import catalogue_markdown

    return catalogue_markdown()


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "envvars": envvars_reference,
    "doctor": doctor_catalogue,
}
INCLUDES = {"README.md", "CHANGELOG.md"}
_DOCS_LINK = re.compile(r"\]\(docs/([^)]*)\)")


def include(name: str) -> str:
    """A root file as a page of the site: its links into ``docs/`` made site-relative and
    its link to the changelog pointed at the changelog page."""
    if name not in INCLUDES:
        raise ValueError(f"gpuspark:include {name}: not one of {sorted(INCLUDES)}")
    text = (ROOT / name).read_text(encoding="utf-8")
    text = _DOCS_LINK.sub(r"](\1)", text)
    return text.replace("](CHANGELOG.md)", "](changelog.md)")


def expand(markdown: str) -> str:
    """``markdown`` with every placeholder replaced; an unknown one raises."""

    def one(match: re.Match[str]) -> str:
        kind, name = match.groups()
        if kind == "include":
            return include(name)
        if name not in GENERATORS:
            raise ValueError(f"gpuspark:generate {name}: not one of {sorted(GENERATORS)}")
        return GENERATORS[name]()

    return PLACEHOLDER.sub(one, markdown)


_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|ref):<code>(~?)([^<]*)</code>")


def strip_roles(html: str) -> str:
    """Sphinx roles left in rendered docstrings (``:func:`~a.b``` -> ``b``)."""

    def one(match: re.Match[str]) -> str:
        short, name = match.groups()
        return f"<code>{name.rsplit('.', 1)[-1] if short else name}</code>"

    return _ROLE.sub(one, html)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs hook: expand the placeholders of a page before it is rendered."""
    return expand(markdown)


def on_page_content(html: str, **kwargs: Any) -> str:
    """MkDocs hook: rendered docstrings without Sphinx role markup."""
    return strip_roles(html)
