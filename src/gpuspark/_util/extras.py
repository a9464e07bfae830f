"""The extras of ``pip install 'gpuspark[...]'``, and the one way to import their libraries.

The core (``pip install gpuspark``) is what every job needs: the spec, the cluster, the
launcher, the training loop, the shard format and loader, the metrics exporter. The libraries
of one domain come with an extra (``[project.optional-dependencies]`` in ``pyproject.toml``).
Their modules are imported only through :func:`require`, inside the functions that use them,
so every core module imports without them; a job whose tasks or ranks would import one checks
it on the driver first with :func:`check_extras`. A missing extra is one line, e.g.
``prep dicom needs the [dicom] extra: pydicom is not installed (pip install 'gpuspark[dicom]')``.
``tests/test_extras.py`` holds the source to these rules.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType

from gpuspark.errors import GpusparkError

__all__ = ["EXTRAS", "check_extras", "missing_extra", "require"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "dicom": ("pydicom", "pylibjpeg"),
    "images": ("PIL", "simplejpeg"),
    "text": ("tokenizers",),
    "plot": ("matplotlib",),
    "kubernetes": ("lightkube", "httpx2", "msgspec"),
    "mlflow": ("mlflow", "sqlalchemy", "alembic"),
    "s3": ("s3fs",),
}
"""The top-level modules that each extra installs. ``httpx2`` and ``msgspec`` come with
lightkube, whose objects they build."""
_PROJECT = {"PIL": "Pillow"}
"""The project that installs a module, where its name differs (for messages)."""


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` (a dotted name is fine) of the extra ``extra`` and return it.

    When its library is not installed, raise a one-line
    :class:`~gpuspark.errors.GpusparkError`: ``purpose`` (what the user asked for, e.g.
    ``"prep dicom"``) needs the extra, and the ``pip install`` line that adds it. An import
    that fails on something else (a broken install of the library) is raised as it is.
    """
    _check_known(module, extra)
    loaded = sys.modules.get(module)
    if loaded is not None:
        return loaded
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or _top(exc.name) != _top(module):
            raise
        raise missing_extra(purpose, {extra: [_project(module)]}) from exc


def check_extras(purpose: str, *needs: tuple[str, str]) -> None:
    """Refuse ``purpose`` up front, in one line naming every missing extra, when a module of
    ``needs`` (``(module, extra)`` pairs) is not installed. Nothing is imported: a job checks
    on the driver, before a cluster starts, what its tasks or ranks will :func:`require`."""
    missing: dict[str, list[str]] = {}
    for module, extra in needs:
        _check_known(module, extra)
        if not _installed(_top(module)):
            missing.setdefault(extra, []).append(_project(module))
    if missing:
        raise missing_extra(purpose, missing)


def missing_extra(purpose: str, missing: Mapping[str, Sequence[str]]) -> GpusparkError:
    """The error of ``purpose`` lacking the extras of ``missing`` (extra -> what of it is not
    installed)."""
    extras = sorted(missing)
    modules = [m for e in extras for m in missing[e]]
    named = " and ".join(f"[{e}]" for e in extras)
    return GpusparkError(
        f"{purpose} needs the {named} extra{'s' if len(extras) > 1 else ''}: "
        f"{', '.join(modules)} {'is' if len(modules) == 1 else 'are'} not installed",
        remedy=f"pip install 'gpuspark[{','.join(extras)}]'",
    )


def _check_known(module: str, extra: str) -> None:
    """A call naming a module of another extra (or of none) is a bug of gpuspark's."""
    if _top(module) not in EXTRAS.get(extra, ()):
        raise ValueError(f"{module} is not a module of the [{extra}] extra: see EXTRAS")


def _installed(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is not None  # None too when hidden in sys.modules
    except ValueError:  # loaded without a spec (made by hand): it is there
        return True


def _top(module: str) -> str:
    return module.partition(".")[0]


def _project(module: str) -> str:
    return _PROJECT.get(_top(module), _top(module))
