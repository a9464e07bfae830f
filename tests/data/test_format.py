"""Tests of the shard format: framing, Example codec, index, manifest, verify, interop."""

from __future__ import annotations

import io
import json
import os
import random
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuspark.data import format as fmt
from gpuspark.data.format import CorruptRecordError, EncodedImage, NotADatasetError
from gpuspark.data.write import ShardWriter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tfrecord"
TF_FILE = FIXTURES / "tf_written.tfrecord"


# --------------------------------------------------------------------------- CRC and framing


def test_masked_crc32c_known_values():
    # CRC-32C check value of "123456789" is 0xE3069283 (RFC 3720); masking per TensorFlow.
    crc = 0xE3069283
    expected = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert fmt.masked_crc32c(b"123456789") == expected
    assert fmt.masked_crc32c(memoryview(b"123456789")) == expected
    assert fmt.masked_crc32c(b"") == 0xA282EAD8


def _crc32c_reference(data: bytes) -> int:
    """CRC-32C bit by bit: Castagnoli's polynomial, reflected (0x82F63B78), as iSCSI (RFC 3720)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


@given(st.binary(max_size=300))
@settings(max_examples=60, deadline=None)
def test_masked_crc32c_matches_the_reference_on_any_buffer(data: bytes) -> None:
    expected = _masked(_crc32c_reference(data))
    padded = bytearray(b"x" + data + b"y")
    assert fmt.masked_crc32c(data) == expected
    assert fmt.masked_crc32c(bytearray(data)) == expected
    assert fmt.masked_crc32c(memoryview(padded)[1 : 1 + len(data)]) == expected  # a view, no copy


def test_frame_layout_and_parse():
    rec = fmt.frame(b"hello")
    assert len(rec) == 8 + 4 + 5 + 4
    assert struct.unpack("<Q", rec[:8])[0] == 5
    assert struct.unpack("<I", rec[8:12])[0] == fmt.masked_crc32c(rec[:8])
    assert rec[12:17] == b"hello"
    assert struct.unpack("<I", rec[17:])[0] == fmt.masked_crc32c(b"hello")
    payload = fmt.parse_framed(rec)
    assert isinstance(payload, memoryview) and payload.tobytes() == b"hello"


def test_parse_framed_rejects_wrong_length_entry():
    rec = fmt.frame(b"hello")
    with pytest.raises(CorruptRecordError, match="does not match"):
        fmt.parse_framed(rec + b"x", path="s.tfrecord", record=3, offset=40)
    with pytest.raises(CorruptRecordError) as info:
        fmt.parse_framed(rec[:10], path="s.tfrecord", record=3, offset=40)
    assert (info.value.path, info.value.record, info.value.offset) == ("s.tfrecord", 3, 40)


def _records_file(tmp_path: Path, payloads: list[bytes]) -> Path:
    path = tmp_path / "x.tfrecord"
    path.write_bytes(b"".join(fmt.frame(p) for p in payloads))
    return path


def test_iter_records_and_read_record_with_index(tmp_path: Path):
    payloads = [os.urandom(n) for n in (0, 1, 100, 5000)]
    path = _records_file(tmp_path, payloads)
    assert list(fmt.iter_records(path)) == payloads
    with open(path, "rb") as f:
        assert list(fmt.iter_records(f)) == payloads
    entries, off = [], 0
    for p in payloads:
        entries.append((off, len(p) + 16))
        off += len(p) + 16
    fmt.write_index(str(path) + ".idx", entries)
    index = fmt.read_index(str(path) + ".idx")
    assert index.dtype == np.int64 and index.shape == (4, 2)
    assert index.tolist() == [list(e) for e in entries]
    with open(path, "rb") as f:
        for i in (3, 0, 2, 1):
            assert fmt.read_record(f, *index[i], record=i) == payloads[i]
    assert fmt.read_record(path, *index[2]) == payloads[2]
    assert fmt.read_index(io.BytesIO(b"")).shape == (0, 2)


def test_truncation_raises_with_file_record_offset(tmp_path: Path):
    path = _records_file(tmp_path, [b"a" * 10, b"b" * 10])
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    with pytest.raises(CorruptRecordError) as info:
        list(fmt.iter_records(path))
    assert info.value.record == 1 and info.value.offset == 26
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------- Example codec


def test_encode_decode_all_value_kinds():
    sample = {
        "i": 7,
        "neg": -(2**63),
        "f": 0.5,
        "b": b"\x00\xff",
        "s": "héllo",
        "li": [1, 2, 3],
        "lf": [0.25, -1.0],
        "lb": [b"a", b"b"],
        "ls": ["x", "yz"],
        "one": [5],
        "empty": [],
        "img": EncodedImage(b"\xff\xd8jpeg", "jpeg"),
        "arr": np.arange(12, dtype=np.int16).reshape(3, 4),
        "scalar": np.float64(2.5),
    }
    payload = fmt.encode_example(sample)
    schema = fmt.infer_schema(sample)
    out = fmt.decode_example(payload, schema)
    for key in ("i", "neg", "f", "b", "s", "li", "lf", "lb", "ls", "one", "empty"):
        assert out[key] == sample[key] and type(out[key]) is type(sample[key]), key
    assert out["img"] == b"\xff\xd8jpeg" and out["img/format"] == "jpeg"
    assert out["arr"].dtype == np.int16 and np.array_equal(out["arr"], sample["arr"])
    assert out["scalar"].shape == () and out["scalar"] == 2.5
    natural = fmt.decode_example(payload)  # without a schema: TensorFlow's natural reading
    assert natural["s"] == "héllo".encode() and natural["one"] == 5


def test_decoded_arrays_are_views_without_copy():
    arr = np.random.default_rng(0).random((64, 64)).astype(np.float32)
    out = fmt.decode_example(fmt.encode_example({"a": arr}))["a"]
    assert not out.flags.writeable and not out.flags.owndata  # np.frombuffer view
    assert np.array_equal(out, arr)


def test_big_endian_and_non_contiguous_arrays():
    arr = np.arange(20, dtype=">i4").reshape(4, 5)[:, ::2]
    out = fmt.decode_example(fmt.encode_example({"a": arr}))["a"]
    assert out.dtype == np.dtype("<i4") and np.array_equal(out, arr)


@pytest.mark.parametrize(
    "sample, match",
    [
        ({"x/data": b""}, "reserved suffix"),
        ({"x": {"nested": 1}}, "cannot be stored"),
        ({"x": [1, "a"]}, "list items"),
        ({"x": 2**64}, "int64"),
        ({"x": np.array(["a"])}, "dtype"),
        ({"": 1}, "non-empty"),
    ],
)
def test_encode_rejects_unsupported(sample, match):
    with pytest.raises(fmt.SampleError, match=match):
        fmt.encode_example(sample)


DTYPES = ["uint8", "int16", "uint16", "int32", "int64", "float16", "float32", "float64", "bool"]
_keys = st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=8)


@st.composite
def _arrays(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=3))
    raw = draw(st.binary(min_size=int(np.prod(shape)) * dtype.itemsize))
    return np.frombuffer(raw[: int(np.prod(shape)) * dtype.itemsize], dtype=dtype).reshape(shape)


_int64 = st.integers(-(2**63), 2**63 - 1)
_float32 = st.floats(width=32, allow_nan=False)
_values = st.one_of(
    st.binary(max_size=50),
    st.text(max_size=20),
    _int64,
    _float32,
    st.lists(_int64, max_size=5),
    st.lists(_float32, min_size=1, max_size=5),
    st.lists(st.binary(max_size=10), min_size=1, max_size=5),
    st.lists(st.text(max_size=5), min_size=1, max_size=5),
    _arrays(),
)
_samples = st.dictionaries(_keys, _values, max_size=6)


def _assert_same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for key, v in a.items():
        if isinstance(v, np.ndarray):
            assert b[key].dtype == v.dtype and b[key].shape == v.shape
            assert b[key].tobytes() == v.tobytes()  # bitwise: NaNs and -0.0 included
        else:
            assert type(b[key]) is type(v) and b[key] == v, key


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sample=_samples)
def test_property_roundtrip_codec(sample):
    out = fmt.decode_example(fmt.encode_example(sample), fmt.infer_schema(sample))
    _assert_same(sample, out)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(samples=st.lists(_samples, min_size=1, max_size=8), codec=st.sampled_from([None, "zstd"]))
def test_property_roundtrip_writer_reader(tmp_path_factory, samples, codec):
    """Any samples round-trip exactly through ShardWriter + manifest + reader."""
    path = tmp_path_factory.mktemp("rt") / "ds"
    # Keys shared between samples must hold one kind: give each sample's keys a prefix.
    samples = [{f"{i}:{k}": v for k, v in s.items()} for i, s in enumerate(samples)]
    with ShardWriter(path, target_shard_bytes=300, compression=codec) as w:
        for s in samples:
            w.write(s)
    m = fmt.load_manifest(path)
    got = [
        fmt.decode_example(fmt.decompress(p, m.compression), m.schema)
        for sh in m.shards
        for p in fmt.iter_records(path / sh.path)
    ]
    assert len(got) == len(samples) == m.total_records
    for s, g in zip(samples, got, strict=True):
        _assert_same(s, g)
    assert fmt.verify_dataset(path) == []


def test_compression_roundtrip():
    payload = b"abc" * 1000
    packed = fmt.compress(payload, "zstd")
    assert len(packed) < len(payload) and fmt.decompress(packed, "zstd") == payload
    assert fmt.compress(payload, None) == payload
    with pytest.raises(fmt.GpusparkError, match="not supported"):
        fmt.compress(payload, "lz4")


# --------------------------------------------------------------------------- interop


def test_reads_file_written_by_tensorflow():
    expected = json.loads((FIXTURES / "tf_written.expected.json").read_text())["records"]
    records = [fmt.decode_example(p) for p in fmt.iter_records(TF_FILE)]
    assert len(records) == len(expected) == 5
    for got, exp in zip(records, expected, strict=True):
        assert got["label"] == exp["label"] and got["ids"] == exp["ids"]
        assert got["score"] == pytest.approx(exp["score"])
        assert got["weights"] == pytest.approx(exp["weights"])
        assert got["name"] == exp["name"].encode()
        assert [t.hex() for t in got["tags"]] == exp["tags_hex"]
        assert got["empty"] == []
        assert got["image"].dtype == np.float32 and got["image"].tolist() == exp["image"]
        assert got["volume"].dtype == np.int16 and got["volume"].tolist() == exp["volume"]
        assert got["photo"].hex() == exp["photo_hex"] and got["photo/format"] == "jpeg"


def test_tensorflow_file_random_access_via_index(tmp_path: Path):
    offsets, off = [], 0
    for p in fmt.iter_records(TF_FILE):
        offsets.append((off, len(p) + 16))
        off += len(p) + 16
    assert off == TF_FILE.stat().st_size
    for i in (4, 0, 2):
        payload = fmt.read_record(TF_FILE, *offsets[i])
        assert fmt.decode_example(payload)["label"] == i


def test_gpuspark_files_read_by_tfrecord_package(tmp_path: Path):
    from tfrecord.reader import tfrecord_loader

    arr = np.arange(6, dtype=np.float32)
    with ShardWriter(tmp_path / "ds") as w:
        for i in range(10):
            w.write({"label": i, "name": f"n{i}", "weights": [0.5, float(i)], "x": arr * i})
    shard = fmt.load_manifest(tmp_path / "ds").shards[0]
    path = str(tmp_path / "ds" / shard.path)
    rows = list(tfrecord_loader(path, None, description=None))
    assert [int(r["label"][0]) for r in rows] == list(range(10))
    assert bytes(rows[3]["name"]) == b"n3"
    assert rows[3]["weights"].tolist() == [0.5, 3.0]
    assert np.frombuffer(bytes(rows[4]["x/data"]), np.float32).tolist() == (arr * 4).tolist()
    assert rows[4]["x/shape"].tolist() == [6] and bytes(rows[4]["x/dtype"]) == b"float32"
    # the tfrecord package's index-based reading uses our .idx (DALI layout)
    indexed = list(tfrecord_loader(path, path + ".idx", description=None))  # random start
    assert sorted(int(r["label"][0]) for r in indexed) == list(range(10))
    halves = [tfrecord_loader(path, path + ".idx", description=None, shard=(k, 2)) for k in (0, 1)]
    labels = [sorted(int(r["label"][0]) for r in h) for h in halves]
    assert labels[0] + labels[1] == list(range(10)) and labels[0] and labels[1]


# --------------------------------------------------------------------------- manifest


def test_manifest_json_roundtrip_and_load(tmp_path: Path):
    m = fmt.Manifest(
        schema={"a": {"kind": "int", "count": 1}},
        shards=[fmt.ShardInfo("s.tfrecord", 1, 20, "xxh3_128:00", "s.tfrecord.idx")],
        total_records=1,
        splits={"train": ["s.tfrecord"]},
        extra={"labels": ["cat", "dog"]},
    )
    assert fmt.Manifest.from_json(m.to_json()) == m
    fmt.write_manifest(tmp_path, m)
    assert fmt.load_manifest(tmp_path) == m
    assert fmt.load_manifest(tmp_path / fmt.MANIFEST_NAME) == m
    assert fmt.load_manifest(f"file://{tmp_path}") == m
    assert [p.name for p in tmp_path.iterdir()] == [fmt.MANIFEST_NAME]


def test_load_manifest_via_fsspec_memory_url():
    import fsspec

    m = fmt.Manifest(total_records=0)
    with fsspec.open("memory://gpuspark-test/ds/manifest.json", "w") as f:
        f.write(m.to_json())
    assert fmt.load_manifest("memory://gpuspark-test/ds") == m


def test_not_a_dataset(tmp_path: Path):
    with pytest.raises(NotADatasetError, match=r"no manifest\.json"):
        fmt.load_manifest(tmp_path)
    with pytest.raises(NotADatasetError, match="does not exist"):
        fmt.load_manifest(tmp_path / "nope")
    (tmp_path / fmt.MANIFEST_NAME).write_text('{"version": 99}')
    with pytest.raises(NotADatasetError, match="newer"):
        fmt.load_manifest(tmp_path)


# --------------------------------------------------------------------------- verify


def _small_dataset(path: Path, n: int = 6) -> fmt.Manifest:
    with ShardWriter(path, target_shard_bytes=1 << 20) as w:
        for i in range(n):
            w.write({"label": i, "x": np.full(5 + i, i, dtype=np.uint8), "name": f"r{i}"})
    return w.manifest


def _record_at(entries: list[tuple[int, int]], pos: int) -> int:
    return next(i for i, (o, n) in enumerate(entries) if o <= pos < o + n)


def test_verify_reports_every_single_byte_flip(tmp_path: Path):
    m = _small_dataset(tmp_path / "ds")
    shard = tmp_path / "ds" / m.shards[0].path
    good = shard.read_bytes()
    entries = fmt.read_index(str(shard) + ".idx").tolist()
    rng = random.Random(1234)
    # every header/CRC byte of two records plus many random positions
    positions = {o + k for o, n in entries[:2] for k in (*range(12), n - 4, n - 3, n - 2, n - 1)}
    positions |= {rng.randrange(len(good)) for _ in range(150)}
    for pos in sorted(positions):
        bad = bytearray(good)
        bad[pos] ^= 1 << rng.randrange(8)
        shard.write_bytes(bytes(bad))
        problems = fmt.verify_dataset(tmp_path / "ds")
        record_problems = [
            p for p in problems if p.record is not None and p.shard == m.shards[0].path
        ]
        assert record_problems, f"flip at byte {pos} not reported: {problems}"
        assert record_problems[0].record == _record_at(entries, pos), pos
        assert any("hash" in p.message for p in problems)
    shard.write_bytes(good)
    assert fmt.verify_dataset(tmp_path / "ds") == []


def test_verify_reports_truncation_at_any_offset(tmp_path: Path):
    m = _small_dataset(tmp_path / "ds")
    shard = tmp_path / "ds" / m.shards[0].path
    good = shard.read_bytes()
    entries = fmt.read_index(str(shard) + ".idx").tolist()
    for cut in range(0, len(good)):
        shard.write_bytes(good[:cut])
        problems = fmt.verify_dataset(tmp_path / "ds")
        assert problems, f"truncation at {cut} not reported"
        if cut in {o for o, _ in entries}:  # cut on a record boundary: counts and sizes differ
            assert any("size" in p.message for p in problems)
        else:
            assert any(p.record == _record_at(entries, cut) for p in problems), cut


def test_verify_reports_index_and_missing_files(tmp_path: Path):
    m = _small_dataset(tmp_path / "ds")
    idx = tmp_path / "ds" / m.shards[0].index
    lines = idx.read_text().splitlines()
    idx.write_text("\n".join([lines[0], "1 2", *lines[2:]]) + "\n")
    problems = fmt.verify_dataset(tmp_path / "ds")
    assert [p.record for p in problems] == [1] and "index entry" in problems[0].message
    idx.unlink()
    assert "index file is missing" in fmt.verify_dataset(tmp_path / "ds")[0].message
    (tmp_path / "ds" / m.shards[0].path).unlink()
    assert "shard file is missing" in fmt.verify_dataset(tmp_path / "ds")[0].message


def test_inspect_dataset(tmp_path: Path):
    _small_dataset(tmp_path / "ds", n=6)
    info = fmt.inspect_dataset(tmp_path / "ds")
    assert info["shards"] == 1 and info["records"] == 6
    assert info["min_records_per_shard"] == info["max_records_per_shard"] == 6
    assert info["schema"]["x"] == {"kind": "ndarray", "dtype": "uint8", "shape": [None], "count": 6}


def test_cli_inspect_and_verify(tmp_path: Path, capsys):
    from gpuspark.cli.main import main

    m = _small_dataset(tmp_path / "ds")
    assert main(["shards", "inspect", str(tmp_path / "ds"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 6
    assert main(["shards", "inspect", str(tmp_path / "ds")]) == 0
    assert "label" in capsys.readouterr().out
    assert main(["shards", "verify", str(tmp_path / "ds")]) == 0
    assert "ok" in capsys.readouterr().out
    shard = tmp_path / "ds" / m.shards[0].path
    data = bytearray(shard.read_bytes())
    data[int(fmt.read_index(str(shard) + ".idx")[1, 0]) + 20] ^= 0xFF  # inside record 1
    shard.write_bytes(bytes(data))
    assert main(["shards", "verify", str(tmp_path / "ds"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and any(p["record"] == 1 for p in out["problems"])
    assert main(["shards", "verify", str(tmp_path / "ds")]) == 1
    assert "CRC" in capsys.readouterr().out
    assert main(["shards", "verify", str(tmp_path)]) == 1
    assert "not a gpuspark dataset" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"version": 1}', "no 'schema'"),
        ('{"version": 1, "schema": {}, "shards": [], "total_records": 3}', "total_records=3"),
        (
            '{"version": 1, "schema": {}, "shards": [{"path": "a"}], "total_records": 0}',
            "no 'records'",
        ),
        ('{"version": "1", "schema": {}, "shards": [], "total_records": 0}', "version='1'"),
        ("[1, 2]", "expected an object"),
    ],
)
def test_manifest_that_fails_its_schema_is_not_a_dataset(tmp_path, text: str, problem: str) -> None:
    """`shards verify` once printed "ok" for a manifest.json of just {"version":1}."""
    from gpuspark.cli.main import main

    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(NotADatasetError, match=re.escape(problem)):
        fmt.load_manifest(tmp_path)
    assert main(["shards", "verify", str(tmp_path)]) == 1
