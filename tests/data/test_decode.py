"""Image decoding, resize / center crop and normalisation (gpuspark.data.load.decode)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuspark.data import format as fmt
from gpuspark.data.load import (
    ImageDecode,
    ShardDataset,
    World,
    decode_example_views,
    decode_image,
    make_decoder,
    resize_center_crop,
)
from gpuspark.data.write import ShardWriter
from gpuspark.errors import GpusparkError


def _image(h: int = 60, w: int = 80) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 255 // w, y * 255 // h, (x + y) * 127 // (h + w)], -1).astype(np.uint8)


def _encode(arr: np.ndarray, format: str) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=format, quality=95)
    return buf.getvalue()


@pytest.mark.parametrize("backend", ["auto", "simplejpeg", "pillow"])
def test_jpeg_backends_agree(backend: str) -> None:
    arr = _image()
    out = decode_image(_encode(arr, "JPEG"), "jpeg", backend)
    assert out.shape == (60, 80, 3) and out.dtype == np.uint8
    assert np.abs(out.astype(int) - arr).mean() < 3  # lossy, but close


def test_png_is_exact() -> None:
    arr = _image()
    assert np.array_equal(decode_image(_encode(arr, "PNG"), "png"), arr)


def test_resize_center_crop_takes_the_middle() -> None:
    arr = np.zeros((40, 80, 3), np.uint8)
    arr[:, 20:60] = 255  # the central square is white, the sides black
    out = resize_center_crop(arr, 20)
    assert out.shape == (20, 20, 3)
    assert out[:, 1:-1].min() > 250  # crop covers only the white middle


def _pillow_reference(arr: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    h, w = arr.shape[:2]
    side = min(h, w)
    left, top = (w - side) // 2, (h - side) // 2
    box = (left, top, left + side, top + side)
    return np.asarray(Image.fromarray(arr).resize((size, size), Image.Resampling.BILINEAR, box=box))


@pytest.mark.parametrize(("h", "w", "size"), [(375, 500, 224), (500, 375, 224), (64, 48, 100)])
def test_resize_matches_pillow_antialiased_bilinear(h: int, w: int, size: int) -> None:
    rng = np.random.default_rng(0)
    smooth = _image(h, w).astype(np.int16) + rng.integers(-4, 5, (h, w, 3))
    arr = np.clip(smooth, 0, 255).astype(np.uint8)
    out = resize_center_crop(arr, size)
    ref = _pillow_reference(arr, size)
    assert out.shape == (size, size, 3) and out.dtype == np.uint8 and out.flags.c_contiguous
    assert np.abs(out.astype(int) - ref).mean() < 1.5  # same filter, rounding differs


def test_resize_keeps_dtype_and_channels() -> None:
    gray = np.tile(np.arange(90, dtype=np.uint16)[None, :] * 500, (60, 1))
    out = resize_center_crop(gray, 30)
    assert out.shape == (30, 30) and out.dtype == np.uint16
    assert 0 < out.min() < out.max() <= 44500
    ro = _image(40, 40)
    ro.flags.writeable = False  # a read-only view straight from a memory-mapped shard
    assert resize_center_crop(ro, 20).shape == (20, 20, 3)


def test_resize_shorter_than_crop_is_refused() -> None:
    with pytest.raises(ValueError, match="resize=200 needs a size and must be >= size=224"):
        ImageDecode(size=224, resize=200)


def test_float_chw_normalised() -> None:
    arr = np.full((32, 32, 3), 255, np.uint8)
    out = ImageDecode(size=16, dtype="float32", layout="CHW", mean=(0.5,) * 3, std=(0.5,) * 3)
    got = out.image(arr)
    assert got.shape == (3, 16, 16) and got.dtype == np.float32
    assert np.allclose(got, 1.0)


def test_bad_options_named() -> None:
    with pytest.raises(ValueError, match="dtype must be"):
        ImageDecode(dtype="int8")
    with pytest.raises(GpusparkError, match="decode='magic' is not supported"):
        make_decoder("magic")


def test_dataset_decodes_encoded_images(tmp_path: Path) -> None:
    arr = _image()
    with ShardWriter(tmp_path / "img") as writer:
        for label in range(6):
            writer.write({"image": fmt.EncodedImage(_encode(arr, "JPEG"), "jpeg"), "label": label})
    ds = ShardDataset(tmp_path / "img", decode=ImageDecode(size=32), world=World(0, 1))
    batch = next(iter(ds.loader(3)))
    assert tuple(batch["image"].shape) == (3, 32, 32, 3)
    assert str(batch["image"].dtype) == "torch.uint8"
    assert set(batch) == {"image", "label"}  # image/format consumed by decoding
    raw = next(iter(ShardDataset(tmp_path / "img", decode="raw", world=World(0, 1))))
    assert isinstance(raw["image"], bytes) and raw["image/format"] == "jpeg"


_SCALARS = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=8),
    st.binary(max_size=8),
)
_ARRAYS = st.sampled_from(
    ["uint8", "int16", "uint16", "int32", "int64", "float32", "bool"]
).flatmap(
    lambda dt: st.lists(st.integers(0, 100), min_size=0, max_size=6).map(
        lambda xs: np.array(xs, dtype=dt).reshape(-1, 1) if xs else np.zeros((0, 2), dtype=dt)
    )
)
_VALUES = st.one_of(
    _SCALARS,
    _ARRAYS,
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
    st.lists(st.floats(allow_nan=False, width=32), max_size=4),
)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), _VALUES, max_size=6))
def test_zero_copy_decoder_matches_protobuf(sample: dict) -> None:
    payload = fmt.encode_example(sample)
    schema = fmt.infer_schema(sample)
    expected = fmt.decode_example(payload, schema)
    got = decode_example_views(memoryview(payload), schema)
    assert got.keys() == expected.keys()
    for key, want in expected.items():
        if isinstance(want, np.ndarray):
            assert got[key].dtype == want.dtype and got[key].shape == want.shape
            assert np.array_equal(got[key], want)
        else:
            assert got[key] == want and type(got[key]) is type(want)


def test_zero_copy_decoder_returns_views() -> None:
    payload = bytearray(fmt.encode_example({"v": np.arange(1000, dtype=np.int16)}))
    arr = decode_example_views(memoryview(payload))["v"]
    assert np.shares_memory(arr, np.frombuffer(payload, np.uint8))
