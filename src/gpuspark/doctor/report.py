"""The result of ``gpuspark doctor``: one :class:`Check` per question, gathered in a
:class:`Report` whose exit code is 1 when any check failed."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Check", "Report", "Status", "failure", "info", "ok", "skipped", "warning"]


class Status(str, enum.Enum):
    """How a check came out."""

    OK = "ok"
    WARNING = "warning"
    FAILURE = "failure"
    """Jobs will fail: ``gpuspark doctor`` exits 1."""
    SKIPPED = "skipped"
    """The check could not run here (a tool is missing, nothing to check)."""
    INFO = "info"
    """A fact worth knowing, neither good nor bad (e.g. no GPU on this node)."""


@dataclass(frozen=True)
class Check:
    """One check: its name, how it came out, one line of evidence and the fix."""

    name: str
    status: Status
    evidence: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        """Plain data for ``--json``."""
        return {
            "name": self.name,
            "status": self.status.value,
            "evidence": self.evidence,
            "fix": self.fix,
        }


def ok(name: str, evidence: str) -> Check:
    """A passing check."""
    return Check(name, Status.OK, evidence)


def warning(name: str, evidence: str, fix: str) -> Check:
    """A check that found something to change, though jobs will run."""
    return Check(name, Status.WARNING, evidence, fix)


def failure(name: str, evidence: str, fix: str) -> Check:
    """A check that found what will make jobs fail."""
    return Check(name, Status.FAILURE, evidence, fix)


def skipped(name: str, evidence: str, fix: str = "") -> Check:
    """A check that could not run here; ``fix`` says what would let it run."""
    return Check(name, Status.SKIPPED, evidence, fix)


def info(name: str, evidence: str) -> Check:
    """A fact, neither good nor bad."""
    return Check(name, Status.INFO, evidence)


@dataclass
class Report:
    """Every check of one ``gpuspark doctor`` run, in the order they ran."""

    checks: list[Check] = field(default_factory=list)

    def add(self, checks: Check | Iterable[Check]) -> None:
        """Append one check or several."""
        if isinstance(checks, Check):
            self.checks.append(checks)
        else:
            self.checks.extend(checks)

    def count(self, status: Status) -> int:
        """How many checks came out as ``status``."""
        return sum(c.status is status for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        """The failed checks."""
        return [c for c in self.checks if c.status is Status.FAILURE]

    @property
    def exit_code(self) -> int:
        """1 when any check failed, else 0."""
        return 1 if self.failures else 0

    def summary(self) -> str:
        """One line: how many checks came out each way."""
        parts = [f"{self.count(s)} {s.value}" for s in Status if self.count(s)]
        verdict = "problems found" if self.exit_code else "no failures"
        return f"{len(self.checks)} checks: {', '.join(parts) or 'none'} ({verdict})"

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {
            "checks": [c.as_dict() for c in self.checks],
            "summary": self.summary(),
            "exit_code": self.exit_code,
        }
