"""Every ``GPUSPARK_*`` variable is defined once (``gpuspark._util.envvars``): no other module
spells a name as a string of its own, every name the source mentions is registered, and the
README's table is the generated one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpuspark._util import envvars

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "gpuspark"
REGISTRY = PACKAGE / "_util" / "envvars.py"
NAME = re.compile(r"GPUSPARK_[A-Z0-9_]+")


def test_names_are_spelled_only_in_the_registry() -> None:
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == REGISTRY:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and NAME.fullmatch(text):
                spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {text}")
    assert not spelled, "use gpuspark._util.envvars: " + ", ".join(spelled)


def test_every_mentioned_name_is_registered() -> None:
    registered = {var.name for var in envvars.ALL}
    assert len(registered) == len(envvars.ALL)
    mentioned = {m for p in PACKAGE.rglob("*.py") for m in NAME.findall(p.read_text())}
    mentioned.discard("GPUSPARK_")  # a prefix in prose ("GPUSPARK_* variables")
    assert mentioned - registered == set()


def test_get_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSPARK_CACHE_DIR", "/data/cache")
    assert envvars.CACHE_DIR.get() == "/data/cache"
    monkeypatch.setenv("GPUSPARK_CACHE_DIR", "")
    assert envvars.CACHE_DIR.get("dflt") == "dflt"
