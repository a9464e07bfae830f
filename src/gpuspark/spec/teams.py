"""Looking up a team of the spec by name (the one rule monitoring labels, quotas and
``--team`` options share) and where a team's datasets live."""

from __future__ import annotations

from gpuspark.errors import SpecError, did_you_mean
from gpuspark.spec.models import ClusterSpec, Team

__all__ = ["TEAMS_DIR", "find_team", "team_root"]

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
