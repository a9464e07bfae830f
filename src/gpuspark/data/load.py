"""``ShardDataset``: a PyTorch ``IterableDataset`` over a gpuspark dataset, built for DDP.

How an epoch is laid out (all from the manifest's record counts; no shard is scanned):

1. **Shard order.** With ``shuffle=True`` the shards are permuted with a generator seeded by
   ``(seed, epoch)``. Their records, concatenated in that order, form a sequence of ``N``
   positions.
2. **Window shuffle.** The sequence is cut into consecutive windows of ``shuffle_window``
   positions; each window is permuted with a generator seeded by ``(seed, epoch, window)``.
   Reading stays local (a window spans a few neighbouring shards) and any position can be
   looked up directly, which is what makes exact splits and resume possible.
3. **Exact split.** With ``drop_last=True`` each rank gets ``P = N // world_size`` positions
   (at most ``world_size - 1`` samples dropped, different ones each epoch); with
   ``drop_last=False`` ``P = ceil(N / world_size)`` and the sequence is padded by repeating
   its first samples. Rank ``r`` reads positions ``[r * P, (r + 1) * P)``: every rank yields
   exactly ``P`` samples, and no sample appears twice within an epoch except padding.
4. **Workers.** A rank's ``P`` positions are cut into batches; DataLoader worker ``w`` of
   ``n`` builds batches ``w, w + n, ...``. PyTorch's DataLoader returns worker batches
   round-robin, so the rank's stream is the same for any worker count - which is why a
   resumed run may use a different ``num_workers``.

Memory per reader: the shard order and cumulative counts (16 bytes per shard), the current
window permutation (8 bytes x ``shuffle_window``; 64 KiB for the default 8192), and the
indexes of the shards kept open (16 bytes per record): enough shards for one window to be
read without reopening any (``shuffle_window / smallest shard + 2``, at most
``_MAX_OPEN_SHARDS``), memory-mapped, so the page cache, not the process, holds their bytes.
Samples themselves are held only for the batches in flight (``prefetch`` per worker).

Resume: :meth:`ShardDataset.state_dict` is ``(epoch, seed, consumed)``; loading it and
iterating continues at position ``consumed`` of this rank's stream.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuspark.data import format as fmt
from gpuspark.data.cache import ShardCache
from gpuspark.data.decode import ImageDecode, decode_example_views, make_decoder
from gpuspark.data.world import World
from gpuspark.errors import LoaderError, did_you_mean

__all__ = [
    "EpochPlan",
    "ImageDecode",
    "Loader",
    "LoaderError",
    "ShardDataset",
    "World",
    "worker_batches",
]

DEFAULT_SHUFFLE_WINDOW = 8192
_MIN_OPEN_SHARDS = 8
_MAX_OPEN_SHARDS = 256  # file descriptors
_ON_ERROR = ("raise", "skip")


# --------------------------------------------------------------------------- epoch arithmetic


@dataclass(frozen=True)
class EpochPlan:
    """The order and split of one epoch, computed from records per shard only."""

    counts: tuple[int, ...]
    """Records per shard, in manifest order."""
    world_size: int = 1
    seed: int = 0
    epoch: int = 0
    shuffle: bool = True
    window: int = DEFAULT_SHUFFLE_WINDOW
    drop_last: bool = True
    _cache: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"shuffle_window must be >= 1, got: {self.window}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got: {self.seed}")
        if self.total == 0:
            raise LoaderError("the dataset has no records", remedy="write some samples first")
        if self.per_rank == 0:
            raise LoaderError(
                f"the dataset has {self.total} records, fewer than the {self.world_size} ranks",
                remedy="use drop_last=False (pads by repeating samples) or fewer ranks",
            )

    @property
    def total(self) -> int:
        """Records in the dataset (``N``)."""
        return int(sum(self.counts))

    @property
    def per_rank(self) -> int:
        """Samples every rank yields this epoch (``P``)."""
        n, w = self.total, self.world_size
        return n // w if self.drop_last else -(-n // w)

    def _shard_order(self) -> np.ndarray:
        n = len(self.counts)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng((self.seed, self.epoch, 0)).permutation(n)

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        if -1 not in self._cache:
            order = self._shard_order()
            counts = np.asarray(self.counts, dtype=np.int64)[order]
            self._cache[-1] = order
            self._cache[-2] = np.concatenate(([0], np.cumsum(counts)))
        return self._cache[-1], self._cache[-2]

    def _window_perm(self, k: int) -> np.ndarray:
        perm = self._cache.get(k)
        if perm is None:
            length = min(self.window, self.total - k * self.window)
            perm = np.random.default_rng((self.seed, self.epoch, 1, k)).permutation(length)
            for old in [key for key in self._cache if key >= 0][:-1]:  # keep <= 2 windows
                del self._cache[old]
            self._cache[k] = perm
        return perm

    def lookup(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map epoch positions (``0 <= q < world_size * per_rank``) to ``(shard, record)``."""
        q = np.asarray(positions, dtype=np.int64) % self.total  # padding repeats the start
        if self.shuffle:
            w = self.window
            src = np.empty_like(q)
            windows = q // w
            for k in np.unique(windows):
                sel = windows == k
                src[sel] = k * w + self._window_perm(int(k))[q[sel] - k * w]
            q = src
        order, cum = self._tables()
        slot = np.searchsorted(cum, q, side="right") - 1
        return order[slot], q - cum[slot]

    def rank_range(self, rank: int) -> tuple[int, int]:
        """Epoch positions ``[start, stop)`` of ``rank``."""
        return rank * self.per_rank, (rank + 1) * self.per_rank


