"""The cost formulas against values computed by hand (the arithmetic is in each comment)."""

from __future__ import annotations

import math

import pytest

from gpuspark.plan import formulas as f
from gpuspark.plan.workloads import resnet50


def test_ring_allreduce_matches_hand_value() -> None:
    # 2*7/8 * 100e6 B / 200e9 B/s = 0.875 ms; + 2*7 * 1 us = 14 us -> 0.889 ms
    assert f.ring_allreduce_s(100e6, 8, 200e9, 1e-6) == pytest.approx(0.889e-3, rel=1e-12)


def test_ring_allreduce_two_ranks_is_bytes_over_busbw_plus_two_latencies() -> None:
    # 2*1/2 * 1e6 / 1e9 = 1 ms; + 2 * 50 us = 1.1 ms
    assert f.ring_allreduce_s(1e6, 2, 1e9, 50e-6) == pytest.approx(1.1e-3)


@pytest.mark.parametrize("ranks, nbytes", [(1, 1e9), (8, 0)])
def test_ring_allreduce_is_free_alone_or_empty(ranks: int, nbytes: float) -> None:
    assert f.ring_allreduce_s(nbytes, ranks, 1e9, 1e-6) == 0.0


def test_hierarchical_adds_the_nvlink_and_network_rings() -> None:
    # inside: 2*7/8 * 100e6 / 200e9 = 0.875 ms; across 2 nodes: 2*1/2 * 100e6 / 10e9 = 10 ms
    got = f.hierarchical_allreduce_s(100e6, 8, 2, 200e9, 10e9, 0.0, 0.0)
    assert got == pytest.approx(10.875e-3)
    # one node: no network term
    assert f.hierarchical_allreduce_s(100e6, 8, 1, 200e9, 10e9, 0.0, 5e-6) == pytest.approx(
        0.875e-3
    )


def test_fsdp_is_three_half_rings() -> None:
    # reduce-scatter + 2 all-gathers, each 3/4 * 4e6 / 1e9 = 3 ms -> 9 ms
    assert f.fsdp_comm_s(4e6, 4, 1e9, 0.0) == pytest.approx(9e-3)


def test_buckets_close_at_1mib_first_then_at_the_cap() -> None:
    sizes = [600_000, 600_000, 10_000_000, 20_000_000, 5_000_000]
    # 1.2 MB >= 1 MiB closes bucket 1; 30 MB >= 25 MB closes bucket 2; 5 MB is left over
    assert f.bucket_sizes(sizes, 25e6) == [1_200_000, 30_000_000, 5_000_000]


def test_exposed_is_the_last_bucket_unless_comm_outlasts_backward() -> None:
    assert f.exposed_comm_s([1.0, 2.0, 3.0], backward_s=10.0) == 3.0
    # 9 s of comm against 5 s of backward: 4 s stick out, more than the last bucket's 1 s
    assert f.exposed_comm_s([4.0, 4.0, 1.0], backward_s=5.0) == 4.0
    assert f.exposed_comm_s([], backward_s=1.0) == 0.0


def test_powersgd_conv_weight_is_viewed_as_out_by_in_k_k() -> None:
    # 64 x (32*3*3=288), rank 2: 2*(64+288) = 704 values instead of 18,432
    assert f.powersgd_elements((64, 32, 3, 3), 2) == (704, 18_432, True)


def test_powersgd_leaves_vectors_and_unprofitable_matrices_alone() -> None:
    assert f.powersgd_elements((10,), 2) == (10, 10, False)
    # 2 x 4 at rank 2: 12 values, and 2*12 >= 8: not worth compressing (torch's rate 2)
    assert f.powersgd_elements((2, 4), 2) == (8, 8, False)
    # the rank is capped at min(m, n): 3 x 100 at rank 8 -> 3*(3+100) = 309; 618 < 300? no
    assert f.powersgd_elements((3, 100), 8) == (300, 300, False)


def test_powersgd_bytes_of_a_small_model() -> None:
    shapes = [(64, 32, 3, 3), (64,), (10, 64)]
    # 704 + 64 + (10x64 at rank 2: 148 values, 296 < 640 -> compressed) = 916 floats
    assert f.compressed_bytes(shapes, "powersgd", 2) == 916 * 4


def test_fp16_is_exactly_half_not_forty_percent_off() -> None:
    shapes = resnet50().shapes
    raw = f.compressed_bytes(shapes, "none")
    assert raw == 25_557_032 * 4
    assert f.compressed_bytes(shapes, "fp16") / raw == 0.5
    assert f.compressed_bytes(shapes, "bf16") * 2 == raw


def test_resnet50_catalogue_matches_its_published_size() -> None:
    w = resnet50()
    assert w.params == 25_557_032  # torchvision resnet50
    # about 4.1 G multiply-adds forward per 224x224 image, x2 FLOPs, x3 forward+backward
    assert w.flops_per_sample / 6 == pytest.approx(4.09e9, rel=0.01)
    assert math.isclose(w.flops_per_sample, 3 * 2 * 4_089_184_256)
