"""Quota rendering for YARN, Kueue and Volcano, and the standalone team caps.

XML is parsed back; YAML is parsed and checked against schemas of the APIs' documented fields
(tests/quota/data/*.json, written from the Go types' json tags); capacities are checked with
exact decimal arithmetic, over the example and over random valid specs (hypothesis)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuspark.cli.main import main
from gpuspark.errors import SpecError
from gpuspark.quota.render import quota_notes, render_k8s, render_quota
from gpuspark.schedulers.shares import largest_remainder, percent_shares
from gpuspark.schedulers.standalone.caps import TeamCaps, team_caps
from gpuspark.spec import ClusterSpec, example_spec, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cluster.toml"
DATA = Path(__file__).parent / "data"
QUANTITY = re.compile(
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
)


# ----------------------------------------------------------------------------- helpers


def _spec_with(teams: list[dict[str, Any]], **nodes: Any) -> ClusterSpec:
    data = parse_spec(example_spec()).model_dump()
    data["teams"] = teams
    data["nodes"][0].update(nodes)
    return ClusterSpec.model_validate(data)


def _props(xml_text: str) -> dict[str, str]:
    root = ET.fromstring(xml_text.split("\n", 1)[1])  # well-formed, or this raises
    assert root.tag == "configuration"
    props = {p.findtext("name"): p.findtext("value") for p in root.iter("property")}
    assert all(k is not None and v is not None for k, v in props.items())
    return {str(k): str(v) for k, v in props.items()}


def _yarn_levels(props: dict[str, str]) -> dict[str, list[str]]:
    """Parent queue path -> its children, from every ``*.queues`` property."""
    out = {}
    for key, value in props.items():
        m = re.fullmatch(r"yarn\.scheduler\.capacity\.(root(?:\.[^.]+)*)\.queues", key)
        if m:
            out[m.group(1)] = value.split(",")
    return out


def _check_node(value: Any, node: dict[str, Any], where: str) -> None:
    kind = node["type"]
    if kind == "object":
        assert isinstance(value, dict), f"{where}: expected an object, got {value!r}"
        unknown = set(value) - set(node["fields"])
        assert not unknown, f"{where}: fields {sorted(unknown)} are not in the API"
        missing = set(node.get("required", [])) - set(value)
        assert not missing, f"{where}: required fields {sorted(missing)} missing"
        for key, item in value.items():
            _check_node(item, node["fields"][key], f"{where}.{key}")
    elif kind == "map":
        assert isinstance(value, dict), f"{where}: expected a map"
        for key, item in value.items():
            assert isinstance(key, str)
            _check_node(item, node["values"], f"{where}[{key}]")
    elif kind == "array":
        assert isinstance(value, list), f"{where}: expected a list"
        for i, item in enumerate(value):
            _check_node(item, node["items"], f"{where}[{i}]")
    elif kind == "quantity":
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and QUANTITY.match(value)
        )
        assert ok, f"{where}: {value!r} is not a Kubernetes quantity"
    else:
        types = {"string": str, "integer": int, "boolean": bool}[kind]
        assert isinstance(value, types), f"{where}: {value!r} is not a {kind}"
        if kind == "integer":
            assert not isinstance(value, bool)
        if "enum" in node:
            assert value in node["enum"], f"{where}: {value!r} not in {node['enum']}"


def _check_schema(docs: list[dict[str, Any]], schema_file: str) -> set[str]:
    schema = json.loads((DATA / schema_file).read_text())["kinds"]
    for doc in docs:
        assert doc["kind"] in schema, f"kind {doc['kind']} not in {schema_file}"
        _check_node(doc, schema[doc["kind"]], doc["kind"])
    return {doc["kind"] for doc in docs}


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


# ----------------------------------------------------------------------------- arithmetic


def test_largest_remainder_is_exact_and_close() -> None:
    assert largest_remainder([1, 1, 1], 100) == [34, 33, 33]
    assert largest_remainder([0, 0], 7) == [0, 0]
    assert percent_shares([1, 1, 1], 3) == [Decimal("33.34"), Decimal("33.33"), Decimal("33.33")]
    assert percent_shares([1], 8) == [Decimal("12.5")]


# ----------------------------------------------------------------------------- YARN


def test_yarn_example_capacities_match_the_spec() -> None:
    spec = load_spec(EXAMPLE)
    files = render_quota(spec, "yarn")
    props = _props(files["capacity-scheduler.xml"])
    assert _yarn_levels(props) == {"root": ["radiology", "vision", "research", "default"]}
    cap = {
        q: props[f"yarn.scheduler.capacity.root.{q}.capacity"] for q in _yarn_levels(props)["root"]
    }
    # 8, 4, 4 of 16 GPUs; default takes the remaining 0
    assert cap == {"radiology": "50", "vision": "25", "research": "25", "default": "0"}
    assert props["yarn.scheduler.capacity.root.vision.maximum-capacity"] == "75"
    assert props["yarn.scheduler.capacity.root.vision.user-limit-factor"] == "3"
    assert props["yarn.scheduler.capacity.root.radiology.acl_submit_applications"] == "alice,bob "
    assert props["yarn.scheduler.capacity.root.acl_submit_applications"] == " "
    assert props["yarn.scheduler.capacity.root.radiology.priority"] == "2"
    assert props["yarn.scheduler.capacity.resource-calculator"] == (
        "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
    )
    assert props["yarn.scheduler.capacity.queue-mappings"] == (
        "u:alice:radiology,u:bob:radiology,u:carol:vision,u:dan:vision,u:erin:research"
    )
    assert files["spark-yarn-vision.conf"].splitlines()[-1] == "spark.yarn.queue vision"


def test_yarn_resource_types_and_site_snippet() -> None:
    files = render_quota(load_spec(EXAMPLE), "yarn")
    assert _props(files["resource-types.xml"]) == {"yarn.resource-types": "yarn.io/gpu"}
    site = _props(files["yarn-site-gpu.xml"])
    assert site["yarn.nodemanager.resource-plugins"] == "yarn.io/gpu"
    assert site["yarn.nodemanager.resource-plugins.gpu.allowed-gpu-devices"] == "auto"
    assert site["yarn.acl.enable"] == "true"


def test_yarn_absolute_form_only_from_3_4() -> None:
    spec = load_spec(EXAMPLE)
    old = _props(render_quota(spec, "yarn", yarn_version="3.3.6")["capacity-scheduler.xml"])
    new = _props(render_quota(spec, "yarn", yarn_version="3.4.0")["capacity-scheduler.xml"])
    assert "[" not in old["yarn.scheduler.capacity.root.radiology.capacity"]
    # 8 of 16 GPUs: half of 2 x 128 cores and 2 x 2048 GB
    assert new["yarn.scheduler.capacity.root.radiology.capacity"] == (
        "[memory=2097152,vcores=128,yarn.io/gpu=8]"
    )
    gpus = [
        int(re.search(r"yarn\.io/gpu=(\d+)", new[f"yarn.scheduler.capacity.root.{q}.capacity"])[1])  # type: ignore[index]
        for q in ("radiology", "vision", "research", "default")
    ]
    assert sum(gpus) == spec.total_gpus
    note = " ".join(quota_notes(spec, "yarn", yarn_version="3.3.6"))
    assert "GPU-share percentages" in note and ">= 3.4" in note


@settings(max_examples=60, deadline=None)
@given(
    hosts=st.integers(1, 6),
    per_node=st.sampled_from([1, 2, 3, 4, 7, 8]),
    raw=st.lists(st.tuples(st.integers(0, 48), st.integers(0, 48), st.integers(0, 5)), max_size=7),
)
def test_yarn_capacities_sum_to_100_and_max_never_below_capacity(
    hosts: int, per_node: int, raw: list[tuple[int, int, int]]
) -> None:
    total = hosts * per_node
    teams, left = [], total
    for i, (g, extra, prio) in enumerate(raw):
        g = min(g % (total + 1), left)
        left -= g
        teams.append(
            {
                "name": f"t{i}",
                "guaranteed_gpus": g,
                "max_gpus": max(1, min(total, g + extra)),
                "priority": prio,
                "members": [f"u{i}"],
            }
        )
    spec = _spec_with(teams, hosts=[f"h{i}" for i in range(hosts)], gpus_per_node=per_node)
    props = _props(render_quota(spec, "yarn")["capacity-scheduler.xml"])
    for parent, children in _yarn_levels(props).items():
        caps = [Decimal(props[f"yarn.scheduler.capacity.{parent}.{c}.capacity"]) for c in children]
        maxes = [
            Decimal(props[f"yarn.scheduler.capacity.{parent}.{c}.maximum-capacity"])
            for c in children
        ]
        assert sum(caps) == 100
        assert all(m >= c for c, m in zip(caps, maxes, strict=True))
        assert all(0 <= c <= 100 and m <= 100 for c, m in zip(caps, maxes, strict=True))
    for team in spec.teams:
        cap = Decimal(props[f"yarn.scheduler.capacity.root.{team.name}.capacity"])
        exact = Decimal(team.guaranteed_gpus) * 100 / total
        assert abs(cap - exact) <= Decimal("0.01")


def test_yarn_refuses_a_team_called_default() -> None:
    spec = _spec_with([{"name": "default", "guaranteed_gpus": 1, "max_gpus": 2}])
    with pytest.raises(SpecError, match="team 'default' would be YARN's own 'default' queue"):
        render_quota(spec, "yarn")


# ----------------------------------------------------------------------------- Kueue


@pytest.mark.parametrize(("api", "cohort"), [("v1beta1", "cohort"), ("v1beta2", "cohortName")])
def test_kueue_objects_follow_the_api_schema(api: str, cohort: str) -> None:
    spec = load_spec(EXAMPLE)
    files = render_quota(spec, "kueue", api=api, namespace_prefix="team-")
    docs = _docs(files["kueue.yaml"])
    kinds = _check_schema(docs, f"kueue-{api}.json")
    assert kinds == {"ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"}
    queues = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterQueue"}
    assert set(queues) == {"radiology", "vision", "research"}  # all GPUs guaranteed: no shared
    vision = queues["vision"]["spec"]
    assert vision[cohort] == "dgx-a100"
    other = {"v1beta1": "cohortName", "v1beta2": "cohort"}[api]
    assert other not in vision
    gpu = vision["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 8}
    assert vision["preemption"]["reclaimWithinCohort"] == "Any"
    local = [d for d in docs if d["kind"] == "LocalQueue" and d["metadata"]["name"] == "vision"]
    assert local[0]["metadata"]["namespace"] == "team-vision"
    assert local[0]["spec"] == {"clusterQueue": "vision"}
    conf = files["spark-kueue-vision.conf"]
    assert "spark.kubernetes.executor.label.kueue.x-k8s.io/queue-name vision" in conf
    assert "spark.dynamicAllocation.enabled false" in conf


def test_kueue_notes_and_shared_queue_for_unguaranteed_gpus() -> None:
    spec = _spec_with([{"name": "a", "guaranteed_gpus": 4, "max_gpus": 10}])
    docs = _docs(render_quota(spec, "kueue")["kueue.yaml"])
    _check_schema(docs, "kueue-v1beta2.json")
    shared = next(d for d in docs if d["metadata"]["name"] == "gpuspark-shared")
    gpu = shared["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": 12}
    notes = " ".join(quota_notes(spec, "kueue"))
    assert "rejects dynamic allocation" in notes and "not admitted atomically" in notes
    assert "rejects dynamic allocation" in render_quota(spec, "kueue")["kueue.yaml"]


def test_kueue_one_flavor_per_gpu_model() -> None:
    data = parse_spec(example_spec()).model_dump()
    second = dict(data["nodes"][0], name="h100", hosts=["h01"], gpu_model="H100 80GB HBM3")
    data["nodes"].append(second)
    spec = ClusterSpec.model_validate(data)
    docs = _docs(render_quota(spec, "kueue")["kueue.yaml"])
    _check_schema(docs, "kueue-v1beta2.json")
    flavors = [d for d in docs if d["kind"] == "ResourceFlavor"]
    assert [f["metadata"]["name"] for f in flavors] == ["a100-sxm4-80gb", "h100-80gb-hbm3"]
    assert flavors[1]["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    per_flavor = [0, 0]
    for cq in (d for d in docs if d["kind"] == "ClusterQueue"):
        gpus = [f["resources"][0] for f in cq["spec"]["resourceGroups"][0]["flavors"]]
        per_flavor = [n + r["nominalQuota"] for n, r in zip(per_flavor, gpus, strict=True)]
        if cq["metadata"]["name"] == "gpuspark-shared":
            assert all("borrowingLimit" not in r for r in gpus)
            continue
        team = next(t for t in spec.teams if t.name == cq["metadata"]["name"])
        assert sum(r["nominalQuota"] for r in gpus) == team.guaranteed_gpus
        assert sum(r["nominalQuota"] + r["borrowingLimit"] for r in gpus) == team.max_gpus
    assert per_flavor == [16, 8]  # the cohort holds exactly the cluster's GPUs of each model


# ----------------------------------------------------------------------------- Volcano


def test_volcano_queues_and_podgroups_follow_the_api_schema() -> None:
    spec = load_spec(EXAMPLE)
    files = render_quota(spec, "volcano", template_dir="/etc/q")
    queues = _docs(files["volcano-queues.yaml"])
    assert _check_schema(queues, "volcano-v1beta1.json") == {"Queue"}
    research = next(q for q in queues if q["metadata"]["name"] == "research")["spec"]
    assert research["capability"]["nvidia.com/gpu"] == 8
    assert research["guarantee"]["resource"]["nvidia.com/gpu"] == 4
    assert research["weight"] == 1
    pg = _docs(files["volcano-podgroup-research.yaml"])
    assert _check_schema(pg, "volcano-v1beta1.json") == {"PodGroup"}
    assert pg[0]["spec"]["queue"] == "research" and pg[0]["spec"]["minMember"] == 1
    conf = files["spark-volcano-research.conf"]
    assert "spark.kubernetes.scheduler.name volcano" in conf
    assert (
        "spark.kubernetes.scheduler.volcano.podGroupTemplateFile"
        " /etc/q/volcano-podgroup-research.yaml" in conf
    )
    assert "spark.dynamicAllocation.maxExecutors 8" in conf


# ----------------------------------------------------------------------------- standalone


def test_team_caps_of_the_example() -> None:
    spec = load_spec(EXAMPLE)
    caps = team_caps(spec, "vision")
    assert caps == TeamCaps(cores_max=12 * 16, max_executors=12, executor_gpus=1, max_gpus=12)
    assert caps.conf() == {
        "spark.cores.max": "192",
        "spark.dynamicAllocation.maxExecutors": "12",
    }


@settings(max_examples=80, deadline=None)
@given(max_gpus=st.integers(1, 16), executor_gpus=st.sampled_from([1, 2, 4, 8]))
def test_team_caps_never_exceed_max_gpus(max_gpus: int, executor_gpus: int) -> None:
    data = parse_spec(example_spec()).model_dump()
    data["teams"] = [{"name": "t", "guaranteed_gpus": 0, "max_gpus": max_gpus}]
    data["spark"].update(executor_gpus=executor_gpus, executor_cores=executor_gpus * 16)
    spec = ClusterSpec.model_validate(data)
    if max_gpus < executor_gpus:
        with pytest.raises(SpecError, match=f"max_gpus={max_gpus}, below one executor"):
            team_caps(spec, "t")
        return
    caps = team_caps(spec, "t")
    assert caps.max_executors * caps.executor_gpus <= max_gpus
    assert (caps.max_executors + 1) * executor_gpus > max_gpus  # and no executor is wasted
    assert caps.cores_max == caps.max_executors * spec.spark.executor_cores


def test_team_caps_unknown_team_is_one_line() -> None:
    with pytest.raises(SpecError, match="did you mean 'vision'") as info:
        team_caps(load_spec(EXAMPLE), "visoin")
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------- CLI


def test_cli_render_yarn_writes_files_and_notes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "q"
    assert main(["render", "yarn", str(EXAMPLE), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out / 'capacity-scheduler.xml'}" in text and "note: capacities" in text
    props = _props((out / "capacity-scheduler.xml").read_text())
    spec = load_spec(EXAMPLE)
    for team in spec.teams:
        share = Decimal(team.guaranteed_gpus) * 100 / spec.total_gpus
        assert Decimal(props[f"yarn.scheduler.capacity.root.{team.name}.capacity"]) == share
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([*render_quota(spec, "yarn"), ".gpuspark-render.json"])


@pytest.mark.parametrize("scheduler", ["kueue", "volcano"])
def test_cli_render_kube_json(
    scheduler: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", scheduler, str(EXAMPLE), "-o", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["notes"] and all(Path(p).is_file() for p in report["written"])
    for path in report["written"]:
        if path.endswith(".yaml"):
            _docs(Path(path).read_text())


def test_cli_bad_kueue_api_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["render", "kueue", str(EXAMPLE), "--kueue-api", "v1"])
    assert code == 2
    assert "v1beta1, v1beta2" in capsys.readouterr().err


# ----------------------------------------------------------------------------- no teams


def _no_teams_spec(tmp_path: Path) -> Path:
    """The example spec, as a user writes it, with its [[teams]] tables left out."""
    text = EXAMPLE.read_text()
    start, end = text.index("[[teams]]"), text.index("[monitoring]")
    path = tmp_path / "cluster.toml"
    path.write_text(text[:start] + text[end:])
    assert not load_spec(path).teams
    return path


def test_cli_render_kueue_without_teams_writes_one_working_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "q"
    assert main(["render", "kueue", str(_no_teams_spec(tmp_path)), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "every job shares one queue, ClusterQueue 'gpuspark-shared'" in text
    assert "spark-kueue.conf" in text and "only lends" not in text
    docs = _docs((out / "kueue.yaml").read_text())
    _check_schema(docs, "kueue-v1beta2.json")
    [cq] = [d for d in docs if d["kind"] == "ClusterQueue"]
    [lq] = [d for d in docs if d["kind"] == "LocalQueue"]
    namespace = lq["metadata"]["namespace"]
    assert cq["spec"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": namespace
    }
    assert lq["spec"]["clusterQueue"] == cq["metadata"]["name"]
    gpus = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
    assert gpus == 16
    conf = (out / "spark-kueue.conf").read_text()
    assert f"spark.kubernetes.namespace {namespace}\n" in conf
    assert f"executor.label.kueue.x-k8s.io/queue-name {lq['metadata']['name']}\n" in conf


def test_cli_render_volcano_without_teams_writes_one_working_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "q"
    assert main(["render", "volcano", str(_no_teams_spec(tmp_path)), "-o", str(out)]) == 0
    assert "every job shares one queue, 'gpuspark-shared'" in capsys.readouterr().out
    [queue] = _docs((out / "volcano-queues.yaml").read_text())
    _check_schema([queue], "volcano-v1beta1.json")
    assert queue["spec"]["capability"]["nvidia.com/gpu"] == 16
    conf = dict(
        line.split(" ", 1)
        for line in (out / "spark-volcano.conf").read_text().splitlines()
        if not line.startswith("#")
    )
    template = out / conf["spark.kubernetes.scheduler.volcano.podGroupTemplateFile"]
    [pg] = _docs(template.read_text())
    _check_schema([pg], "volcano-v1beta1.json")
    assert pg["spec"]["queue"] == queue["metadata"]["name"]
    assert conf["spark.dynamicAllocation.maxExecutors"] == "16"


def test_render_yarn_and_k8s_without_teams_name_their_one_queue(tmp_path: Path) -> None:
    spec = load_spec(_no_teams_spec(tmp_path))
    assert "one queue, root.default" in quota_notes(spec, "yarn")[0]
    files = render_k8s(spec)
    local = [d for d in _docs(files["cluster/20-queues.yaml"]) if d["kind"] == "LocalQueue"]
    assert [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in local] == [
        ("gpuspark", "gpuspark-shared")
    ]
    assert "executor.label.kueue.x-k8s.io/queue-name gpuspark-shared" in files["spark/train.conf"]
    app = _docs(files["apps/train.yaml"])[0]
    assert app["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpuspark-shared"
