"""Teams apart on disk: a team's job never writes into another team's dataset root, and the
directories it creates belong to the team's Unix group.

- **Where a team's data lives**: its ``[[teams]] root``, else ``<storage.root>/teams/<name>``
  (:func:`gpuspark.spec.team_root`).
- **Writes** (:func:`check_writes`): a job submitted under a team may write its own root and
  anywhere outside every team's root, never inside another team's. Local paths are compared
  after :meth:`pathlib.Path.resolve` (``..`` and symbolic links cannot escape), URLs by their
  normalised form (:func:`gpuspark.storage.location`). Checked before a session or a cluster
  starts. A job under no team, or a spec without teams, is not checked.
- **Directories** (:func:`team_output_dir`): for a team whose spec entry names a ``group``, the
  output directory and its missing parents inside the team's root are created owned by that
  group with mode ``2750`` (setgid: files and folders made inside inherit the group; the
  group reads and enters, others nothing). Without a group: a plain ``mkdir -p``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from gpuspark import storage
from gpuspark.errors import LaunchError, SpecError
from gpuspark.spec.teams import find_team, team_root

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec
    from gpuspark.spec.models import Team

__all__ = ["GROUP_DIR_MODE", "check_writes", "group_id", "remove_created", "team_output_dir"]

GROUP_DIR_MODE = 0o2750
"""Mode of a directory made for a team with a ``group``: setgid, rwx owner, r-x group."""

PathArg = str | os.PathLike[str]


def check_writes(
    spec: ClusterSpec, team: str | Team | None, paths: Iterable[PathArg | None]
) -> None:
    """Refuse, in one line, a job of ``team`` that would write any of ``paths`` (``None``
    entries are skipped) inside another team's root. No team, or no teams in the spec: no
    check."""
    if team is None or not spec.teams:
        return
    own = find_team(spec, team)
    others = [(other, team_root(spec, other)) for other in spec.teams if other.name != own.name]
    for path in paths:
        if path is None:
            continue
        for other, root in others:
            if storage.is_within(path, root, resolve=True):
                raise LaunchError(
                    f"team {own.name} may not write {_shown(path)}: it is in team"
                    f" {other.name}'s root ({storage.location(root, resolve=True)})",
                    remedy=f"write under team {own.name}'s root ({team_root(spec, own)}) or"
                    " outside every team's root",
                )


def _shown(path: PathArg) -> str:
    """``path`` as given, plus where it really is when that differs (``..``, links, ``~``)."""
    given = os.fspath(path)
    real = storage.location(given, resolve=True)
    return given if real in (given, given.rstrip("/")) else f"{given} (that is {real})"


def group_id(team: Team) -> int:
    """The id of ``team``'s ``group`` on this machine; a one-line :class:`SpecError` naming the
    group when it does not exist here."""
    import grp

    if team.group is None:
        raise SpecError(f"team {team.name} names no group in the spec")
    try:
        return grp.getgrnam(team.group).gr_gid
    except KeyError:
        raise SpecError(
            f"team {team.name}'s group {team.group!r} does not exist on this machine",
            remedy=f"create it (groupadd {team.group}) or change the team's group in the spec",
        ) from None


def team_output_dir(spec: ClusterSpec, team: str | Team | None, path: PathArg) -> list[str]:
    """Create the output directory ``path`` of a job of ``team`` (its missing parents too) and
    return the directories made, outermost first. With a ``group`` in the team's spec entry,
    the directory and the parents made inside the team's root get that group and mode
    :data:`GROUP_DIR_MODE`; otherwise (or without a team) they are plain directories. URLs:
    nothing is made (the store's own permissions apply)."""
    if storage.is_url(path):
        return []
    target = Path(storage.location(path))
    found = find_team(spec, team) if team is not None else None
    if found is None or found.group is None:
        missing = _missing(target)
        target.mkdir(parents=True, exist_ok=True)
        return [str(d) for d in missing]
    gid = group_id(found)  # before anything is made
    root = Path(storage.location(team_root(spec, found), resolve=True))
    created: list[str] = []
    try:
        for folder in _missing(target):
            grouped = folder == target or folder.resolve().is_relative_to(root)
            if _make(folder, 0o700 if grouped else 0o777):
                created.append(str(folder))
                if grouped:
                    _give(folder, gid, found)
    except BaseException:
        remove_created(created)
        raise
    return created


def _missing(target: Path) -> list[Path]:
    """``target`` and its parents that do not exist yet, outermost first."""
    missing = []
    folder = target
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


def _make(folder: Path, mode: int) -> bool:
    """``mkdir folder``; False when it appeared meanwhile (another job made it)."""
    try:
        os.mkdir(folder, mode)
    except FileExistsError:
        if folder.is_dir():
            return False
        raise LaunchError(f"cannot create {folder}: a file of that name exists") from None
    except OSError as exc:
        raise LaunchError(
            f"cannot create {folder}: {exc.strerror or exc}", remedy="check the path's permissions"
        ) from None
    return True


def _give(folder: Path, gid: int, team: Team) -> None:
    """Hand ``folder`` to group ``gid`` with mode 2750 (chown first: it may clear setgid)."""
    try:
        os.chown(folder, -1, gid)
        os.chmod(folder, GROUP_DIR_MODE)
    except OSError as exc:
        raise LaunchError(
            f"cannot give {folder} to team {team.name}'s group {team.group}: {exc.strerror or exc}",
            remedy=f"the user starting the job must be a member of group {team.group}",
        ) from None


def remove_created(folders: Iterable[str]) -> None:
    """Remove ``folders`` (as :func:`team_output_dir` returned them), innermost first, where
    they are still empty; others stay as they are."""
    for folder in reversed(list(folders)):
        try:
            os.rmdir(folder)
        except OSError:
            pass
