"""The embedded cluster's shape derived from a spec and scaled to this machine (no Spark)."""

from __future__ import annotations

import pytest

from gpuspark.cluster.session import check_slots
from gpuspark.cluster.shape import EmbeddedShape, embedded_shape, parse_memory_mb
from gpuspark.errors import ClusterError
from gpuspark.spec import default_spec, example_spec, parse_spec


def test_default_spec_shape() -> None:
    shape = embedded_shape(default_spec())
    assert (shape.workers, shape.gpus_per_worker) == (2, 2)
    assert (shape.executor_gpus, shape.executor_cores, shape.task_gpu_amount) == (2, 4, 0.5)
    assert shape.task_slots == 8
    assert shape.notes == ()


def test_example_spec_is_scaled_and_says_so() -> None:
    shape = embedded_shape(parse_spec(example_spec()))
    # kept: 1 GPU per executor, 0.25 GPU per task -> 4 data tasks share a GPU
    assert shape.executor_gpus == 1
    assert shape.task_gpu_amount == 0.25
    assert shape.executor_cores == 4 and shape.task_cpus == 1
    assert shape.executors_per_worker == 2  # 2 simulated GPUs per worker
    assert shape.gpus_per_worker == 2
    notes = " ".join(shape.notes)
    assert "8 per node" in notes and "task CPUs: 4 -> 1" in notes and "200g -> 1g" in notes
    check_slots(shape.executor_conf())


def test_real_gpus_are_split_between_workers() -> None:
    shape = embedded_shape(default_spec(), real_gpus=1)
    assert (shape.workers, shape.gpus_per_worker) == (1, 1)
    assert shape.executor_gpus == 1 and shape.task_gpu_amount == 0.5


@pytest.mark.parametrize("cores", [1, 2, 4, 8, 16])
def test_cores_override_keeps_gpu_and_cpu_slots_equal(cores: int) -> None:
    shape = embedded_shape(default_spec(), cores=cores, gpus=2)
    assert shape.cores_per_worker == cores
    check_slots(shape.executor_conf())  # never a conf Spark calls wasteful


def test_no_gpus_gives_cpu_executors() -> None:
    shape = embedded_shape(default_spec(), gpus=0)
    assert shape.executor_gpus == 0
    assert not any("gpu" in k for k in shape.executor_conf())


def test_impossible_overrides_are_refused() -> None:
    with pytest.raises(ClusterError, match="cannot share"):
        embedded_shape(default_spec(), cores=3, gpus=2)
    with pytest.raises(ClusterError, match="at least 512m"):
        embedded_shape(default_spec(), memory="256m")
    with pytest.raises(ClusterError, match="nvidia-smi shows 1"):
        embedded_shape(default_spec(), gpus=2, real_gpus=1)


def test_round_trip_and_memory_strings() -> None:
    shape = embedded_shape(parse_spec(example_spec()))
    assert EmbeddedShape.from_dict(shape.as_dict()) == shape
    assert parse_memory_mb("512m") == 512 and parse_memory_mb("4g") == 4096
