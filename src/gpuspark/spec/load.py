"""Reading a spec file: TOML -> models, every problem one line naming the file and field."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from gpuspark._util import envvars
from gpuspark.errors import SpecError, did_you_mean
from gpuspark.spec.example import default_spec_text
from gpuspark.spec.models import NAME_RULE, ClusterSpec, RuleViolations
from gpuspark.spec.values import show_value

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["load_spec", "parse_spec"]


def load_spec(path: str | os.PathLike[str]) -> ClusterSpec:
    """Read and validate a cluster spec file; raise :class:`SpecError` with one clear line."""
    path = Path(path)
    create = "create one with `gpuspark init cluster.toml`"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file", remedy=create) from None
    except IsADirectoryError:
        raise SpecError(
            f"{path} is a directory, not a spec file",
            remedy="pass the path of a TOML file, e.g. cluster.toml",
        ) from None
    except NotADirectoryError:
        raise SpecError(
            f"{path}: no such file (a parent of it is a file, not a directory)",
            remedy="check the path",
        ) from None
    except UnicodeDecodeError:
        raise SpecError(
            f"{path} is not a text file (not UTF-8): a spec is TOML text", remedy=create
        ) from None
    except OSError as exc:
        reason = exc.strerror or exc
        raise SpecError(f"{path}: cannot read: {reason}", remedy="check the path") from None
    if not text.strip():
        raise SpecError(f"{path} is empty", remedy=f"write a spec into it, or {create}")
    return parse_spec(text, source=str(path))


def parse_spec(text: str, source: str = "<string>") -> ClusterSpec:
    """Validate spec TOML ``text``; ``source`` names it in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(
            _toml_message(exc, text, source),
            remedy="fix the TOML there; `gpuspark init` writes a commented example",
        ) from None
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        problems = [p for err in _ordered(exc.errors()) for p in _describe(err)]
        raise SpecError(f"{source}: {_all(list(dict.fromkeys(problems)))}") from exc


def _all(problems: list[str]) -> str:
    """Every problem, on one line: a problem's own text may hold ``;``, so each is numbered."""
    if len(problems) == 1:
        return problems[0]
    listed = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
    return f"{len(problems)} problems: {listed}"


def _toml_message(exc: Exception, text: str, source: str) -> str:
    lineno = getattr(exc, "lineno", None)
    colno = getattr(exc, "colno", None)
    msg = getattr(exc, "msg", str(exc))
    if lineno is None:  # Python < 3.14 only has "... (at line L, column C)" in the text
        found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        if found:
            lineno, colno = int(found.group(1)), int(found.group(2))
            msg = str(exc)[: found.start()].strip()
        elif "(at end of document)" in str(exc):
            lineno = text.count("\n") + 1
            msg = str(exc).replace("(at end of document)", "").strip()
    where = source if lineno is None else f"{source}:{lineno}"
    where += f":{colno}" if lineno is not None and colno is not None else ""
    return f"{where}: invalid TOML: {msg}"


def _ordered(errors: list[Any]) -> list[Any]:
    """Unknown keys first; drop "missing" for a field an unknown key is a misspelling of."""
    import difflib

    unknown = [tuple(e["loc"]) for e in errors if e["type"] == "extra_forbidden"]
    meant: set[tuple[Any, ...]] = set()
    for loc in unknown:
        close = difflib.get_close_matches(str(loc[-1]), _fields_at(loc[:-1]), n=1, cutoff=0.6)
        meant.update((loc[:-1], name) for name in close)
    kept = [
        e
        for e in errors
        if not (e["type"] == "missing" and (tuple(e["loc"][:-1]), e["loc"][-1]) in meant)
    ]
    return sorted(kept, key=lambda e: e["type"] != "extra_forbidden")


def _describe(err: Any) -> list[str]:
    """One ``path=value problem`` line (or several for cross-field rules) per pydantic error."""
    loc = tuple(err["loc"])
    path = _path(loc)
    kind = err["type"]
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, RuleViolations):
        return cause.problems
    if kind == "extra_forbidden":
        return [_unknown_key(loc)]
    if kind == "missing":
        return [f"{path} is missing (required)"]
    if kind == "list_type" and isinstance(err["input"], dict):
        return [f"{path} must be an array of tables: write [[{path}]] above each entry"]
    msg = err["msg"].removeprefix("Value error, ")
    msg = re.sub(r"^Input should be\b", "must be", msg)
    msg = re.sub(
        r"^List should have at least (\d+) items?.*", r"must list at least \1 item(s)", msg
    )
    msg = re.sub(
        r"^String should match pattern .*",
        NAME_RULE,
        msg,
    )
    msg = msg[:1].lower() + msg[1:]
    return [f"{path}={show_value(err['input'])}: {msg}"]


def _unknown_key(loc: tuple[Any, ...]) -> str:
    allowed = _fields_at(loc[:-1])
    hint = did_you_mean(str(loc[-1]), allowed) if allowed else ""
    where = f"in [{_path(loc[:-1])}]" if loc[:-1] else "at the top level"
    if not hint and allowed:
        hint = f"; allowed: {', '.join(sorted(allowed))}"
    return f"{_path(loc)} is not a known key {where}{hint}"


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model found at ``loc`` (descending through lists)."""
    model: Any = ClusterSpec
    for part in loc:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        if info is None:
            return []
        model = _model_of(info.annotation)
        if model is None:
            return []
    return list(model.model_fields)


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "." in str(part) or " " in str(part):
            out += f'."{part}"' if out else f'"{part}"'
        else:
            out += f".{part}" if out else str(part)
    return out


SPEC_ENV = envvars.SPEC.name
"""Environment variable naming the spec file when no ``spec`` is passed."""


def default_spec() -> ClusterSpec:
    """The built-in spec: the embedded cluster (2 workers x 2 GPU slots, task amount 0.5)."""

    return parse_spec(default_spec_text(), source="<built-in spec>")


def resolve_spec(spec: ClusterSpec | str | os.PathLike[str] | None = None) -> ClusterSpec:
    """``spec`` itself, the file it names, the file ``$GPUSPARK_SPEC`` names, or the default."""
    if isinstance(spec, ClusterSpec):
        return spec
    path = spec if spec is not None else os.environ.get(SPEC_ENV) or None
    return load_spec(path) if path is not None else default_spec()
