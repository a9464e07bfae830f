"""World detection and validation (no processes needed)."""

from __future__ import annotations

import pytest

from gpuspark.data.load import World


def test_defaults_without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert World.detect() == World(0, 1, 0, 0, 1)


def test_detect_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    world = World.detect()
    assert (world.rank, world.world_size, world.local_rank) == (3, 4, 1)
    assert (world.worker_id, world.num_workers) == (0, 1)
    assert not world.is_leader


def test_bad_env_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE must be an integer, got: 'two'"):
        World.detect()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank": 2, "world_size": 2}, "rank must be in"),
        ({"world_size": 0}, "world_size must be >= 1"),
        ({"worker_id": 1, "num_workers": 1}, "worker_id must be in"),
        ({"num_workers": 0}, "num_workers must be >= 1"),
    ],
)
def test_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        World(**kwargs)


def test_with_worker_keeps_rank() -> None:
    world = World(rank=1, world_size=2).with_worker(1, 3)
    assert (world.rank, world.world_size, world.worker_id, world.num_workers) == (1, 2, 1, 3)
