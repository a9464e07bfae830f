"""What ``render k8s`` writes agrees with itself.

Kueue adds a ResourceFlavor's ``nodeLabels`` to the pods it admits as node selectors; the
ResourceFlavor said ``nvidia.com/gpu.product: A100-SXM4-80GB`` while the executor pod template
and the SparkApplications selected ``NVIDIA-A100-SXM4-80GB``, so admitted pods matched no node.
This cross-checks every rendered object: the flavors' GPU labels against every pod selector,
the queue labels against the LocalQueues of their namespaces, and the RoleBindings'
namespaces against the rendered Namespaces.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuspark.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "cluster.toml"
QUEUE = "kueue.x-k8s.io/queue-name"
GPU = "nvidia.com/gpu.product"


def _spec(tmp_path: Path, gpu_product: str | None) -> Path:
    text = EXAMPLE.read_text()
    if gpu_product is not None:
        text += f'\n[kubernetes]\ngpu_product = "{gpu_product}"\n'
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return path


def _docs(out: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(out.rglob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return found


def _selectors(node: Any) -> Iterator[dict[str, str]]:
    """Every ``nodeSelector`` mapping anywhere in ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "nodeSelector" and isinstance(value, dict):
                yield value
            else:
                yield from _selectors(value)
    elif isinstance(node, list):
        for item in node:
            yield from _selectors(item)


@pytest.mark.parametrize("gpu_product", [None, "NVIDIA-A100-SXM4-80GB"])
def test_rendered_objects_agree(tmp_path: Path, gpu_product: str | None) -> None:
    out = tmp_path / "k8s"
    assert main(["render", "k8s", "--spec", str(_spec(tmp_path, gpu_product)), "-o", str(out)]) == 0
    docs = _docs(out)
    kinds = {d.get("kind") for d in docs}
    assert {"ResourceFlavor", "LocalQueue", "RoleBinding", "Namespace"} <= kinds, kinds

    flavor_gpus = {d["spec"]["nodeLabels"][GPU] for d in docs if d["kind"] == "ResourceFlavor"}
    pod_gpus = {s[GPU] for s in _selectors(docs) if GPU in s}
    assert pod_gpus <= flavor_gpus, (pod_gpus, flavor_gpus)
    if gpu_product is not None:
        assert pod_gpus == {gpu_product}  # the pods do select it, and a flavor carries it
    assert all(v.startswith("NVIDIA-") for v in flavor_gpus), flavor_gpus  # GFD's form

    local_queues = {
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in docs
        if d["kind"] == "LocalQueue"
    }
    labelled = [d for d in docs if QUEUE in (d.get("metadata", {}).get("labels") or {})]
    assert labelled
    for d in labelled:
        where = (d["metadata"]["namespace"], d["metadata"]["labels"][QUEUE])
        assert where in local_queues, (d["kind"], d["metadata"]["name"], where)

    namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    for d in docs:
        if d["kind"] in ("RoleBinding", "Role", "ServiceAccount", "LocalQueue"):
            assert d["metadata"]["namespace"] in namespaces, (d["kind"], d["metadata"])
