"""The README and the documentation pages describe only what exists: every ``gpuspark.x.y``
name they mention resolves, every ``from gpuspark... import ...`` line in their code blocks
imports, every ``GPUSPARK_*`` variable they name is registered, and the module map
(docs/development.md) lists every package of the source tree."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from gpuspark._util import envvars

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TEXTS = {
    "README.md": (ROOT / "README.md").read_text(encoding="utf-8"),
    "CHANGELOG.md": (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
    **{f"docs/{p.relative_to(DOCS)}": p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md")},
}
ALL_TEXT = "\n".join(TEXTS.values())


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


# Dotted names, not file paths (``provisioning/dashboards/gpuspark.yaml``, ``gpuspark.nft``).
FILE_SUFFIXES = {"conf", "json", "log", "md", "nft", "py", "service", "sh", "toml", "txt", "yaml"}
NAMES = sorted(
    {
        name
        for m in re.findall(r"(?<![/\w-])gpuspark(?:\.[A-Za-z_][\w]*)+", ALL_TEXT)
        if (name := m.rstrip(".")).rsplit(".", 1)[-1] not in FILE_SUFFIXES
    }
)
IMPORTS = sorted(set(re.findall(r"^from (gpuspark[\w.]*) import ([\w, ]+)$", ALL_TEXT, re.M)))


@pytest.mark.parametrize("dotted", NAMES)
def test_named_api_exists(dotted: str) -> None:
    _resolve(dotted)


@pytest.mark.parametrize(("module", "names"), IMPORTS)
def test_code_block_imports_work(module: str, names: str) -> None:
    mod = importlib.import_module(module)
    for name in (n.strip() for n in names.split(",")):
        assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}"), name


def test_the_pages_are_read() -> None:
    """A broken glob must not pass by finding nothing to check."""
    assert {"docs/concepts.md", "docs/cli.md", "docs/api/index.md"} <= set(TEXTS)
    assert len(NAMES) >= 50 and len(IMPORTS) >= 15


def test_every_named_variable_is_registered() -> None:
    named = set(re.findall(r"GPUSPARK_[A-Z0-9_]+", ALL_TEXT))
    assert named - {var.name for var in envvars.ALL} == set()


def test_module_map_lists_every_package() -> None:
    text = TEXTS["docs/development.md"]
    tree = text[text.index("src/gpuspark/\n") :]
    tree = tree[: tree.index("```")]
    src = ROOT / "src" / "gpuspark"
    packages = sorted(
        str(p.parent.relative_to(src)) + "/"
        for p in src.rglob("__init__.py")
        if p.parent != src and "_internal" not in p.parts
    )
    missing = [p for p in packages if p not in tree and p.split("/")[-2] + "/" not in tree]
    assert not missing, f"the module map of docs/development.md misses {missing}"
    modules = sorted(p.name for p in src.glob("*.py") if p.name != "__init__.py")
    assert all(m in tree for m in modules), modules
