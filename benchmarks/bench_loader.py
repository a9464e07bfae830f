"""Loader throughput: gpuspark shards against loose JPEGs, tfrecord, webdataset and the limits.

Every image pipeline delivers the same thing - batches of 224x224x3 uint8 tensors (resize of
the shorter side to 224 + center crop where the stored form needs it) plus labels:

1. loose JPEG files, ImageFolder-style map Dataset, Pillow decode, torch DataLoader (baseline)
2. gpuspark shards holding the same JPEG bytes (``ShardDataset.loader``: simplejpeg decode,
   resize + crop with torch's SIMD antialiased bilinear kernel)
3. gpuspark shards holding the images pre-decoded to 224x224x3 uint8 (``prep --predecode``)
4. a bare decode + resize loop over the JPEG bytes in memory, same decoder and resize as (2):
   the limit of (2)
5. the ``tfrecord`` PyPI reader over the shards of (2) (bytes -> Pillow, as its README shows)
   and ``webdataset`` over tar shards of the same JPEGs (``.decode("rgb8")``)

(1) and (5) resize with Pillow, as their users do (torchvision's Resize + CenterCrop on a PIL
image is a Pillow resize); the same antialiased bilinear filter as (2). ``step_ms`` in the
JSON times decode and resize alone, so the table can be split into the two.
6. 3D int16 volumes (64^3, 128^3) from gpuspark shards, MB/s, against ``numpy.fromfile`` of
   the same bytes (one raw file per volume) through the same DataLoader batching: the limit

Each pipeline runs with 0 and 2 workers; runs alternate between pipelines; the table shows
medians of ``--runs`` runs (5; 3 with ``--quick``). Data are generated deterministically
under ``benchmarks/data/loader/`` (git-ignored) and reused. All data sit in the page cache
after the warm-up run, so these are CPU-bound numbers, not disk numbers.

    python benchmarks/bench_loader.py            # 5,000 images of 500x375, q90
    python benchmarks/bench_loader.py --quick    # 128 images, < 60 s on 2 cores
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results

DATA = Path(__file__).resolve().parent / "data" / "loader"
SIZE = 224
BATCH = 64
WORKERS = (0, 2)
CLASSES = 10


# --------------------------------------------------------------------------- data


_NOISE: list[np.ndarray] = []


def _noise(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Sensor noise (sigma 6): one of 8 fixed fields, rolled by a random offset."""
    if not _NOISE:
        pool = np.random.default_rng(12345)
        _NOISE.extend(pool.normal(0, 6, (h, w, 3)).astype(np.int16) for _ in range(8))
    field = _NOISE[int(rng.integers(len(_NOISE)))]
    return np.roll(field, (int(rng.integers(h)), int(rng.integers(w))), axis=(0, 1))


def natural_image(i: int, h: int = 375, w: int = 500) -> np.ndarray:
    """A deterministic photo-like image: smooth colour field, soft shapes, sensor noise."""
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(i)
    corners = rng.integers(0, 256, (2, 2, 3), dtype=np.uint8)
    img = Image.fromarray(corners).resize((w, h), Image.Resampling.BILINEAR)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(4, 10))):
        x0, y0 = rng.integers(-50, w), rng.integers(-50, h)
        x1, y1 = x0 + rng.integers(30, 250), y0 + rng.integers(30, 200)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape((int(x0), int(y0), int(x1), int(y1)), fill=colour)
    img = img.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(1, 3))))
    arr = np.asarray(img).astype(np.int16) + _noise(rng, h, w)
    return np.clip(arr, 0, 255).astype(np.uint8)


