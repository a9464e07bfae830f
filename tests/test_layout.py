"""The package layout keeps its promises (docs/architecture.md, "Module map" and "Layers"):
small modules, no private name used across modules, no import cycles at module level, heavy
imports kept out of the CLI's start-up. These read the source; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "gpuspark"
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _package_of(module: str) -> str:
    path = MODULES[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(module).split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _may_use_private_module(importer: str, target: str) -> bool:
    """``pkg._internal.x`` is private to ``pkg``: its own modules may import it."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if _is_private(part):
            owner = ".".join(parts[:i])
            return importer == owner or importer.startswith(owner + ".")
    return True


def test_no_module_over_the_size_limit() -> None:
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_crosses_modules(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text())
    imported_modules: dict[str, str] = {}
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if not target.startswith("gpuspark"):
                continue
            if not _may_use_private_module(module, target):
                problems.append(f"imports private module {target}")
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if full in MODULES:
                    imported_modules[alias.asname or alias.name] = full
                    if not _may_use_private_module(module, full):
                        problems.append(f"imports private module {full}")
                elif _is_private(alias.name) and target != module:
                    problems.append(f"imports {alias.name} from {target}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gpuspark") and alias.asname:
                    imported_modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in imported_modules
            and _is_private(node.attr)
        ):
            problems.append(f"uses {imported_modules[node.value.id]}.{node.attr}")
    assert not problems, f"{module}: {problems}"


