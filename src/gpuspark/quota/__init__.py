"""Team GPU quotas: rendered for YARN (Capacity Scheduler), Kubernetes (Kueue, Volcano) and
Spark standalone (per-application caps); a job submitted under a team; usage vs quota and why
an application waits, from the schedulers' own APIs."""

from __future__ import annotations

__all__: list[str] = []
