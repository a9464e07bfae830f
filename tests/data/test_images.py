"""Image folders to rows (no Spark): modes, class layout, corrupt files."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuspark.data.sources import ImageOptions, QuarantineError, class_of, prep_image
from gpuspark.demo import synth_images


def test_fuzzed_images_never_crash(
    tmp_path: Path, mutations: Callable[[bytes, random.Random], list[bytes]]
) -> None:
    synth_images(tmp_path / "imgs", classes=2, per_class=3, seed=1, png_every=2)
    rng = random.Random(11)
    seen = 0
    for f in sorted((tmp_path / "imgs").rglob("class_*/*.*")):
        good = prep_image(f.read_bytes(), ImageOptions(mode="predecode", size=16))
        assert good["image"].shape == (16, 16, 3)
        for bad in mutations(f.read_bytes(), rng):
            try:
                prep_image(bad, ImageOptions(mode="resize", size=16))
            except QuarantineError as exc:
                assert exc.reason
                seen += 1
    assert seen >= 6


def test_image_modes_and_layout(tmp_path: Path) -> None:
    synth_images(tmp_path / "imgs", classes=2, per_class=2, seed=0)
    f = next((tmp_path / "imgs" / "class_01").iterdir())
    data = f.read_bytes()
    assert prep_image(data)["image"] == data
    r = prep_image(data, ImageOptions(mode="resize", size=32))
    assert min(r["width"], r["height"]) == 32 and r["format"] == "jpeg"
    assert class_of(f"file:{f}", str(tmp_path / "imgs"))[0] == "class_01"
    with pytest.raises(QuarantineError, match="class folder"):
        class_of(str(tmp_path / "imgs" / "x.jpg"), str(tmp_path / "imgs"))
    with pytest.raises(QuarantineError, match="not an image"):
        class_of(str(tmp_path / "imgs" / "a" / "notes.txt"), str(tmp_path / "imgs"))
