"""Every object ``render k8s``, ``render kueue`` and ``render volcano`` write validates against
its published schema, offline:

- core kinds (Namespace, ServiceAccount, Role, RoleBinding, ConfigMap, the pod templates, the
  ``PodTemplateSpec`` inside each SparkApplication) with ``kubernetes-validate`` in strict mode
  (unknown fields are errors), for Kubernetes 1.29 and the newest version the package ships;
- custom resources against the ``openAPIV3Schema`` of their CRDs, kept under
  ``tests/fixtures/k8s-schemas/`` (README.md there names each source), with the API server's
  strict field validation emulated: a field the schema does not list is an error unless the
  schema preserves unknown fields. CEL rules (``x-kubernetes-validations``) are not run.

A deliberately wrong field fails each kind of check (the last tests).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpuspark.quota.render import render_k8s, render_quota
from gpuspark.spec import ClusterSpec, example_spec, parse_spec

SCHEMAS = Path(__file__).resolve().parents[2] / "fixtures" / "k8s-schemas"
VERSIONS = ("1.29", kubernetes_validate.latest_version())
CORE_APIS = ("v1", "rbac.authorization.k8s.io/v1")


# ----------------------------------------------------------------------------- helpers


def _strict(node: Any) -> Any:
    """``node`` with ``additionalProperties: false`` on every object schema that lists its
    properties and neither preserves unknown fields nor says what else it allows; Go's
    ``^(?i)...`` patterns in Python's spelling ``(?i)^...``."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()}
    if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
        out["pattern"] = "(?i)^" + out["pattern"][len("^(?i)") :]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def _validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    name = f"{api_version.replace('/', '_')}_{kind.lower()}.json"
    path = SCHEMAS / name
    assert path.is_file(), f"no schema for {kind} ({api_version}): {name} is missing"
    schema = _strict(json.loads(path.read_text()))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``PodTemplateSpec``s inside a SparkApplication, as ``v1`` PodTemplates (the CRD
    keeps them unvalidated: ``x-kubernetes-preserve-unknown-fields``)."""
    if obj["kind"] != "SparkApplication":
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"{obj['metadata']['name']}-{role}"},
            "template": obj["spec"][role]["template"],
        }
        for role in ("driver", "executor")
        if "template" in obj["spec"][role]
    ]


def check(obj: dict[str, Any]) -> None:
    """Validate ``obj``; raises on the first problem."""
    if obj["apiVersion"] in CORE_APIS:
        for version in VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
        return
    _validator(obj["apiVersion"], obj["kind"]).validate(obj)
    for template in _pod_templates(obj):
        check(template)


def _objects(files: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for name, text in files.items():
        if name.endswith((".yaml", ".yml")):
            out += [d for d in yaml.safe_load_all(text) if d is not None]
    return out


def _spec(**kubernetes: Any) -> ClusterSpec:
    data = parse_spec(example_spec()).model_dump()
    data["kubernetes"] = {**data["kubernetes"], **kubernetes}
    return ClusterSpec.model_validate(data)


def _with_conf(**conf: str) -> ClusterSpec:
    data = parse_spec(example_spec()).model_dump()
    data["spark"]["conf"].update(conf)
    return ClusterSpec.model_validate(data)


# ----------------------------------------------------------------------------- render k8s


@pytest.mark.parametrize("api", ["v1beta1", "v1beta2"])
def test_every_object_of_render_k8s_validates(api: str) -> None:
    spec = _spec(
        gpu_product="NVIDIA-A100-SXM4-80GB",
        local_dirs=["/raid/spark", "/scratch/spark"],
        monitoring_labels={"release": "kube-prometheus-stack"},
    )
    objects = _objects(render_k8s(spec, api=api, namespace_prefix="team-"))
    for obj in objects:
        check(obj)
    kinds = {o["kind"] for o in objects}
    assert kinds >= {
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Pod",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
        "SparkApplication",
        "Configuration",
        "PodMonitor",
        "ServiceMonitor",
        "PrometheusRule",
    }


@pytest.mark.parametrize("scheduler", ["volcano", "yunikorn"])
def test_render_k8s_of_the_other_flavours_validates(scheduler: str) -> None:
    spec = _with_conf(**{"spark.kubernetes.scheduler.name": scheduler})
    objects = _objects(render_k8s(spec))
    for obj in objects:
        check(obj)
    kinds = {o["kind"] for o in objects}
    assert ("PodGroup" in kinds) == (scheduler == "volcano")
    assert ("Queue" in kinds) == (scheduler == "volcano")
    assert not kinds & {"ClusterQueue", "Configuration"}


def test_render_k8s_without_teams_validates() -> None:
    data = parse_spec(example_spec()).model_dump()
    data["teams"] = []
    data["networks"]["compute"]["kind"] = "ethernet"
    for obj in _objects(render_k8s(ClusterSpec.model_validate(data))):
        check(obj)


# ----------------------------------------------------------------------------- kueue, volcano


@pytest.mark.parametrize("api", ["v1beta1", "v1beta2"])
def test_render_kueue_validates_against_its_crds(api: str) -> None:
    spec = parse_spec(example_spec())
    data = spec.model_dump()
    data["teams"] = [{"name": "a", "guaranteed_gpus": 4, "max_gpus": 10}]  # + a shared queue
    for which in (spec, ClusterSpec.model_validate(data)):
        objects = _objects(render_quota(which, "kueue", api=api, namespace_prefix="t-"))
        assert objects and all(o["apiVersion"] == f"kueue.x-k8s.io/{api}" for o in objects)
        for obj in objects:
            check(obj)


def test_render_volcano_validates_against_its_crds() -> None:
    objects = _objects(render_quota(parse_spec(example_spec()), "volcano"))
    assert {o["kind"] for o in objects} == {"Queue", "PodGroup"}
    for obj in objects:
        check(obj)


# ----------------------------------------------------------------------------- wrong fields fail


def _first(files: dict[str, str], kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(o for o in _objects(files) if o["kind"] == kind))


def test_a_wrong_field_in_a_core_kind_fails() -> None:
    files = render_k8s(parse_spec(example_spec()))
    pod = yaml.safe_load(files["spark/executor-pod-template.yaml"])
    check(pod)
    pod["spec"]["containers"][0]["volumeMount"] = pod["spec"]["containers"][0].pop("volumeMounts")
    for version in VERSIONS:
        with pytest.raises(kubernetes_validate.ValidationError, match="volumeMount"):
            kubernetes_validate.validate(pod, version, strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):
        check(pod)


def test_a_wrong_field_in_a_custom_resource_fails() -> None:
    files = render_k8s(parse_spec(example_spec()))
    app = _first(files, "SparkApplication")
    app["spec"]["executor"]["gpus"] = app["spec"]["executor"].pop("gpu")
    with pytest.raises(jsonschema.ValidationError, match="gpus"):
        check(app)
    rule = _first(files, "PrometheusRule")
    rule["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"
    with pytest.raises(jsonschema.ValidationError, match="ten minutes"):
        check(rule)
    queue = _first(render_quota(parse_spec(example_spec()), "kueue"), "ClusterQueue")
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    with pytest.raises(jsonschema.ValidationError, match="lots"):
        check(queue)


def test_a_wrong_field_in_a_pod_template_of_a_spark_application_fails() -> None:
    app = _first(render_k8s(parse_spec(example_spec())), "SparkApplication")
    app["spec"]["executor"]["template"]["spec"]["toleration"] = []
    with pytest.raises(kubernetes_validate.ValidationError, match="toleration"):
        check(app)


def test_a_wrong_framework_in_the_kueue_configuration_fails() -> None:
    config = _first(render_k8s(parse_spec(example_spec())), "Configuration")
    check(config)
    config["integrations"]["frameworks"].append("sparkoperator.k8s.io/sparkapp")
    with pytest.raises(jsonschema.ValidationError, match="sparkapp"):
        check(config)