def _module_level_imports(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    out = set()
    for node in tree.body:  # module level only: imports inside functions are lazy by design
        if isinstance(node, ast.If):  # `if TYPE_CHECKING:` blocks do not run
            continue
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                full = f"{target}.{alias.name}"
                out.add(full if full in MODULES else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in MODULES and m != module}


def test_no_import_cycles_at_module_level() -> None:
    graph = {m: _module_level_imports(m) for m in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


HEAVY = ("torch", "pyspark", "monai", "pydicom", "pandas", "pyarrow", "matplotlib", "lightkube")


@pytest.mark.parametrize("module", [m for m in sorted(MODULES) if m.startswith("gpuspark.cli")])
def test_cli_modules_import_nothing_heavy_at_start(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text())
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        heavy = [n for n in names if n.split(".")[0] in HEAVY]
        assert not heavy, f"{module} imports {heavy} at start-up"


# A function-level import of a gpuspark module is an exception, listed here with its reason:
# (importer, imported, reason), fnmatch patterns on dotted module names. Everything else is
# imported at module level, where the import graph (and import-linter) sees it.
LAZY_IMPORTS: list[tuple[str, str, str]] = [
    (
        "gpuspark.demo.pipeline",
        "gpuspark.infer",
        "heavy: batch prediction imports torch; the demo checks its options first",
    ),
    (
        "gpuspark.demo.pipeline",
        "gpuspark.data.load",
        "heavy: the loaders import numpy and torch; the demo reads the test split's ids at the end",
    ),
    (
        "gpuspark.cli*",
        "gpuspark*",
        "the CLI imports the library in the command that runs, so "
        "`gpuspark --help` starts in a fraction of a second",
    ),
    (
        "gpuspark.cluster.session",
        "gpuspark.cluster.local",
        "cycle: the embedded cluster (local.py) builds its sessions through session.py",
    ),
    (
        "gpuspark.cluster.jvm",
        "gpuspark.cluster.executor_archive",
        "cycle: the executor archive's temporary cluster starts its sessions with jvm.py's "
        "options; only the archive build's child process runs it",
    ),
    (
        "gpuspark.data",
        "gpuspark.data.frame",
        "a lazy attribute: `gpuspark.data.from_dataframe` without loading the table format",
    ),
    (
        "gpuspark.data.format.example",
        "gpuspark.data.format._example_pb",
        "heavy: the generated protobuf module imports google.protobuf",
    ),
    (
        "gpuspark.data.load.dataset",
        "gpuspark.data.load.loader",
        "cycle: the loader module imports the dataset's types",
    ),
    (
        "gpuspark.data.load.table",
        "gpuspark.data.load.table_loader",
        "cycle: the table loader imports the table dataset's types",
    ),
    (
        "gpuspark.data.prep.*",
        "gpuspark.data.write",
        "heavy: the writers import numpy; a prep job checks its arguments without it",
    ),
    (
        "gpuspark.data.prep.images",
        "gpuspark.data.format",
        "heavy: the format package imports numpy; the same as for the writers",
    ),
    (
        "gpuspark.demo.pipeline",
        "gpuspark.data.prep",
        "heavy: the prep jobs import numpy; the demo checks its options first",
    ),
    (
        "gpuspark.demo.pipeline",
        "gpuspark.train",
        "heavy: training imports numpy and torch; the demo checks its options first",
    ),
    (
        "gpuspark.demo.synth_risk",
        "gpuspark.cluster.session",
        "the tests replace job_session where the Spark job would start",
    ),
    (
        "gpuspark.doctor.task",
        "gpuspark",
        "runs inside a Spark task: importing gpuspark there is what the check tests",
    ),
    (
        "gpuspark.launch._internal.*",
        "gpuspark.launch._internal*",
        "runs in the task's forked or spawned process, after the fork",
    ),
    (
        "gpuspark.monitor.rank_settings",
        "gpuspark.spec",
        "heavy: the spec's models (pydantic) load only where a rank reads a spec; an elastic "
        "agent on an executor imports this module for the endpoint files alone",
    ),
    (
        "gpuspark.plan.*",
        "gpuspark.train.recipes",
        "heavy: the recipes import numpy (their models torch); the planner's formulas do not",
    ),
    ("gpuspark.spec.rules", "gpuspark.spec.models", "cycle: the models call their rules"),
    ("gpuspark.spec.rules", "gpuspark.spec.teams", "cycle: teams imports the models"),
    (
        "gpuspark.train.checkpoint",
        "gpuspark.train",
        "cycle: ddp imports checkpoint (hook state); load dispatches to ddp",
    ),
    ("gpuspark.train.ddp", "gpuspark.train", "cycle: fsdp imports ddp; prepare dispatches to fsdp"),
    (
        "gpuspark.train.recipes.config",
        "gpuspark.train.fsdp",
        "start-up: `gpuspark` makes train's flags from this module; fsdp imports ddp and urllib",
    ),
    (
        "gpuspark.train.recipes.bert",
        "gpuspark.train.recipes.bert_model",
        "heavy: the model module imports torch at module level",
    ),
    (
        "gpuspark.train.recipes.tabular",
        "gpuspark.train.recipes.tabular_model",
        "heavy: the model module imports torch at module level",
    ),
    (
        "gpuspark.train.recipes.resnet[23]d",
        "gpuspark.train.recipes.resnet_model",
        "heavy: the model module imports torch at module level",
    ),
]


def _function_level_imports() -> list[tuple[str, str]]:
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    target = _resolve(module, node)
                    if target.startswith("gpuspark"):
                        found.append((module, target))
                elif isinstance(node, ast.Import):
                    found += [(module, a.name) for a in node.names if a.name.startswith("gpuspark")]
    return found


def _lazy_rule(importer: str, imported: str) -> tuple[str, str, str] | None:
    from fnmatch import fnmatchcase

    for rule in LAZY_IMPORTS:
        if fnmatchcase(importer, rule[0]) and fnmatchcase(imported, rule[1]):
            return rule
    return None


def test_function_level_imports_are_listed_with_their_reason() -> None:
    found = _function_level_imports()
    unlisted = sorted({f"{a} -> {b}" for a, b in found if _lazy_rule(a, b) is None})
    assert not unlisted, "import at module level, or list with a reason: " + ", ".join(unlisted)
    used = {_lazy_rule(a, b) for a, b in found}
    stale = [f"{r[0]} -> {r[1]}" for r in LAZY_IMPORTS if r not in used]
    assert not stale, f"listed but no longer lazy: {stale}"
