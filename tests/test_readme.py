"""The README describes only what exists: every ``gpuspark.x.y`` name it mentions resolves, every
``from gpuspark... import ...`` line in its code blocks imports, and its module map lists every
package of the source tree."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


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


# Dotted names, not file paths (``provisioning/dashboards/gpuspark.yaml``).
NAMES = sorted(
    {m.rstrip(".") for m in re.findall(r"(?<![/\w-])gpuspark(?:\.[A-Za-z_][\w]*)+", README)}
)
IMPORTS = sorted(set(re.findall(r"^from (gpuspark[\w.]*) import ([\w, ]+)$", README, re.M)))


@pytest.mark.parametrize("dotted", NAMES)
def test_named_api_exists(dotted: str) -> None:
    _resolve(dotted)


@pytest.mark.parametrize(("module", "names"), IMPORTS)
def test_code_block_imports_work(module: str, names: str) -> None:
    mod = importlib.import_module(module)
    for name in (n.strip() for n in names.split(",")):
        assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}"), name


def test_module_map_lists_every_package() -> None:
    tree = README[README.index("src/gpuspark/\n") :]
    tree = tree[: tree.index("```")]
    src = ROOT / "src" / "gpuspark"
    packages = sorted(
        str(p.parent.relative_to(src)) + "/"
        for p in src.rglob("__init__.py")
        if p.parent != src and "_internal" not in p.parts
    )
    missing = [p for p in packages if p not in tree and p.split("/")[-2] + "/" not in tree]
    assert not missing, f"README module map misses {missing}"
    modules = sorted(p.name for p in src.glob("*.py") if p.name != "__init__.py")
    assert all(m in tree for m in modules), modules
