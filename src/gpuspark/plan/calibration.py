"""Calibration results as data: the all-reduce sweep, the compute probe, the decode probe.

Written by :func:`gpuspark.plan.calibrate` as JSON next to the spec; read by
``gpuspark plan --calibration FILE``. Only the parts measured are present.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark.errors import PlanError
from gpuspark.plan.checks import FINITE, MAX_GPUS, Range

__all__ = [
    "AllreduceRow",
    "AllreduceSweep",
    "Calibration",
    "ComputeProbe",
    "load_calibration",
    "save_calibration",
]


@dataclass(frozen=True)
class AllreduceRow:
    """One message size of the sweep, in nccl-tests' ``all_reduce_perf`` columns."""

    bytes: int
    time_s: float
    algbw: float
    """``bytes / time``, bytes/s."""
    busbw: float
    """``algbw * 2(n-1)/n``, bytes/s."""


@dataclass(frozen=True)
class AllreduceSweep:
    """All-reduce times measured over ``world`` ranks on ``backend``."""

    world: int
    backend: str
    rows: tuple[AllreduceRow, ...]

    def time_s(self, nbytes: float) -> float:
        """Seconds for one all-reduce of ``nbytes`` over ``world`` ranks: log-log
        interpolation between measured sizes, the largest size's algbw beyond them."""
        if nbytes <= 0:
            return 0.0
        rows = sorted(self.rows, key=lambda r: r.bytes)
        sizes = [r.bytes for r in rows]
        if nbytes <= sizes[0]:
            return rows[0].time_s
        if nbytes >= sizes[-1]:
            last = rows[-1]
            return last.time_s + (nbytes - last.bytes) / last.algbw
        i = bisect.bisect_left(sizes, nbytes)
        a, b = rows[i - 1], rows[i]
        f = (math.log(nbytes) - math.log(a.bytes)) / (math.log(b.bytes) - math.log(a.bytes))
        return math.exp(math.log(a.time_s) + f * (math.log(b.time_s) - math.log(a.time_s)))

    @property
    def busbw(self) -> float:
        """Bus bandwidth at the largest size, bytes/s."""
        return max(self.rows, key=lambda r: r.bytes).busbw

    @property
    def latency_s(self) -> float:
        """Per-step latency implied by the smallest size: ``t_min / 2(n-1)``."""
        small = min(self.rows, key=lambda r: r.bytes)
        return small.time_s / max(1, 2 * (self.world - 1))


@dataclass(frozen=True)
class ComputeProbe:
    """The recipe's forward + backward per sample, measured on each of ``ranks`` concurrent
    ranks with ``threads`` torch threads (the conditions of training)."""

    recipe: str
    options: dict[str, Any]
    input_shape: tuple[int, ...]
    batch: int
    ranks: int
    threads: int
    sample_s: float
    """Forward + backward seconds per sample (batch time / batch)."""
    backward_share: float
    """Share of forward + backward spent in backward."""
    optimizer_s: float
    """``optimizer.step()`` + ``zero_grad`` seconds per step (AdamW, as the recipes)."""
    flops_per_sample: float
    shapes: tuple[tuple[int, ...], ...]
    device: str = "cpu"
    straggler_s: float = 0.0
    """Median seconds per step that the all-reduce issued when backward ends costs beyond the
    sweep's time for the same bytes: waiting for the slowest of ``ranks``, and on busy CPUs
    the wake-up of a rank blocked in it (the compute probe's end-of-backward all-reduce minus
    the same all-reduce started together)."""
    hook_s: dict[str, float] = field(default_factory=dict)
    """Per compression: seconds the DDP communication hook runs after backward hands over the
    last bucket, on a one-rank group (no network: the compression's own work)."""

    @property
    def flops_per_s(self) -> float:
        """FLOP/s one rank achieves on this network."""
        return self.flops_per_sample / self.sample_s


