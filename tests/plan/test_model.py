"""The performance model on the example spec, on made-up specs, and with a calibration."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from gpuspark.errors import PlanError
from gpuspark.plan import (
    AllreduceRow,
    AllreduceSweep,
    Calibration,
    ComputeProbe,
    PlanRequest,
    custom_workload,
    find_gpu,
    find_workload,
    parse_compression,
    predict,
    sweep,
)
from gpuspark.spec import ClusterSpec, load_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.toml"


@pytest.fixture(scope="module")
def dgx() -> ClusterSpec:
    return load_spec(EXAMPLE)


def _with(spec: ClusterSpec, **group: object) -> ClusterSpec:
    return spec.model_copy(update={"nodes": [spec.nodes[0].model_copy(update=group)]})


def test_one_a100_reproduces_its_reference_throughput(dgx: ClusterSpec) -> None:
    # The default efficiency comes from NVIDIA's 2,470 images/s on one A100 (mixed precision)
    plan = predict(dgx, PlanRequest(find_workload("resnet50"), 256, gpus=1))
    assert plan.samples_per_s == pytest.approx(2470, rel=1e-3)
    assert plan.sources["compute"] == "reference"


def test_step_is_the_sum_of_its_parts(dgx: ClusterSpec) -> None:
    p = predict(dgx, PlanRequest(find_workload("resnet50"), 2048, nodes=2))
    assert p.step_s == pytest.approx(p.compute_s + p.exposed_comm_s + p.optimizer_s + p.data_s)
    assert p.gpus == 16 and p.per_gpu_batch == 128
    assert p.comm_share == pytest.approx(p.exposed_comm_s / p.step_s)
    assert p.exposed_comm_s < p.comm_s  # the buckets before the last hide behind backward


def test_seed_claim_resnet50_two_dgx_on_100g_ib_under_15_percent(dgx: ClusterSpec) -> None:
    p = predict(dgx, PlanRequest(find_workload("resnet50"), 2048, nodes=2))
    assert p.comm_share < 0.15
    # ...because DDP hides it behind backward: the all-reduce alone is ~19% of compute time
    assert 0.15 < p.comm_s / p.compute_s < 0.25


def test_a_slow_network_makes_communication_the_bottleneck(dgx: ClusterSpec) -> None:
    compute = dgx.networks.compute.model_copy(update={"gbps": 1.0})
    slow = dgx.model_copy(update={"networks": dgx.networks.model_copy(update={"compute": compute})})
    p = predict(slow, PlanRequest(find_workload("resnet50"), 2048, nodes=4))
    assert p.bottleneck == "communication"
    assert p.scaling_efficiency < 0.5


def test_few_cores_make_the_plan_input_bound(dgx: ClusterSpec) -> None:
    p = predict(_with(dgx, cpu_cores=4), PlanRequest(find_workload("resnet50"), 2048, nodes=1))
    assert p.input_bound and p.bottleneck == "input pipeline"
    assert p.data_s > 0


def test_scaling_efficiency_falls_with_nodes_and_time_to_train_shrinks(dgx: ClusterSpec) -> None:
    req = PlanRequest(find_workload("resnet50"), 2048, nodes=1, epochs=90)
    plans = sweep(dgx, req, [1, 2, 4, 8])
    effs = [p.scaling_efficiency for p in plans[1:]]
    assert effs == sorted(effs, reverse=True)
    ttt = [p.time_to_train_s for p in plans]
    assert all(a is not None and b is not None and b < a for a, b in itertools.pairwise(ttt))
    assert [p.per_gpu_batch for p in plans] == [256] * 4


def test_compression_cuts_the_bytes(dgx: ClusterSpec) -> None:
    base = PlanRequest(find_workload("resnet50"), 2048, nodes=2)
    none = predict(dgx, base)
    half = predict(dgx, replace(base, compression="fp16"))
    low = predict(dgx, replace(base, compression="powersgd", powersgd_rank=4))
    assert half.bytes_sent * 2 == none.bytes_sent == none.bytes_raw
    assert low.bytes_sent < none.bytes_sent / 20
    assert low.comm_s < half.comm_s < none.comm_s


def test_fsdp_moves_more_bytes_than_ddp(dgx: ClusterSpec) -> None:
    base = PlanRequest(find_workload("resnet50"), 2048, nodes=1)
    assert predict(dgx, replace(base, strategy="fsdp")).comm_s > predict(dgx, base).comm_s


def test_calibrated_sweep_interpolates_log_log() -> None:
    sweep_ = AllreduceSweep(2, "gloo", (
        AllreduceRow(1000, 1e-3, 1e6, 1e6), AllreduceRow(100_000, 1e-2, 1e7, 1e7)))  # fmt: skip
    assert sweep_.time_s(10_000) == pytest.approx(10**-2.5)
    assert sweep_.time_s(10) == 1e-3
    # beyond the largest size: its time + the rest at its algbw (1e7 B/s)
    assert sweep_.time_s(200_000) == pytest.approx(2e-2)


def test_calibration_replaces_spec_and_reference(dgx: ClusterSpec) -> None:
    rows = (AllreduceRow(1000, 1e-3, 1e6, 1e6), AllreduceRow(100_000_000, 1.0, 1e8, 1e8))
    probe = ComputeProbe(
        recipe="x", options={}, input_shape=(1,), batch=4, ranks=2, threads=1, sample_s=0.01,
        backward_share=0.5, optimizer_s=0.002, flops_per_sample=1e9, shapes=((1000, 1000),),
        straggler_s=0.001, hook_s={"powersgd": 0.004},
    )  # fmt: skip
    cal = Calibration(AllreduceSweep(2, "gloo", rows), probe)
    work = custom_workload(1_000_000, 1e9)
    p = predict(dgx, PlanRequest(work, 8, gpus=2), cal)
    assert p.sources == {"compute": "calibration", "comm": "calibration", "decode": "none"}
    assert p.compute_s == pytest.approx(0.04)  # 4 samples x 10 ms
    # one 4 MB bucket: 1e-3 * (4e6/1e3)^(log(1000)/log(1e5)) s, exposed in full + straggler
    assert p.buckets == 1 and p.exposed_comm_s == pytest.approx(p.comm_s + 0.001)
    assert p.step_s == pytest.approx(0.04 + p.exposed_comm_s + 0.002)


def test_gpu_table_and_errors() -> None:
    assert find_gpu("NVIDIA H100 80GB HBM3").name == "H100-SXM5-80GB"
    assert find_gpu("A100-SXM4-80GB").peak_flops("bf16") == 312e12
    with pytest.raises(PlanError, match="not in the planner's table"):
        find_gpu("V100-SXM2-16GB")


def test_compression_text() -> None:
    assert parse_compression("powersgd:4") == ("powersgd", 4)
    assert parse_compression("fp16") == ("fp16", 2)
    with pytest.raises(PlanError, match="did you mean 'fp16'"):
        parse_compression("fp61")
    with pytest.raises(PlanError, match="rank"):
        parse_compression("powersgd:0")


def test_powersgd_needs_shapes(dgx: ClusterSpec) -> None:
    req = PlanRequest(custom_workload(10**6, 1e9), 64, compression="powersgd")
    with pytest.raises(PlanError, match="weight shapes"):
        predict(dgx, req)