def worker_batches(
    start: int, stop: int, batch_size: int, worker_id: int = 0, num_workers: int = 1
) -> Iterator[tuple[int, int]]:
    """The ``[begin, end)`` ranges of a rank's stream that worker ``worker_id`` builds:
    batches ``worker_id, worker_id + num_workers, ...`` of ``[start, stop)``."""
    step = batch_size * num_workers
    for begin in range(start + worker_id * batch_size, stop, step):
        yield begin, min(begin + batch_size, stop)


# --------------------------------------------------------------------------- record access


def _join(root: str, rel: str) -> str:
    return f"{root.rstrip('/')}/{rel}" if "://" in root else os.path.join(root, rel)


class _Shards:
    """Open shards of one reader: local files are memory-mapped; remote ones are fetched into
    the node cache first (``cache``) or read by range requests through fsspec."""

    def __init__(
        self, root: str, shards: list[fmt.ShardInfo], cache: ShardCache | None, window: int
    ) -> None:
        self.root = root
        self.shards = shards
        self.cache = cache
        smallest = min((s.records for s in shards if s.records), default=1)
        spanned = -(-window // smallest) + 2  # shards one shuffle window can touch
        self.capacity = max(_MIN_OPEN_SHARDS, min(spanned, _MAX_OPEN_SHARDS))
        self._open: OrderedDict[int, tuple[Any, Any, np.ndarray]] = OrderedDict()
        self._fs: Any = None
        self._remote = "://" in root and not root.startswith("file://")
        if root.startswith("file://"):
            self.root = root[len("file://") :]

    def _filesystem(self) -> tuple[Any, str]:
        import fsspec

        fs, path = fsspec.core.url_to_fs(self.root)
        return fs, path

    def _open_shard(self, i: int) -> tuple[Any, Any, np.ndarray]:
        info = self.shards[i]
        fileobj: Any
        if not self._remote:
            path = _join(self.root, info.path)
            index = fmt.read_index(_join(self.root, info.index))
            fileobj = open(path, "rb")  # noqa: SIM115 - closed in close()
        else:
            if self._fs is None:
                self._fs, self._base = self._filesystem()
            path = _join(self._base, info.path)
            index_path = _join(self._base, info.index)
            if self.cache is not None:
                with self.cache.open(self._fs, index_path, url=_join(self.root, info.index)) as f:
                    index = fmt.read_index(f)
                fileobj = self.cache.open(self._fs, path, url=_join(self.root, info.path))
            else:
                with self._fs.open(index_path, "rb") as f:
                    index = fmt.read_index(f)
                fileobj = self._fs.open(path, "rb")
        view = _map(fileobj)
        return fileobj, view, index

    def get(self, i: int) -> tuple[Any, Any, np.ndarray]:
        entry = self._open.get(i)
        if entry is None:
            entry = self._open_shard(i)
            self._open[i] = entry
            while len(self._open) > self.capacity:
                _, old = self._open.popitem(last=False)
                _close(old)
        else:
            self._open.move_to_end(i)
        return entry

    def payload(self, shard: int, record: int, verify: bool) -> bytes | memoryview:
        fileobj, view, index = self.get(shard)
        offset, length = (int(x) for x in index[record])
        path = _join(self.root, self.shards[shard].path)
        if view is None:
            return fmt.read_record(fileobj, offset, length, verify=verify, path=path, record=record)
        return fmt.parse_framed(
            view[offset : offset + length], verify=verify, path=path, record=record, offset=offset
        )

    def close(self) -> None:
        while self._open:
            _close(self._open.popitem()[1])


def _map(fileobj: Any) -> memoryview | None:
    """A read-only memoryview of a local file (``None`` for remote or empty files)."""
    try:
        fd = fileobj.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    if os.fstat(fd).st_size == 0:
        return None
    return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))