@dataclass
class Calibration:
    """What ``gpuspark plan calibrate`` measured on a cluster."""

    allreduce: AllreduceSweep | None = None
    compute: ComputeProbe | None = None
    decode: dict[str, float] = field(default_factory=dict)
    """Samples/s one core decodes, per format (``jpeg``, ``volume``)."""
    machine: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def _sweep(d: dict[str, Any]) -> AllreduceSweep:
    rows = tuple(AllreduceRow(**r) for r in d["rows"])
    return AllreduceSweep(world=int(d["world"]), backend=str(d["backend"]), rows=rows)


def _compute(d: dict[str, Any]) -> ComputeProbe:
    d = dict(d)
    d["input_shape"] = tuple(d["input_shape"])
    d["shapes"] = tuple(tuple(s) for s in d["shapes"])
    return ComputeProbe(**d)


def _positive(path: Path, figures: dict[str, Any], zero_ok: bool = False) -> None:
    """Refuse a figure of the file that is not a finite number > 0 (>= 0 with ``zero_ok``)."""
    for name, value in figures.items():
        Range(f"{name} in calibration file {path}", 0, FINITE, lo_open=not zero_ok).check(
            value, remedy="write it again with `gpuspark plan calibrate`"
        )


def _dim(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check(cal: Calibration, path: Path) -> None:
    """The measured figures the planner divides by and takes logarithms of are > 0."""
    if cal.allreduce is not None:
        if not cal.allreduce.rows:
            raise PlanError(f"calibration file {path} has an all-reduce sweep without rows")
        world = Range(f"allreduce.world in calibration file {path}", 2, MAX_GPUS, whole=True)
        world.check(cal.allreduce.world, remedy="write it again with `gpuspark plan calibrate`")
        for i, row in enumerate(cal.allreduce.rows):
            _positive(path, {f"allreduce.rows[{i}].{k}": v for k, v in asdict(row).items()})
    if cal.compute is not None:
        c = cal.compute
        figures = {"sample_s": c.sample_s, "flops_per_sample": c.flops_per_sample}
        figures |= {"backward_share": c.backward_share, "batch": c.batch, "ranks": c.ranks}
        _positive(path, {f"compute.{k}": v for k, v in figures.items()})
        waits = {"optimizer_s": c.optimizer_s, "straggler_s": c.straggler_s}
        waits |= {f"hook_s.{k}": v for k, v in c.hook_s.items()}
        _positive(path, {f"compute.{k}": v for k, v in waits.items()}, zero_ok=True)
        if c.backward_share >= 1 or not all(_dim(d) for shape in c.shapes for d in shape):
            raise PlanError(
                f"calibration file {path}: compute.backward_share must be below 1 and every "
                "dimension of compute.shapes >= 1",
                remedy="write it again with `gpuspark plan calibrate`",
            )
    _positive(path, {f"decode.{k}": v for k, v in cal.decode.items()})


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration JSON; a missing or malformed file, or one whose figures are not
    positive finite numbers, raises :class:`PlanError`."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        _check_shape(data)
        cal = Calibration(
            allreduce=_sweep(data["allreduce"]) if data.get("allreduce") else None,
            compute=_compute(data["compute"]) if data.get("compute") else None,
            decode={str(k): float(v) for k, v in (data.get("decode") or {}).items()},
            machine=dict(data.get("machine") or {}),
        )
    except FileNotFoundError:
        raise PlanError(
            f"calibration file {p} does not exist",
            remedy="run `gpuspark plan calibrate --out FILE` first, or drop --calibration",
        ) from None
    except OSError as exc:
        raise PlanError(
            f"calibration file {p} cannot be read: {exc.strerror or exc}",
            remedy="give the JSON file `gpuspark plan calibrate` wrote",
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        why = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise PlanError(
            f"calibration file {p} is not a gpuspark calibration: {why}",
            remedy="write it again with `gpuspark plan calibrate`",
        ) from None
    _check(cal, p)
    if cal.allreduce is None and cal.compute is None and not cal.decode:
        raise PlanError(
            f"calibration file {p} holds no calibration: none of allreduce, compute, decode",
            remedy="write it with `gpuspark plan calibrate`, or drop --calibration",
        )
    return cal


_ROW: dict[str, Any] = {"bytes": int, "time_s": float, "algbw": float, "busbw": float}
_LAYOUT: dict[str, Any] = {
    "allreduce": {"world": int, "backend": str, "rows": [_ROW]},
    "compute": {
        "recipe": str,
        "options": dict,
        "input_shape": [int],
        "batch": int,
        "ranks": int,
        "threads": int,
        "sample_s": float,
        "backward_share": float,
        "optimizer_s": float,
        "flops_per_sample": float,
        "shapes": [[int]],
        "device": str,
        "straggler_s": float,
        "hook_s": {str: float},
    },
    "decode": {str: float},
    "machine": dict,
}
"""What a calibration file holds, as :func:`save_calibration` writes it: per field its JSON
type (``int`` a whole number, ``float`` any number, ``str`` text, ``dict`` any object,
``[T]`` a list of ``T``, ``{str: T}`` an object of ``T`` by any name, a dict of names an
object of those fields). Every top-level section may be left out."""
_OPTIONAL = frozenset({"compute.device", "compute.straggler_s", "compute.hook_s"})
"""Fields a calibration of an earlier version lacks (:class:`ComputeProbe` defaults them)."""
_JSON_NAMES: dict[type, str] = {
    dict: "an object",
    list: "a list",
    str: "a string",
    bool: "true/false",
    int: "a whole number",
    float: "a number",
}


def _check_shape(data: Any) -> None:
    """A calibration file is an object of known sections, every field of its own JSON type
    (a ``TypeError``/``KeyError`` naming the first that is not, by its path such as
    ``allreduce.rows[0].bytes``; turned into one line)."""
    if not isinstance(data, dict):
        raise TypeError(f"a JSON {type(data).__name__}, not an object")
    present = {k: v for k, v in data.items() if v is not None or k not in _LAYOUT}
    _check_fields(present, _LAYOUT, "", optional=set(_LAYOUT))


def _check_fields(value: dict[str, Any], layout: dict[str, Any], where: str, optional: Any) -> None:
    """The fields of the object ``value`` at ``where`` against ``layout``."""
    unknown = sorted(set(value) - set(layout))
    if unknown:
        owner = f"{where} has" if where else "a calibration has"
        raise KeyError(
            f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
            f"{f' in {where}' if where else ''} ({owner} {', '.join(layout)})"
        )
    for name, kind in layout.items():
        path = f"{where}.{name}" if where else name
        if name in value:
            _check_value(value[name], kind, path)
        elif name not in optional and path not in _OPTIONAL:
            raise KeyError(f"{path} is missing")


def _check_value(value: Any, kind: Any, where: str) -> None:
    """``value`` at ``where`` is of the JSON type ``kind`` (see :data:`_LAYOUT`)."""
    if isinstance(kind, list):
        _expect(value, list, where)
        for i, item in enumerate(value):
            _check_value(item, kind[0], f"{where}[{i}]")
    elif isinstance(kind, dict):
        _expect(value, dict, where)
        if str in kind:
            for name, item in value.items():
                _check_value(item, kind[str], f"{where}.{name}")
        else:
            _check_fields(value, kind, where, optional=())
    else:
        _expect(value, kind, where)


def _expect(value: Any, kind: type, where: str) -> None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    ok = number if kind is float else isinstance(value, kind) and not isinstance(value, bool)
    if not ok:
        raise TypeError(f"{where} must be {_JSON_NAMES[kind]}, got {_json_name(value)}")


def _json_name(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    return _JSON_NAMES.get(type(value), "null" if value is None else type(value).__name__)


def save_calibration(cal: Calibration, path: str | Path) -> Path:
    """Write ``cal`` as JSON (temp + rename); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    storage.atomic_write_text(p, json.dumps(cal.as_dict(), indent=2) + "\n")
    return p
