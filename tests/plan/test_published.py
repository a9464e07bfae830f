"""The planner against published figures (tests/plan/data/published.toml, with sources).

Each row states the gap the planner has today; a change that moves a prediction out of its
band fails here, and the README's table has to be updated with the new numbers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from gpuspark.plan import PlanRequest, bus_bandwidths, find_workload, predict
from gpuspark.spec import ClusterSpec, load_spec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = tomllib.loads((HERE / "data" / "published.toml").read_text())


def _spec(gpu: str = "A100-SXM4-80GB", nvlink: float = 600, gbps: float = 100) -> ClusterSpec:
    spec = load_spec(ROOT / "examples" / "cluster.toml")
    group = spec.nodes[0].model_copy(update={"gpu_model": gpu, "nvlink_gbytes_per_s": nvlink})
    compute = spec.networks.compute.model_copy(update={"gbps": gbps})
    networks = spec.networks.model_copy(update={"compute": compute})
    return spec.model_copy(update={"nodes": [group], "networks": networks})


def _gap(predicted: float, published: float) -> float:
    return 100 * (predicted - published) / published


def throughput_gap(row: dict[str, Any]) -> tuple[float, float]:
    """(predicted images/s, gap %) for a ``[[throughput]]`` row on DGX A100 nodes."""
    req = PlanRequest(find_workload("resnet50"), row["per_gpu_batch"] * row["gpus"],
                      gpus=row["gpus"], dtype=row["dtype"])  # fmt: skip
    plan = predict(_spec(), req)
    return plan.samples_per_s, _gap(plan.samples_per_s, row["images_per_s"])


def scaling_gap(row: dict[str, Any]) -> tuple[float, float, float]:
    """(published efficiency, predicted efficiency, gap in points) on DGX H100 nodes
    (8 GPUs, NVLink 900 GB/s, 8 x 400 Gb/s NDR), at MLPerf-like 256 images per GPU."""
    spec = _spec("H100-SXM5-80GB", 900, 3200)
    small, large = row["gpus"]
    t_small, t_large = row["minutes"]
    published = (t_small / t_large) / (large / small)
    w = find_workload("resnet50")
    # NVIDIA's MLPerf ResNet-50 decodes JPEG on the GPUs (DALI): no CPU decode limit.
    reqs = [PlanRequest(w, 256 * g, gpus=g, decode_per_core=float("inf")) for g in row["gpus"]]
    rates = [predict(spec, r).samples_per_s for r in reqs]
    predicted = (rates[1] / rates[0]) / (large / small)
    return published, predicted, 100 * (predicted - published)


def busbw_gap(row: dict[str, Any]) -> tuple[float, float]:
    """(predicted GB/s, gap %) of the planner's bus bandwidth inside a node (``nvlink``) or
    across nodes (``network``, the spec's ``gbps`` being all the node's links together)."""
    spec = _spec(row["gpu"], row["nvlink_gbytes_per_s"], row.get("network_gbps", 100))
    bw = bus_bandwidths(spec)[row.get("link", "nvlink")] / 1e9
    return bw, _gap(bw, row["gbytes_per_s"])


def _check(value: float, band: list[float], what: str) -> None:
    assert band[0] <= value <= band[1], f"{what}: gap {value:+.1f} outside {band}"


@pytest.mark.parametrize("row", DATA["throughput"], ids=lambda r: r["id"])
def test_throughput_gap(row: dict[str, Any]) -> None:
    _, gap = throughput_gap(row)
    _check(gap, row["gap_pct"], row["id"])


@pytest.mark.parametrize("row", DATA["scaling"], ids=lambda r: r["id"])
def test_scaling_gap(row: dict[str, Any]) -> None:
    _, _, pts = scaling_gap(row)
    _check(pts, row["gap_pts"], row["id"])


@pytest.mark.parametrize("row", DATA["busbw"], ids=lambda r: r["id"])
def test_busbw_gap(row: dict[str, Any]) -> None:
    _, gap = busbw_gap(row)
    _check(gap, row["gap_pct"], row["id"])


def test_every_figure_names_its_source() -> None:
    for kind in ("throughput", "scaling", "busbw"):
        for row in DATA[kind]:
            assert row["source"].startswith("https://"), row["id"]
    assert all("no public source" in r["note"] for r in DATA.get("unsourced", []))
