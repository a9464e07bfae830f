"""Nothing outside the scheduler package and the spec parser decides by a master's scheme:
an AST pass over ``src/`` finds no comparison (``==``, ``!=``, ``in``, ``startswith``,
``endswith``) with ``"yarn"``, ``"k8s://"``, ``"spark://"``, ``"local-cluster"`` or
``"embedded"``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "gpuspark"
SCHEMES = {"yarn", "k8s://", "spark://", "local-cluster", "embedded"}
ALLOWED = ("schedulers", "spec")


def _literals(node: ast.AST) -> set[str]:
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            found.add(sub.value)
    return found


def _branches(tree: ast.AST) -> list[tuple[int, str]]:
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith", "removeprefix")
        ):
            parts = list(node.args)
        else:
            continue
        for part in parts:
            for value in _literals(part) & SCHEMES:
                hits.append((node.lineno, value))
    return hits


def test_no_master_scheme_branches_outside_the_scheduler_package() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ALLOWED:
            continue
        for line, value in _branches(ast.parse(path.read_text())):
            problems.append(f"{rel}:{line} compares with {value!r}")
    assert not problems, "\n".join(problems)


def test_the_check_finds_a_branch() -> None:
    """The pass is not blind: the old form of the team conf is caught."""
    code = 'if target == "yarn":\n    pass\nelif target.startswith("k8s://"):\n    pass\n'
    assert _branches(ast.parse(code)) == [(1, "yarn"), (3, "k8s://")]
