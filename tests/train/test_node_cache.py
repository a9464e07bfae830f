"""The node cache is on by default for a dataset at a URL: ``train --data s3://…`` copies each
shard to the node's disk once (``~/.gpuspark/cache/shards``, or ``--cache-dir``), shared by the
node's ranks, under ``--cache-gb``; ``--no-cache`` reads the store every time. Against the test
S3 server (moto, a test tool: ``tests/_s3.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from _s3 import S3Bucket
from gpuspark.data.load import World
from gpuspark.errors import RecipeError
from gpuspark.train.recipes import RecipeConfig
from gpuspark.train.recipes.rank import _train_dataset, node_cache
from gpuspark.train.recipes.registry import get_recipe


def test_the_cache_is_on_for_urls_only_and_off_with_no_cache(tmp_path: Path) -> None:
    on = node_cache(RecipeConfig(data="s3://bucket/ds"))
    assert on == {
        "cache_dir": os.path.expanduser("~/.gpuspark/cache/shards"),
        "cache_limit_bytes": None,
    }
    given = RecipeConfig(data="s3://bucket/ds", cache_dir=str(tmp_path), cache_gb=1.5)
    assert node_cache(given) == {"cache_dir": str(tmp_path), "cache_limit_bytes": 1_500_000_000}
    assert node_cache(RecipeConfig(data="s3://bucket/ds", cache=False)) == {}
    assert node_cache(RecipeConfig(data=str(tmp_path / "ds"))) == {}  # local: nothing to copy
    with pytest.raises(RecipeError, match="cache_gb must be > 0"):
        RecipeConfig(data="s3://bucket/ds", cache_gb=0)


def _upload_dataset(s3: S3Bucket, tmp_path: Path) -> str:
    import fsspec

    from gpuspark.data.write import ShardWriter

    local = tmp_path / "ds"
    rng = np.random.default_rng(0)
    with ShardWriter(local, target_shard_bytes=150) as w:
        for i in range(8):
            w.write({"volume": rng.integers(0, 255, (4, 4, 4), dtype=np.uint8), "label": i % 2})
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.put(str(local), f"{s3.url.removeprefix('s3://')}/ds", recursive=True)
    return f"{s3.url}/ds"


def test_the_second_epoch_fetches_nothing_and_the_cap_holds(s3: S3Bucket, tmp_path: Path) -> None:
    url = _upload_dataset(s3, tmp_path)
    from gpuspark.data.format import load_manifest

    shards = len(load_manifest(url).shards)
    assert shards >= 3
    recipe = get_recipe("resnet3d")
    cfg = RecipeConfig(data=url, train_split=None, cache_dir=str(tmp_path / "cache"))
    decode = recipe.decoder(cfg, load_manifest(url))
    ds = _train_dataset(recipe, cfg, decode)
    ds._world = World()  # one rank
    loader = ds.loader(2)
    assert sum(len(y) for _, y in loader) == 8
    first = loader.stats()
    ds.set_epoch(1)
    assert sum(len(y) for _, y in loader) == 8
    second = loader.stats()
    assert first["cache_misses"] == 2 * shards  # each shard and its index, once
    assert first["cache_bytes_fetched"] > 0
    assert second["cache_bytes_fetched"] == first["cache_bytes_fetched"]  # epoch 2: 0 bytes
    assert second["cache_hits"] >= shards
    capped = RecipeConfig(
        data=url, train_split=None, cache_dir=str(tmp_path / "small"), cache_gb=300e-9
    )
    small = _train_dataset(recipe, capped, decode)
    small._world = World()
    small_loader = small.loader(2)
    assert sum(len(y) for _, y in small_loader) == 8
    files = [f for f in (tmp_path / "small").iterdir() if not f.name.endswith(".lock")]
    largest = max(s.bytes for s in load_manifest(url).shards)
    assert sum(f.stat().st_size for f in files) <= 300 + largest  # the cap, and the file in use
    assert small_loader.stats()["cache_evictions"] > 0
