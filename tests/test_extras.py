"""The lean install (``gpuspark._util.extras``): the domain libraries are extras, imported only
through ``require`` inside functions, and a missing one is a one-line error naming the extra.

The source and ``pyproject.toml`` are read, not run; a missing library is simulated in this
process by ``sys.modules[name] = None`` (Python then refuses ``import name`` exactly as for a
library that is not installed). ``make test-wheel`` checks the same on a real core-only install.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

from gpuspark._util.extras import EXTRAS, check_extras, require
from gpuspark.cli.main import main
from gpuspark.errors import GpusparkError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "gpuspark"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
DOMAIN = {m for modules in EXTRAS.values() for m in modules}
LEAN_OUT = {  # the distributions of the extras, none of which the core may list
    *("pydicom", "pylibjpeg", "pylibjpeg-libjpeg", "pylibjpeg-openjpeg", "pylibjpeg-rle"),
    *("pillow", "simplejpeg", "monai", "tokenizers", "matplotlib", "lightkube"),
}
MISSING_DICOM = (
    "prep dicom needs the [dicom] extra: pydicom is not installed (pip install 'gpuspark[dicom]')"
)


# --------------------------------------------------------------------------- the source


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _walk(node: ast.AST, in_function: bool = False):
    """(node, inside a function?) for every node, ``if TYPE_CHECKING:`` blocks left out."""
    for child in ast.iter_child_nodes(node):
        if _type_checking_only(child):
            continue
        inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
        yield child, inner
        yield from _walk(child, inner)


def _recipe_extras(node: ast.expr) -> bool:
    """``*recipe.extras``: a recipe's own pairs (:class:`Recipe.extras`)."""
    return isinstance(node, ast.Starred) and ast.unparse(node.value) == "recipe.extras"


def test_recipe_extras_are_known() -> None:
    """Every registered recipe's ``extras`` pairs name a module of their extra."""
    from gpuspark.train.recipes.registry import get_recipe, recipe_names

    recipes = [get_recipe(n) for n in recipe_names()]
    pairs = {(r.name, m, e) for r in recipes for m, e in r.extras}
    assert ("resnet2d", "PIL", "images") in pairs
    for name, module, extra in pairs:
        assert module.partition(".")[0] in EXTRAS.get(extra, ()), (name, module, extra)


def _literals(nodes: list[ast.expr]) -> list[str | None]:
    return [n.value if isinstance(n, ast.Constant) else None for n in nodes]


def _call_name(call: ast.Call) -> str:
    """``require`` of ``require(...)`` or ``extras.require(...)`` (not of ``x.require(...)``),
    ``import_module`` of ``importlib.import_module(...)``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return ""
    if func.attr in ("require", "check_extras") and func.value.id != "extras":
        return ""
    return func.attr


def scan(source: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Problems of one module's source, and the ``(module, extra)`` pairs it requires."""
    problems: list[str] = []
    used: list[tuple[str, str]] = []
    for node, in_function in _walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            names = []
        for name in names:
            if name.partition(".")[0] in DOMAIN:
                problems.append(f"line {node.lineno}: imports {name} (use extras.require)")
        if not isinstance(node, ast.Call):
            continue
        kind = _call_name(node)
        pairs: list[tuple[str | None, ...]] = []
        if kind == "require":
            pairs = [tuple(_literals(node.args)[:2])]
        elif kind == "check_extras":
            pairs = [
                tuple(_literals(e.elts)) if isinstance(e, ast.Tuple) else (None,)
                for e in node.args[1:]
                if not _recipe_extras(e)  # checked by test_recipe_extras_are_known
            ]
        elif kind in ("import_module", "__import__", "find_spec"):
            first = _literals(node.args)[:1]
            if first and first[0] and first[0].partition(".")[0] in DOMAIN:
                problems.append(f"line {node.lineno}: {kind}({first[0]!r}) (use extras.require)")
        for pair in pairs:
            if len(pair) != 2 or None in pair:
                problems.append(f"line {node.lineno}: {kind} needs literal (module, extra)")
                continue
            module, extra = str(pair[0]), str(pair[1])
            if module.partition(".")[0] not in EXTRAS.get(extra, ()):
                problems.append(f"line {node.lineno}: {module} is not in the [{extra}] extra")
            if not in_function:
                problems.append(f"line {node.lineno}: {kind} at module level (core must import)")
            used.append((module, extra))
    return problems, used


