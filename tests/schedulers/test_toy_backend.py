"""A new scheduler is one module: a toy backend registered from this test module is used by
the session plan, the quota renderers, ``quota status`` and ``quota why`` (library and CLI),
and by the team conf, with no other file changed.

The toy stands for a scheduler that cannot run here (a Slurm-like ``toy://`` master): its API
client returns fixed figures, labelled as such.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gpuspark import schedulers
from gpuspark.cli.main import main
from gpuspark.schedulers import Backend, Reason, Target, TeamUsage
from gpuspark.spec import ClusterSpec, default_spec


class ToyBackend(Backend):
    """``toy://controller``: a queue per team, a fixed (fake) API."""

    name = "toy"
    example = "toy://controller"
    renderers = ("toy-queues",)

    def matches(self, master: str) -> bool:
        return master.startswith("toy://")

    def check_session(self, master: str, conf: dict[str, str]) -> None:
        conf.setdefault("spark.toy.controller", master.removeprefix("toy://"))

    def team_conf(
        self, spec: ClusterSpec, team: str, *, shape: tuple[int, int] | None = None
    ) -> dict[str, str]:
        return {"spark.toy.queue": f"q-{team}"}

    def render(self, spec: ClusterSpec, renderer: str, **opts: Any) -> dict[str, str]:
        lines = [f"{t.name} max={t.max_gpus}\n" for t in spec.teams]
        return {"toy-queues.txt": "".join(lines)}

    def notes(self, spec: ClusterSpec, renderer: str, **opts: Any) -> list[str]:
        return ["load toy-queues.txt into the toy controller"]

    def target(
        self, spec: ClusterSpec, master: str, url: str | None = None, embedded: Any = None
    ) -> Target:
        return Target(self.name, url or "http://" + master.removeprefix("toy://"))

    def usage(self, spec: ClusterSpec, target: Target) -> list[TeamUsage]:  # fake figures
        return [TeamUsage(t.name, t.guaranteed_gpus, t.max_gpus, gpus_in_use=1) for t in spec.teams]

    def why(
        self, spec: ClusterSpec, target: Target, app: str, *, namespace: str = "default"
    ) -> Reason:
        return Reason(app, "PENDING", "quota", f"{app} waits in {target.url}", "wait")


def _spec() -> ClusterSpec:
    data = default_spec().model_dump()
    data["teams"] = [{"name": "vision", "guaranteed_gpus": 1, "max_gpus": 2}]
    return ClusterSpec.model_validate(data)


@pytest.fixture
def toy() -> Iterator[ToyBackend]:
    backend = schedulers.register(ToyBackend())
    yield backend
    schedulers.unregister(backend)


def test_the_toy_master_is_unknown_until_registered() -> None:
    from gpuspark.errors import ClusterError

    assert schedulers.find_backend("toy://ctl") is None
    with pytest.raises(ClusterError, match="is not a Spark master URL"):
        schedulers.backend_for("toy://ctl")


def test_session_plan_and_team_conf_use_it(toy: ToyBackend) -> None:
    from gpuspark.cluster.session import session_plan
    from gpuspark.quota.team import team_conf

    plan = session_plan("toy://ctl", _spec(), kind="training")
    assert plan.master == "toy://ctl"
    assert plan.conf["spark.toy.controller"] == "ctl"
    assert plan.conf["spark.dynamicAllocation.enabled"] == "false"  # the job kind still applies
    assert "--master toy://ctl" in plan.materialize()
    conf = team_conf(_spec(), "vision", "toy://ctl")
    assert conf == {"spark.gpuspark.team": "vision", "spark.toy.queue": "q-vision"}


def test_render_uses_it(toy: ToyBackend) -> None:
    from gpuspark.quota.render import quota_notes, render_quota

    assert "toy-queues" in schedulers.renderers()
    assert render_quota(_spec(), "toy-queues") == {"toy-queues.txt": "vision max=2\n"}
    assert quota_notes(_spec(), "toy-queues") == ["load toy-queues.txt into the toy controller"]


def test_quota_status_and_why_use_it(
    toy: ToyBackend, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuspark.quota import explain, quota_status

    where, rows = quota_status(_spec(), master="toy://ctl")
    assert where == Target("toy", "http://ctl")
    assert [(r.team, r.gpus_in_use) for r in rows] == [("vision", 1)]
    reason = explain(_spec(), "app-7", master="toy://ctl", url="http://ctl:9")
    assert reason.message == "app-7 waits in http://ctl:9" and reason.waiting
    spec_file = tmp_path / "c.toml"
    from gpuspark.spec import example_spec

    spec_file.write_text(example_spec())
    args = ["quota", "status", "--spec", str(spec_file), "--master", "toy://ctl", "--json"]
    assert main(args) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "toy" in json.dumps(shown) and "http://ctl" in json.dumps(shown)
    args = ["quota", "why", "app-9", "--spec", str(spec_file), "--master", "toy://ctl", "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["cause"] == "quota"
