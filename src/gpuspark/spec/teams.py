"""Teams of the spec: looking one up by name (the one rule monitoring labels, quotas and
``--team`` options share), which team a job runs under (:func:`resolve_team`: the name given,
checked, else the team listing the current user in its ``members``), a job's GPUs against the
team's ``max_gpus``, and where a team's datasets live."""

from __future__ import annotations

import getpass
import math

from gpuspark.errors import LaunchError, SpecError, did_you_mean
from gpuspark.spec.models import ClusterSpec, Team

__all__ = [
    "TEAMS_DIR",
    "check_team_gpus",
    "current_user",
    "find_team",
    "resolve_team",
    "team_root",
]

TEAMS_DIR = "teams"
"""Folder of ``[storage] root`` that holds the teams' default roots."""


def find_team(spec: ClusterSpec, team: str | Team) -> Team:
    """The spec's team called ``team`` (a name or a :class:`Team`); a one-line
    :class:`~gpuspark.errors.SpecError` with a did-you-mean otherwise."""
    name = team if isinstance(team, str) else team.name
    for candidate in spec.teams:
        if candidate.name == name:
            return candidate
    names = [t.name for t in spec.teams]
    if not names:
        raise SpecError(
            f"team {name!r}: the cluster spec '{spec.name}' defines no [[teams]]",
            remedy="add a [[teams]] entry (name, guaranteed_gpus, max_gpus), or leave --team out",
        )
    raise SpecError(
        f"team {name!r} is not in the spec's [[teams]] ({', '.join(names)})"
        + did_you_mean(name, names),
        remedy="use one of the spec's team names",
    )


def team_root(spec: ClusterSpec, team: str | Team) -> str:
    """Where ``team``'s datasets live: its ``root``, else ``<storage.root>/teams/<name>``."""
    found = find_team(spec, team) if isinstance(team, str) else team
    if found.root is not None:
        return found.root
    return f"{spec.storage.root.rstrip('/')}/{TEAMS_DIR}/{found.name}"


def current_user() -> str:
    """The user a job runs as (``getpass.getuser()``; ``$USER`` style)."""
    return getpass.getuser()


def resolve_team(
    spec: ClusterSpec, team: str | None = None, *, user: str | None = None
) -> Team | None:
    """The team a job runs under: ``team`` (checked), else the team listing ``user``
    (default: the current user) in its ``members``, else ``None``.

    Refuses (one line) an unknown team, a user who is not in the named team's non-empty
    ``members``, and, without ``team``, a user listed by several teams (naming them).
    """
    who = user or current_user()
    if team:
        found = find_team(spec, team)
        if found.members and who not in found.members:
            raise LaunchError(
                f"user {who!r} is not a member of team {found.name!r} "
                f"(members: {', '.join(found.members)})",
                remedy=f"submit under your own team, or ask to be added to {found.name!r}",
            )
        return found
    mine = [t for t in spec.teams if who in t.members]
    if len(mine) > 1:
        names = ", ".join(t.name for t in mine)
        raise LaunchError(
            f"user {who!r} is a member of several teams ({names}); which one is this job's?",
            remedy=f"pass --team (one of {names})",
        )
    return mine[0] if mine else None


def check_team_gpus(spec: ClusterSpec, team: str | None, gpus: float) -> None:
    """Refuse, with the numbers, a job asking more GPUs than ``team``'s ``max_gpus``."""
    if not team:
        return
    found = find_team(spec, team)
    if gpus > found.max_gpus:
        raise LaunchError(
            f"the job asks {math.ceil(gpus)} GPUs but team {team!r} may hold at most "
            f"{found.max_gpus} (guaranteed {found.guaranteed_gpus})",
            remedy=f"ask for at most {found.max_gpus} GPUs (fewer processes or GPUs each), "
            "or raise the team's max_gpus in the spec",
        )