def _sources() -> dict[str, str]:
    return {
        str(path.relative_to(PACKAGE)): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_the_scan_finds_what_it_must_refuse() -> None:
    bad = (
        "from PIL import Image\n"  # module level
        "def f():\n"
        "    import pylibjpeg.utils\n"
        "    require('pydicom', 'images', 'x')\n"  # wrong extra
        "    check_extras('x', ('tokenizers', 'text'), name)\n"  # not a literal pair
        "require('matplotlib', 'plot', 'x')\n"  # module level
        "if TYPE_CHECKING:\n"
        "    from lightkube.config.kubeconfig import SingleConfig\n"  # fine: not run
    )
    problems, used = scan(bad)
    assert [p.split(":", 1)[0] for p in problems] == [
        "line 1",
        "line 3",
        "line 4",
        "line 5",
        "line 6",
    ], problems
    assert used == [("pydicom", "images"), ("tokenizers", "text"), ("matplotlib", "plot")]


def test_domain_libraries_are_imported_only_through_require_inside_functions() -> None:
    found = {}
    used: set[tuple[str, str]] = set()
    for rel, source in _sources().items():
        problems, pairs = scan(source)
        used.update(pairs)
        if problems:
            found[rel] = problems
    assert not found, found
    extras_used = {extra for _, extra in used}
    assert extras_used == set(EXTRAS), "an extra no code requires, or EXTRAS lacks one"
    assert ("pydicom", "dicom") in used and ("PIL.Image", "images") in used


# --------------------------------------------------------------------------- the message


def test_require_returns_the_module() -> None:
    import PIL.Image

    assert require("PIL.Image", "images", "x") is PIL.Image


def test_a_missing_library_is_one_line_naming_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pydicom", None)  # simulated: pydicom not installed
    with pytest.raises(GpusparkError) as info:
        require("pydicom", "dicom", "prep dicom")
    assert str(info.value) == MISSING_DICOM
    assert info.value.remedy == "pip install 'gpuspark[dicom]'"
    monkeypatch.setitem(sys.modules, "lightkube", None)  # simulated: lightkube not installed
    for name in [m for m in sys.modules if m.startswith("lightkube.")]:  # loaded by other tests
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(GpusparkError, match=r"\[kubernetes\] extra: lightkube is not"):
        require("lightkube.core.exceptions", "kubernetes", "x")


def test_check_extras_names_every_missing_extra_without_importing(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # simulated: not installed
    monkeypatch.setitem(sys.modules, "pydicom", None)  # simulated: not installed
    with pytest.raises(GpusparkError) as info:
        check_extras(
            "the demo", ("pydicom", "dicom"), ("pylibjpeg", "dicom"), ("matplotlib", "plot")
        )
    assert str(info.value) == (
        "the demo needs the [dicom] and [plot] extras: pydicom, matplotlib are not installed "
        "(pip install 'gpuspark[dicom,plot]')"
    )
    monkeypatch.setitem(sys.modules, "PIL", None)  # simulated: not installed
    with pytest.raises(GpusparkError, match=r": Pillow is not installed \(pip install 'gpuspark"):
        check_extras("prep images", ("PIL", "images"))  # the project's name, not its module's
    monkeypatch.delitem(sys.modules, "tokenizers", raising=False)
    check_extras("prep text", ("tokenizers", "text"))  # installed here: no error
    assert "tokenizers" not in sys.modules  # found, not imported


def test_a_broken_library_is_not_called_missing(monkeypatch) -> None:
    """An import error inside an installed library (its own dependency missing) is raised as
    it is: it is not the extra that is missing."""

    class BrokenFinder:  # simulated: an installed pydicom whose import fails on a dependency
        def find_spec(self, name, path=None, target=None):
            if name != "pydicom":
                return None
            raise ModuleNotFoundError("No module named 'numpy_missing'", name="numpy_missing")

    monkeypatch.delitem(sys.modules, "pydicom", raising=False)
    monkeypatch.setattr(sys, "meta_path", [BrokenFinder(), *sys.meta_path])
    with pytest.raises(ModuleNotFoundError, match="numpy_missing"):
        require("pydicom", "dicom", "prep dicom")


def test_require_refuses_a_module_of_another_extra() -> None:
    with pytest.raises(ValueError, match=r"not a module of the \[text\] extra"):
        require("pydicom", "text", "x")


def test_the_cli_prints_the_line_without_a_traceback(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setitem(sys.modules, "pydicom", None)  # simulated: pydicom not installed
    (tmp_path / "in").mkdir()
    rc = main(["prep", "dicom", str(tmp_path / "in"), str(tmp_path / "out")])
    out = capsys.readouterr()
    assert rc == 1
    assert out.err == f"error: {MISSING_DICOM}\n"
    assert not (tmp_path / "out").exists()
    rc = main(["prep", "dicom", str(tmp_path / "in"), str(tmp_path / "out"), "--json"])
    assert rc == 1
    assert '"remedy": "pip install \'gpuspark[dicom]\'"' in capsys.readouterr().out


# --------------------------------------------------------------------------- pyproject.toml


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~;, ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_core_dependencies_hold_no_domain_library() -> None:
    core = _names(PYPROJECT["project"]["dependencies"])
    assert not core & LEAN_OUT, core & LEAN_OUT
    assert {"crc32c", "google-crc32c"} & core == {"crc32c"}  # one CRC-32C library


def test_each_extra_installs_the_modules_it_names() -> None:
    optional = PYPROJECT["project"]["optional-dependencies"]
    providers_of = importlib.metadata.packages_distributions()
    for extra, modules in EXTRAS.items():
        listed = _names(optional[extra])
        brought = set(listed)
        for dist in listed:
            brought |= _names(importlib.metadata.requires(dist) or [])
        for module in modules:
            providers = {d.lower() for d in providers_of[module]}
            assert providers & brought, f"[{extra}] lists nothing that installs {module}"


def test_all_is_every_extra() -> None:
    optional = PYPROJECT["project"]["optional-dependencies"]
    (line,) = optional["all"]
    match = re.fullmatch(r"gpuspark\[(.*)\]", line)
    assert match is not None, line
    named = set(match.group(1).split(","))
    assert named == set(optional) - {"all", "dev"}
    assert set(EXTRAS) <= named


def test_package_data_holds_every_file_the_package_reads() -> None:
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["gpuspark"]
    files = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert "doctor/catalogue.toml" in files and "monitor/runbook.md" in files
    unshipped = [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)]
    assert not unshipped, f"not in [tool.setuptools.package-data]: {unshipped}"