def _close(entry: tuple[Any, Any, np.ndarray]) -> None:
    fileobj, view, _ = entry
    if view is not None:
        mm = view.obj
        with contextlib.suppress(BufferError):  # arrays still point into it: GC closes it
            view.release()
            mm.close()
    fileobj.close()


# --------------------------------------------------------------------------- the dataset


def _torch_iterable_base() -> type:
    try:
        from torch.utils.data import IterableDataset

        return IterableDataset
    except ImportError:  # pragma: no cover - torch is a dependency
        return object


class ShardDataset(_torch_iterable_base()):  # type: ignore[misc]
    """A PyTorch ``IterableDataset`` over a committed gpuspark dataset (local path or fsspec
    URL), split exactly across ranks and DataLoader workers (see the module doc).

    ``decode``: ``"auto"`` (default; images to uint8 HWC arrays), ``"raw"``, an
    :class:`ImageDecode` or a callable on the stored sample dict. ``transform`` runs after it.
    ``verify_crc`` checks each record's CRC; a bad record raises ``CorruptRecordError``, or
    with ``on_error="skip"`` is skipped and counted (the batch holding it is one sample
    smaller; every rank still takes the same number of steps). ``cache_dir`` copies remote
    shards to node-local disk once (LRU-evicted above ``cache_limit_bytes``). ``split``
    reads only that split's shards. ``world`` overrides detection (tests, custom launchers).
    """

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        decode: str | ImageDecode | Callable[[dict[str, Any]], Any] = "auto",
        transform: Callable[[Any], Any] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        verify_crc: bool = True,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit_bytes: int | None = None,
        on_error: str = "raise",
        split: str | None = None,
        shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
        world: World | None = None,
    ) -> None:
        super().__init__()
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be one of {_ON_ERROR}, got: {on_error!r}")
        self.root = fmt.dataset_root(os.fspath(path_or_url))
        self.manifest = fmt.load_manifest(self.root)
        self.shards = _select_shards(self.manifest, split, self.root)
        self.split = split
        self._decode = make_decoder(decode)
        self.transform = transform
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.shuffle_window = shuffle_window
        self.verify_crc, self.on_error = verify_crc, on_error
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.cache_limit_bytes = cache_limit_bytes
        self._world = world
        self.epoch = 0
        self.consumed = 0
        self.skipped = 0
        self._resolved: World | None = None
        self.plan()  # validates sizes against the world now, not in a worker later

    # -- world and plan -------------------------------------------------------------------

    @property
    def world(self) -> World:
        """This process's world (workers excluded): as given, else as resolved in the parent
        when iteration began (inside DataLoader workers), else detected now."""
        if self._world is not None:
            return self._world
        if self._resolved is not None and _in_worker():
            return self._resolved
        return World.detect().with_worker(0, 1)

    def plan(self, epoch: int | None = None) -> EpochPlan:
        """The :class:`EpochPlan` of ``epoch`` (default: the current one) for this world."""
        return EpochPlan(
            counts=tuple(s.records for s in self.shards),
            world_size=self.world.world_size,
            seed=self.seed,
            epoch=self.epoch if epoch is None else epoch,
            shuffle=self.shuffle,
            window=self.shuffle_window,
            drop_last=self.drop_last,
        )

    @property
    def samples_per_rank(self) -> int:
        """Samples each rank yields per epoch (equal on every rank)."""
        return self.plan().per_rank

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (its own order). Calling it with the current epoch keeps the
        position, so resumed code can call it unconditionally at the top of each epoch."""
        if epoch != self.epoch:
            self.epoch, self.consumed = epoch, 0

    # -- resume ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Position in the epoch: ``epoch``, ``seed``, ``consumed`` (samples of this rank's
        stream already delivered) and the world size / totals it refers to."""
        return {
            "epoch": self.epoch,
            "seed": self.seed,
            "consumed": self.consumed,
            "world_size": self.world.world_size,
            "samples_per_rank": self.samples_per_rank,
            "total_records": self.plan().total,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; the worker count may differ, the world size may not
        (unless ``consumed`` is 0)."""
        world_size = int(state.get("world_size", self.world.world_size))
        consumed = int(state["consumed"])
        if consumed and world_size != self.world.world_size:
            raise LoaderError(
                f"loader state was saved with world size {world_size} at sample {consumed} of "
                f"the epoch; this run has world size {self.world.world_size}",
                remedy="resume with the same number of ranks, or from an epoch boundary",
            )
        total = state.get("total_records")
        if total is not None and int(total) != self.plan().total:
            raise LoaderError(
                f"loader state refers to a dataset of {total} records; {self.root} has "
                f"{self.plan().total}",
                remedy="resume on the same dataset (and split)",
            )
        self.seed, self.epoch, self.consumed = int(state["seed"]), int(state["epoch"]), consumed

    def _begin(self) -> None:
        """Called in the main process when iteration starts: a finished epoch rolls over, and
        the world is resolved here, where torch.distributed is set up, for the workers."""
        self._resolved = self.world
        if self.consumed >= self.samples_per_rank:
            self.epoch, self.consumed = self.epoch + 1, 0

    # -- iteration ------------------------------------------------------------------------

    def _worker_world(self) -> World:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        return self.world if info is None else self.world.with_worker(info.id, info.num_workers)

    def iter_batches(
        self, batch_size: int, world: World | None = None
    ) -> Iterator[tuple[list[Any], dict[str, int]]]:
        """Yield this reader's batches as ``(samples, counters)`` from the current position
        (``counters``: ``positions`` covered, ``skipped`` records, cache deltas). ``world``
        (rank and DataLoader worker) defaults to the detected one."""
        world = world or self._worker_world()
        plan = self.plan()
        start, stop = plan.rank_range(world.rank)
        reader = _Reader(self)
        try:
            for begin, end in worker_batches(
                start + self.consumed, stop, batch_size, world.worker_id, world.num_workers
            ):
                yield reader.batch(plan, begin, end)
        finally:
            reader.close()

    def __iter__(self) -> Iterator[Any]:
        from torch.utils.data import get_worker_info

        in_process = get_worker_info() is None
        if in_process:
            self._begin()
        for samples, counters in self.iter_batches(1):
            if in_process:
                self.consumed += counters["positions"]
                self.skipped += counters["skipped"]
            yield from samples

    def loader(
        self,
        batch_size: int,
        *,
        num_workers: int = 0,
        prefetch: int = 2,
        pin_memory: bool = True,
        device: Any = None,
    ) -> Loader:
        """Batches of torch tensors, prepared ahead of the training loop (see :class:`Loader`)."""
        return Loader(
            self,
            batch_size,
            num_workers=num_workers,
            prefetch=prefetch,
            pin_memory=pin_memory,
            device=device,
        )


def _in_worker() -> bool:
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None


def _select_shards(manifest: fmt.Manifest, split: str | None, root: str) -> list[fmt.ShardInfo]:
    if split is None:
        return list(manifest.shards)
    if split not in manifest.splits:
        names = sorted(manifest.splits)
        raise LoaderError(
            f"{root} has no split {split!r}{did_you_mean(split, names)}",
            remedy=f"use one of {names}" if names else "this dataset has no splits; use split=None",
        )
    by_path = {s.path: s for s in manifest.shards}
    return [by_path[p] for p in manifest.splits[split]]


class _Reader:
    """Reads and decodes the records of one worker."""

    def __init__(self, ds: ShardDataset) -> None:
        self.ds = ds
        self.cache = (
            ShardCache(ds.cache_dir, ds.cache_limit_bytes) if ds.cache_dir is not None else None
        )
        self.shards = _Shards(ds.root, ds.shards, self.cache, ds.shuffle_window)
        self.codec = ds.manifest.compression

    def sample(self, shard: int, record: int) -> Any:
        payload = self.shards.payload(shard, record, self.ds.verify_crc)
        payload = fmt.decompress(payload, self.codec)
        sample = decode_example_views(payload, self.ds.manifest.schema)  # arrays: no copy
        if self.ds._decode is not None:
            sample = self.ds._decode(sample)
        if self.ds.transform is not None:
            sample = self.ds.transform(sample)
        return sample

    def batch(self, plan: EpochPlan, begin: int, end: int) -> tuple[list[Any], dict[str, int]]:
        before = self.cache.stats.as_dict() if self.cache else {}
        shards, records = plan.lookup(np.arange(begin, end))
        samples, skipped = [], 0
        for s, r in zip(shards.tolist(), records.tolist(), strict=True):
            try:
                samples.append(self.sample(s, r))
            except fmt.CorruptRecordError:
                if self.ds.on_error == "raise":
                    raise
                skipped += 1
        counters = {"positions": end - begin, "skipped": skipped}
        if self.cache:
            after = self.cache.stats.as_dict()
            counters.update({k: after[k] - before[k] for k in after})
        return samples, counters

    def close(self) -> None:
        self.shards.close()


# --------------------------------------------------------------------------- batching


def collate(samples: list[Any]) -> Any:
    """Stack samples into torch tensors: arrays -> one stacked tensor (one copy), numbers ->
    a 1-D tensor, strings/bytes -> a list; dicts, tuples and lists recursively."""
    import torch

    first = samples[0]
    if isinstance(first, dict):
        return {k: collate([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(collate(list(col)) for col in zip(*samples, strict=True))
    if isinstance(first, np.ndarray):
        batch = _batch_tensor((len(samples), *first.shape), first.dtype)
        out = batch.numpy()
        for i, s in enumerate(samples):
            out[i] = s
        return batch
    if isinstance(first, torch.Tensor):
        return torch.stack(samples)
    if isinstance(first, (bool, int, float, np.number, np.bool_)):
        return torch.as_tensor(np.asarray(samples))
    return list(samples)


def _batch_tensor(shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """An empty batch tensor; in a DataLoader worker it lives in shared memory from the start,
    so handing it to the main process does not copy it again (as torch's default_collate)."""
    import torch

    if not _in_worker():  # numpy's allocator: large arrays get transparent huge pages
        return torch.from_numpy(np.empty(shape, dtype=dtype))
    tdtype = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    numel = int(np.prod(shape))
    storage = torch.empty(0, dtype=tdtype)._typed_storage()._new_shared(numel)
    return torch.empty(0, dtype=tdtype).set_(storage).view(shape)


class _BatchSource(_torch_iterable_base()):  # type: ignore[misc]
    """What DataLoader workers iterate: whole collated batches of the dataset."""

    def __init__(self, ds: ShardDataset, batch_size: int) -> None:
        super().__init__()
        self.ds, self.batch_size = ds, batch_size

    def __iter__(self) -> Iterator[tuple[str, Any, dict[str, int]]]:
        try:
            for samples, counters in self.ds.iter_batches(self.batch_size):
                yield _finish(samples, counters)
        except fmt.CorruptRecordError as exc:  # DataLoader cannot re-raise it as itself
            yield "error", (exc.path, exc.record, exc.offset, exc.what), {}


def _finish(samples: list[Any], counters: dict[str, int]) -> tuple[str, Any, dict[str, int]]:
    if not samples:
        return "empty", None, counters
    return "batch", collate(samples), counters


class Loader:
    """Iterates batches of a :class:`ShardDataset` while the next ones are being prepared.

    ``num_workers=0``: one background thread reads and decodes ``prefetch`` batches ahead
    (decoders and copies release the GIL). ``num_workers>0``: DataLoader worker processes,
    ``prefetch`` batches each. With a CUDA ``device`` batches are pinned (``pin_memory``)
    and copied on a side stream with ``non_blocking=True`` one batch ahead; other devices get
    a plain ``.to(device)``. ``wait_times`` holds, per batch, the seconds the training loop
    waited for it; :meth:`stats` sums them up with the cache and corruption counters.
    """

    def __init__(
        self,
        dataset: ShardDataset,
        batch_size: int,
        *,
        num_workers: int = 0,
        prefetch: int = 2,
        pin_memory: bool = True,
        device: Any = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got: {batch_size}")
        if num_workers < 0 or prefetch < 1:
            raise ValueError(
                f"need num_workers >= 0 and prefetch >= 1, got: {num_workers}, {prefetch}"
            )
        self.dataset = dataset
        self.batch_size, self.num_workers, self.prefetch = batch_size, num_workers, prefetch
        self.device = _device(device)
        self.cuda = self.device is not None and self.device.type == "cuda"
        self.pin_memory = pin_memory and self.cuda
        self.wait_times: list[float] = []
        self._counts = {"batches": 0, "samples": 0, "skipped_corrupt": 0}
        self._cache: dict[str, int] = {}

    def __len__(self) -> int:
        """Batches left in the current epoch of this rank."""
        ds = self.dataset
        left = ds.samples_per_rank - ds.consumed
        left = ds.samples_per_rank if left <= 0 else left
        return -(-left // self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        """The dataset's resume state (see :meth:`ShardDataset.state_dict`)."""
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the dataset's position."""
        self.dataset.load_state_dict(state)

    def stats(self) -> dict[str, float | int]:
        """Totals since this loader was made: batches, samples, wait seconds, cache hits /
        misses / bytes fetched, corrupt records skipped."""
        out: dict[str, float | int] = dict(self._counts)
        out["wait_s"] = float(sum(self.wait_times))
        for key in ("cache_hits", "cache_misses", "cache_bytes_fetched", "cache_evictions"):
            out[key] = self._cache.get(key, 0)
        return out

    def __iter__(self) -> Iterator[Any]:
        self.dataset._begin()
        source = self._source()
        if self.cuda:
            source = _cuda_ahead(source, self.device)
        elif self.device is not None:
            source = ((k, _to(b, self.device) if k == "batch" else b, c) for k, b, c in source)
        return self._timed(source)

    def _timed(self, source: Iterator[tuple[str, Any, dict[str, int]]]) -> Iterator[Any]:
        try:
            t0 = time.perf_counter()
            for kind, batch, counters in source:
                if kind == "error":
                    raise fmt.CorruptRecordError(*batch)
                self._account(counters)
                if kind == "empty":
                    raise LoaderError(
                        "every record of a batch is corrupt (on_error='skip' has nothing to "
                        "deliver for this step)",
                        remedy="check the dataset with `gpuspark shards verify`",
                    )
                self.wait_times.append(time.perf_counter() - t0)
                self._counts["batches"] += 1
                self._counts["samples"] += _batch_len(batch)
                yield batch
                t0 = time.perf_counter()
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def _account(self, counters: dict[str, int]) -> None:
        self.dataset.consumed += counters.get("positions", 0)
        self.dataset.skipped += counters.get("skipped", 0)
        self._counts["skipped_corrupt"] += counters.get("skipped", 0)
        for key, value in counters.items():
            if key.startswith("cache_"):
                self._cache[key] = self._cache.get(key, 0) + value

    def _source(self) -> Iterator[tuple[str, Any, dict[str, int]]]:
        source = _BatchSource(self.dataset, self.batch_size)
        if self.num_workers == 0:
            return _thread_ahead(iter(source), self.prefetch, self.pin_memory)
        from torch.utils.data import DataLoader

        loader: Any = DataLoader(
            source,
            batch_size=None,
            num_workers=self.num_workers,
            prefetch_factor=self.prefetch,
            pin_memory=self.pin_memory,
            persistent_workers=False,  # each epoch's workers get the current position
        )
        return iter(loader)


def _batch_len(batch: Any) -> int:
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    elif isinstance(batch, (tuple, list)) and batch and not isinstance(batch[0], (str, bytes)):
        batch = batch[0]
    return len(batch)


def _device(device: Any) -> Any:
    if device is None:
        return None
    import torch

    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise LoaderError(
            f"device {device} requested but CUDA is not available",
            remedy="pass device=None (CPU tensors) or run on a GPU machine",
        )
    return device


def _to(batch: Any, device: Any, non_blocking: bool = False) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: _to(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to(v, device, non_blocking) for v in batch)
    return batch


def _pin(batch: Any) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.pin_memory()
    if isinstance(batch, dict):
        return {k: _pin(v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_pin(v) for v in batch)
    return batch


def _thread_ahead(
    source: Iterator[tuple[str, Any, dict[str, int]]], depth: int, pin: bool
) -> Iterator[tuple[str, Any, dict[str, int]]]:
    """Run ``source`` in a background thread, ``depth`` items ahead of the consumer."""
    items: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for kind, batch, counters in source:
                if pin and kind == "batch":
                    batch = _pin(batch)
                if not put((kind, batch, counters)):
                    return
            put(done)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="gpuspark-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join(timeout=10)


def _cuda_ahead(
    source: Iterator[tuple[str, Any, dict[str, int]]], device: Any
) -> Iterator[tuple[str, Any, dict[str, int]]]:
    """Copy each batch to ``device`` on a side stream, one batch ahead of the consumer; the
    consumer's stream waits for the copy and the tensors are recorded on it (so the caching
    allocator does not reuse their memory early)."""
    import torch

    stream = torch.cuda.Stream(device=device)

    def ahead(item: tuple[str, Any, dict[str, int]]) -> tuple[str, Any, dict[str, int]]:
        kind, batch, counters = item
        if kind == "batch":
            with torch.cuda.stream(stream):
                batch = _to(batch, device, non_blocking=True)
        return kind, batch, counters

    pending = None
    for item in source:
        nxt = ahead(item)
        if pending is not None:
            yield _claim(pending, stream)
        pending = nxt
    if pending is not None:
        yield _claim(pending, stream)


def _claim(item: tuple[str, Any, dict[str, int]], stream: Any) -> tuple[str, Any, dict[str, int]]:
    import torch

    current = torch.cuda.current_stream(stream.device)
    current.wait_stream(stream)
    kind, batch, counters = item

    def record(t: Any) -> None:
        if isinstance(t, torch.Tensor):
            t.record_stream(current)
        elif isinstance(t, dict):
            for v in t.values():
                record(v)
        elif isinstance(t, (tuple, list)):
            for v in t:
                record(v)

    record(batch)
    return kind, batch, counters