def _jpeg(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _stamp_ok(path: Path, stamp: dict[str, Any]) -> bool:
    marker = path / ".stamp.json"
    return marker.exists() and json.loads(marker.read_text()) == stamp


def _set_stamp(path: Path, stamp: dict[str, Any]) -> None:
    (path / ".stamp.json").write_text(json.dumps(stamp))


def make_jpegs(root: Path, n: int) -> list[Path]:
    """``root/class_k/iiiii.jpg`` for ``i < n`` (label ``i % CLASSES``)."""
    files = [root / f"class_{i % CLASSES}" / f"{i:05d}.jpg" for i in range(n)]
    stamp = {"n": n, "kind": "jpeg500x375q90", "v": 2}
    if _stamp_ok(root, stamp):
        return files
    import multiprocessing

    for k in range(CLASSES):
        (root / f"class_{k}").mkdir(parents=True, exist_ok=True)
    todo = [p for p in files if not p.exists()]
    with multiprocessing.get_context("fork").Pool(os.cpu_count() or 1) as pool:
        pool.map(_write_jpeg, todo, chunksize=16)
    _set_stamp(root, stamp)
    return files


def _write_jpeg(path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(_jpeg(natural_image(int(path.stem))))
    os.replace(tmp, path)


def _label(path: Path) -> int:
    return int(path.parent.name.split("_")[1])


def make_shards(root: Path, files: list[Path], predecode: bool) -> Path:
    """gpuspark dataset of the JPEGs: encoded bytes, or pre-decoded 224x224x3 uint8."""
    from gpuspark.data.format import EncodedImage
    from gpuspark.data.load import ImageDecode
    from gpuspark.data.write import ShardWriter

    stamp = {"n": len(files), "predecode": predecode, "v": 1}
    if root.exists() and _stamp_ok(root, stamp):
        return root
    decode = ImageDecode(size=SIZE)
    with ShardWriter(root, target_shard_bytes=32 << 20, overwrite=True) as writer:
        for path in files:
            data = path.read_bytes()
            image = decode.image(data, "jpeg") if predecode else EncodedImage(data, "jpeg")
            writer.write({"image": image, "label": _label(path)})
    _set_stamp(root, stamp)
    return root


def make_tars(root: Path, files: list[Path], shards: int) -> list[str]:
    """webdataset tar shards of the same JPEG bytes (``.jpg`` + ``.cls``)."""
    stamp = {"n": len(files), "shards": shards, "v": 1}
    urls = [str(root / f"shard-{s:04d}.tar") for s in range(shards)]
    if _stamp_ok(root, stamp) if root.exists() else False:
        return urls
    root.mkdir(parents=True, exist_ok=True)
    for s, url in enumerate(urls):
        with tarfile.open(url, "w") as tar:
            for path in files[s::shards]:
                for ext, data in (("jpg", path.read_bytes()), ("cls", str(_label(path)).encode())):
                    info = tarfile.TarInfo(f"{path.stem}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    _set_stamp(root, stamp)
    return urls


def make_volumes(root: Path, side: int, n: int) -> tuple[Path, list[Path]]:
    """``n`` int16 volumes ``side^3``: as a gpuspark dataset and as raw files."""
    from gpuspark.data.write import ShardWriter

    stamp = {"n": n, "side": side, "v": 1}
    ds, raw = root / "shards", root / "raw"
    files = [raw / f"{i:05d}.raw" for i in range(n)]
    if _stamp_ok(root, stamp) if root.exists() else False:
        return ds, files
    raw.mkdir(parents=True, exist_ok=True)
    with ShardWriter(ds, target_shard_bytes=64 << 20, overwrite=True) as writer:
        for i, path in enumerate(files):
            rng = np.random.default_rng(i)
            vol = rng.integers(-1024, 3000, (side,) * 3, dtype=np.int16)
            vol.tofile(path)
            writer.write({"volume": vol, "label": i % 2})
    _set_stamp(root, stamp)
    return ds, files


# --------------------------------------------------------------------------- pipelines


def _crop(arr: np.ndarray) -> np.ndarray:
    """gpuspark's resize + center crop (torch SIMD kernel), as in pipeline (2)."""
    from gpuspark.data.load import resize_center_crop

    return resize_center_crop(arr, SIZE)


def _pil_crop(arr: np.ndarray) -> np.ndarray:
    """Resize + center crop with Pillow, as the baselines' users write it (what torchvision's
    ``Resize(224)`` + ``CenterCrop(224)`` do to a PIL image), in one ``resize`` of the crop
    box: antialiased bilinear, the same filter as ``_crop``."""
    from PIL import Image

    h, w = arr.shape[:2]
    src = min(h, w)
    left, top = (w - src) / 2, (h - src) / 2
    out = Image.fromarray(arr).resize(
        (SIZE, SIZE), Image.Resampling.BILINEAR, box=(left, top, left + src, top + src)
    )
    return np.asarray(out)


class LooseJpegs:
    """ImageFolder-style map dataset: one file per image, Pillow decode."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        import torch
        from PIL import Image

        path = self.files[i]
        with Image.open(path) as img:
            arr = np.asarray(img.convert("RGB"))
        return torch.from_numpy(_pil_crop(arr)), _label(path)


class RawVolumes:
    """Map dataset over raw volume files read with ``numpy.fromfile``."""

    def __init__(self, files: list[Path], side: int) -> None:
        self.files, self.side = files, side

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> Any:
        import torch

        arr = np.fromfile(self.files[i], dtype=np.int16).reshape((self.side,) * 3)
        return torch.from_numpy(arr)


def _drain(batches: Any, key: Any = 0) -> int:
    n = 0
    for batch in batches:
        images = batch[key]
        if n == 0:
            assert tuple(images.shape[1:]) == (SIZE, SIZE, 3), images.shape
            assert str(images.dtype) == "torch.uint8", images.dtype
        n += len(images)
    return n


def _dataloader(dataset: Any, workers: int, shuffle: bool = False) -> Any:
    from torch.utils.data import DataLoader

    prefetch = 2 if workers else None
    return DataLoader(
        dataset, batch_size=BATCH, num_workers=workers, shuffle=shuffle, prefetch_factor=prefetch
    )


def run_loose(files: list[Path], workers: int) -> int:
    return _drain(_dataloader(LooseJpegs(files), workers, shuffle=True))


def run_shards(path: Path, workers: int, epoch: int) -> int:
    from gpuspark.data.load import ImageDecode, ShardDataset, World

    ds = ShardDataset(path, decode=ImageDecode(size=SIZE), world=World(0, 1), seed=epoch)
    return _drain(ds.loader(BATCH, num_workers=workers, pin_memory=False), "image")


_BYTES: list[bytes] = []


def _decode_range(bounds: tuple[int, int]) -> int:
    from gpuspark.data.load import decode_image

    for data in _BYTES[bounds[0] : bounds[1]]:
        out = _crop(decode_image(data, "jpeg"))
        assert out.shape == (SIZE, SIZE, 3)
    return bounds[1] - bounds[0]


def run_bare(workers: int) -> int:
    n = len(_BYTES)
    if workers == 0:
        return _decode_range((0, n))
    import multiprocessing

    step = -(-n // workers)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return sum(pool.map(_decode_range, [(i, min(i + step, n)) for i in range(0, n, step)]))


def _tfrecord_decode(features: dict[str, Any]) -> tuple[Any, int]:
    import torch
    from PIL import Image

    with Image.open(io.BytesIO(bytes(features["image/encoded"]))) as img:
        arr = np.asarray(img.convert("RGB"))
    return torch.from_numpy(_pil_crop(arr)), int(features["label"][0])


def run_tfrecord(path: Path, workers: int) -> int:
    from tfrecord.torch.dataset import TFRecordDataset
    from torch.utils.data import ChainDataset

    from gpuspark.data.format import load_manifest

    manifest = load_manifest(path)
    parts = [
        TFRecordDataset(
            str(path / s.path),
            str(path / s.index),
            {"image/encoded": "byte", "label": "int"},
            transform=_tfrecord_decode,
        )
        for s in manifest.shards
    ]
    return _drain(_dataloader(ChainDataset(parts), workers))


def _wds_sample(sample: tuple[np.ndarray, int]) -> tuple[Any, int]:
    import torch

    return torch.from_numpy(_pil_crop(sample[0])), sample[1]


def run_webdataset(urls: list[str], workers: int) -> int:
    import webdataset as wds

    dataset = (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        .decode("rgb8")
        .to_tuple("jpg", "cls")
        .map(_wds_sample)
    )
    return _drain(_dataloader(dataset, workers))


def run_volume_shards(path: Path, workers: int, epoch: int) -> float:
    from gpuspark.data.load import ShardDataset, World

    ds = ShardDataset(path, decode="raw", world=World(0, 1), seed=epoch)
    return _count(ds.loader(4, num_workers=workers, pin_memory=False), "volume")


def run_volume_raw(files: list[Path], side: int, workers: int) -> float:
    from torch.utils.data import DataLoader

    loader = DataLoader(
        RawVolumes(files, side),
        batch_size=4,
        num_workers=workers,
        shuffle=True,
        prefetch_factor=2 if workers else None,
    )
    return _count(loader, None)


def _count(batches: Any, key: str | None) -> float:
    """Megabytes (1e6) of volume data delivered."""
    n = 0
    for batch in batches:
        vols = batch if key is None else batch[key]
        assert str(vols.dtype) == "torch.int16" and vols.ndim == 4
        n += vols.numel() * 2
    return n / 1e6


# --------------------------------------------------------------------------- driver


def timed(fn: Callable[[], float]) -> tuple[float, float]:
    t0 = time.perf_counter()
    amount = fn()
    return time.perf_counter() - t0, amount


def measure_steps(sample: bytes, repeat: int) -> dict[str, float]:
    """Median ms of each step alone, alternating: JPEG decode with simplejpeg and Pillow,
    resize + center crop with gpuspark's kernel (``_crop``) and Pillow (``_pil_crop``)."""
    from gpuspark.data.load import decode_image

    image = decode_image(sample, "jpeg")
    steps: dict[str, Callable[[], Any]] = {
        "decode_simplejpeg": lambda: decode_image(sample, "jpeg", "simplejpeg"),
        "decode_pillow": lambda: decode_image(sample, "jpeg", "pillow"),
        "resize_gpuspark": lambda: _crop(image),
        "resize_pillow": lambda: _pil_crop(image),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeat):
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(spent) * 1e3 for name, spent in times.items()}


def main(argv: list[str] | None = None) -> int:
    import warnings

    # Pillow hands out read-only arrays; batching copies them anyway (torch.stack / collate).
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    import torch

    # One intra-op thread, as in DataLoader workers: on a busy machine torch.stack with
    # several OpenMP threads was measured 50x slower, which would swamp the comparison.
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs, < 60 s")
    parser.add_argument("--images", type=int, default=None, help="number of JPEGs")
    parser.add_argument("--runs", type=int, default=None, help="runs per pipeline (median)")
    parser.add_argument(
        "--report", action="store_true", help="print the table of the last saved results"
    )
    args = parser.parse_args(argv)
    if args.report:
        return _report(args.quick)
    n = args.images or (128 if args.quick else 5000)
    runs = args.runs or (3 if args.quick else 5)
    vols = {64: 24, 128: 4} if args.quick else {64: 400, 128: 50}

    t_setup = time.perf_counter()
    files = make_jpegs(DATA / f"jpeg-{n}", n)
    encoded = make_shards(DATA / f"shards-jpeg-{n}", files, predecode=False)
    predecoded = make_shards(DATA / f"shards-predecoded-{n}", files, predecode=True)
    from gpuspark.data.format import load_manifest

    tars = make_tars(DATA / f"wds-{n}", files, len(load_manifest(encoded).shards))
    volumes = {s: make_volumes(DATA / f"vol{s}-{c}", s, c) for s, c in vols.items()}
    _BYTES.extend(p.read_bytes() for p in files)
    setup_s = time.perf_counter() - t_setup

    pipelines: dict[str, Callable[[int, int], float]] = {
        "1 loose JPEG + Pillow (DataLoader)": lambda w, e: run_loose(files, w),
        "2 gpuspark shards, JPEG": lambda w, e: run_shards(encoded, w, e),
        "3 gpuspark shards, pre-decoded": lambda w, e: run_shards(predecoded, w, e),
        "4 bare decode loop (limit of 2)": lambda w, e: run_bare(w),
        "5a tfrecord reader + Pillow": lambda w, e: run_tfrecord(encoded, w),
        "5b webdataset rgb8": lambda w, e: run_webdataset(tars, w),
    }
    for side, (ds, raw) in volumes.items():
        pipelines[f"6 gpuspark shards, int16 {side}^3"] = lambda w, e, ds=ds: run_volume_shards(
            ds, w, e
        )
        pipelines[f"6 numpy.fromfile {side}^3 (limit)"] = lambda w, e, raw=raw, side=side: (
            run_volume_raw(raw, side, w)
        )

    results: dict[str, dict[int, list[float]]] = {k: {w: [] for w in WORKERS} for k in pipelines}
    if args.quick:  # warm-up pass (page cache, imports); full runs rely on the median
        for fn in pipelines.values():
            fn(0, 0)
    steps = measure_steps(_BYTES[0], 50)
    meta = {
        "quick": args.quick,
        "images": n,
        "image_size": [500, 375],
        "jpeg_quality": 90,
        "batch_size": BATCH,
        "runs": runs,
        "setup_s": setup_s,
        "volumes": {str(s): c for s, c in vols.items()},
        "units": "samples/s for images, MB/s (1e6 bytes) for volumes",
        "torch_threads": 1,
        "step_ms": steps,
    }
    for run in range(runs):
        for name, fn in pipelines.items():
            for workers in WORKERS:
                seconds, amount = timed(lambda fn=fn, w=workers, r=run: fn(w, r + 1))
                results[name][workers].append(amount / seconds)
        print(f"run {run + 1}/{runs} done", file=sys.stderr, flush=True)
        _save(meta, results, list(vols), run + 1)  # partial results survive an interruption
    medians, ratios = _save(meta, results, list(vols), runs)
    _print_table(medians, ratios, n, runs, steps)
    return 0


def _save(
    meta: dict[str, Any], results: dict[str, dict[int, list[float]]], sides: list[int], done: int
) -> tuple[dict[str, dict[int, float]], dict[str, dict[str, float]]]:
    medians = {k: {w: statistics.median(v) for w, v in by.items()} for k, by in results.items()}
    ratios = _ratios(medians, sides)
    write_results(
        "bench_loader" + ("_quick" if meta["quick"] else ""),
        {
            **meta,
            "runs_completed": done,
            "median": {k: {str(w): v for w, v in by.items()} for k, by in medians.items()},
            "all_runs": {k: {str(w): v for w, v in by.items()} for k, by in results.items()},
            "ratios": ratios,
        },
    )
    return medians, ratios


def _report(quick: bool) -> int:
    """Print the table from ``benchmarks/results/bench_loader[_quick].json`` (also after an
    interrupted run: medians of the runs completed)."""
    from _common import RESULTS_DIR

    data = json.loads((RESULTS_DIR / f"bench_loader{'_quick' if quick else ''}.json").read_text())
    medians = {k: {int(w): v for w, v in by.items()} for k, by in data["median"].items()}
    ratios = data["ratios"]
    _print_table(medians, ratios, data["images"], data["runs_completed"], data["step_ms"])
    return 0


def _ratios(medians: dict[str, dict[int, float]], sides: list[int]) -> dict[str, dict[str, float]]:
    m = medians
    out: dict[str, dict[str, float]] = {}
    for w in WORKERS:
        best5 = max(m["5a tfrecord reader + Pillow"][w], m["5b webdataset rgb8"][w])
        r = {
            "(3)/(1) target>=20": m["3 gpuspark shards, pre-decoded"][w]
            / m["1 loose JPEG + Pillow (DataLoader)"][w],
            "(2)/(4) target>=0.9": m["2 gpuspark shards, JPEG"][w]
            / m["4 bare decode loop (limit of 2)"][w],
            "(2)/(5a) target>=1.5": m["2 gpuspark shards, JPEG"][w]
            / m["5a tfrecord reader + Pillow"][w],
            "(2)/(5b) target>=1.5": m["2 gpuspark shards, JPEG"][w] / m["5b webdataset rgb8"][w],
            "(2)/best(5) target>=1.5": m["2 gpuspark shards, JPEG"][w] / best5,
        }
        for side in sides:
            r[f"(6) {side}^3 / fromfile target>=0.8"] = (
                m[f"6 gpuspark shards, int16 {side}^3"][w]
                / m[f"6 numpy.fromfile {side}^3 (limit)"][w]
            )
        out[f"{w} workers"] = r
    return out


def _print_table(
    medians: dict[str, dict[int, float]],
    ratios: dict[str, dict[str, float]],
    n: int,
    runs: int,
    steps: dict[str, float],
) -> None:
    print(
        f"\nbench_loader: {n} JPEGs 500x375 q90 -> 224x224x3 uint8, batch {BATCH}, "
        f"median of {runs} runs, cpu_count={os.cpu_count()}"
    )
    head = f"{'pipeline':<38}" + "".join(f"{f'{w} workers':>14}" for w in WORKERS)
    print(head)
    print("-" * len(head))
    for name, by in medians.items():
        unit = "MB/s" if name.startswith("6") else "im/s"
        cells = "".join(f"{by[w]:>9.1f} {unit:<4}" for w in WORKERS)
        print(f"{name:<38}{cells}")
    print("-" * len(head))
    keys = list(next(iter(ratios.values())))
    for key in keys:
        print(f"{key:<38}" + "".join(f"{ratios[f'{w} workers'][key]:>13.2f}x" for w in WORKERS))
    print(
        f"one 500x375 image alone, median ms: decode simplejpeg {steps['decode_simplejpeg']:.2f}"
        f" / Pillow {steps['decode_pillow']:.2f}; resize+crop gpuspark "
        f"{steps['resize_gpuspark']:.2f} / Pillow {steps['resize_pillow']:.2f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
