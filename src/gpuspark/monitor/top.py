"""``gpuspark top``: the training runs of this cluster, live, in a terminal.

Two sources, same rows: Prometheus's HTTP API (``rate()`` over a window; GPU columns when
dcgm-exporter series exist), or, when no Prometheus runs, the ranks' own ``/metrics`` endpoints
found through the run target files (two scrapes ``interval`` seconds apart give the rates).

A rank is live while it answers: from Prometheus, while its gauges are current (a target that
stops answering or leaves the target files is marked stale at once); a run whose rates are
still inside the window but whose ranks no longer answer is one ``finished`` row. The table
fits the terminal: on a narrow one the least needed columns go first.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuspark._util.net import http_get, http_get_json
from gpuspark.cluster.discovery import list_targets
from gpuspark.errors import MonitorError
from gpuspark.monitor import names as n

__all__ = [
    "RankRow",
    "as_json",
    "collect",
    "from_endpoints",
    "from_prometheus",
    "render",
    "run_targets",
]

_KEY = tuple[str, str]  # (run_id, rank)


@dataclass
class RankRow:
    """One rank of one run, as ``top`` shows it."""

    run_id: str
    rank: str
    host: str = ""
    team: str = ""
    samples_per_s: float = 0.0
    steps: float = 0.0
    epoch: float = 0.0
    loss: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    """Share of step time per phase (``data_wait``, ``compute``, ``comm``, ``optimizer``)."""
    bytes_saved_pct: float | None = None
    last_step_age_s: float | None = None
    gpu_util_pct: float | None = None
    gpu_memory_pct: float | None = None
    state: str = "live"
    """``live`` (its ranks answer) or ``finished`` (one row for the run; rank ``-``)."""

    @property
    def data_wait_pct(self) -> float:
        """Share of step time spent waiting for data, in percent."""
        return 100.0 * self.phases.get("data_wait", 0.0)


# -- from the ranks' endpoints ---------------------------------------------------------------


def _scrape(target: str) -> dict[_KEY, dict[str, Any]]:
    """Values per (run_id, rank) from one ``/metrics`` page; phases keyed ``phase:<name>``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = http_get(f"http://{target}/metrics", timeout=5).decode()
    out: dict[_KEY, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if "run_id" not in labels:
                continue
            row = out.setdefault((labels["run_id"], labels.get("rank", "")), {})
            row.setdefault("_labels", labels)
            key = sample.name
            if key == n.STEP_PHASE:
                key = f"phase:{labels.get('phase', '')}"
            row[key] = sample.value
    return out


def _rate(new: dict[str, Any], old: dict[str, Any], key: str, dt: float) -> float:
    if dt <= 0 or key not in new:
        return 0.0
    return max(0.0, (float(new[key]) - float(old.get(key, new[key]))) / dt)


def _row_from_scrapes(key: _KEY, new: dict[str, Any], old: dict[str, Any], dt: float) -> RankRow:
    labels = new.get("_labels", {})
    row = RankRow(run_id=key[0], rank=key[1], host=labels.get("host", ""))
    row.team = labels.get("team", "")
    row.samples_per_s = _rate(new, old, n.SAMPLES, dt)
    row.steps = float(new.get(n.STEPS, 0.0))
    row.epoch = float(new.get(n.EPOCH, 0.0))
    row.loss = new.get(n.LOSS)
    deltas = {p: _rate(new, old, f"phase:{p}", dt) for p in n.PHASES}
    if sum(deltas.values()) <= 0:  # idle between scrapes: fall back to the run's totals
        deltas = {p: float(new.get(f"phase:{p}", 0.0)) for p in n.PHASES}
    total = sum(deltas.values())
    row.phases = {p: v / total for p, v in deltas.items()} if total > 0 else {}
    raw, sent = new.get(n.GRAD_UNCOMPRESSED, 0.0), new.get(n.GRAD_SENT, 0.0)
    row.bytes_saved_pct = 100.0 * (1.0 - sent / raw) if raw else None
    last = new.get(n.LAST_STEP)
    row.last_step_age_s = max(0.0, time.time() - float(last)) if last else None
    return row


def from_endpoints(targets: Iterable[str], interval: float = 1.0) -> list[RankRow]:
    """Rows from the ranks' endpoints: two scrapes ``interval`` s apart (unreachable skipped)."""
    targets = list(targets)

    def scrape_all() -> dict[_KEY, dict[str, Any]]:
        merged: dict[_KEY, dict[str, Any]] = {}
        for target in targets:
            try:
                merged.update(_scrape(target))
            except (OSError, ValueError):
                continue
        return merged

    first, t0 = scrape_all(), time.monotonic()
    time.sleep(interval)
    second, dt = scrape_all(), time.monotonic() - t0
    return [_row_from_scrapes(k, v, first.get(k, {}), dt) for k, v in sorted(second.items())]


def run_targets(directory: Any) -> list[str]:
    """Every rank endpoint listed in the run target files under ``directory``."""

    out: list[str] = []
    for group in list_targets(directory, "runs"):
        targets = group.get("targets", [])
        out += [str(t) for t in targets] if isinstance(targets, list) else []
    return out


# -- from Prometheus -------------------------------------------------------------------------


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr})
    try:
        body = http_get_json(f"{url}/api/v1/query?{q}", timeout=10)
    except (OSError, ValueError) as exc:
        raise MonitorError(f"Prometheus at {url} did not answer: {exc}") from None
    if body.get("status") != "success":
        raise MonitorError(f"Prometheus rejected {expr!r}: {body.get('error')}")
    return list(body["data"]["result"])


def _by_rank(url: str, expr: str) -> dict[_KEY, tuple[dict[str, str], float]]:
    out = {}
    for item in _query(url, expr):
        labels = item["metric"]
        out[(labels.get("run_id", ""), labels.get("rank", ""))] = (labels, float(item["value"][1]))
    return out


def _phases(url: str, window: str) -> dict[_KEY, dict[str, float]]:
    expr = f"sum by (run_id, rank, phase) (rate({n.STEP_PHASE}[{window}]))"
    raw: dict[_KEY, dict[str, float]] = {}
    for item in _query(url, expr):
        m = item["metric"]
        key = (m.get("run_id", ""), m.get("rank", ""))
        raw.setdefault(key, {})[m.get("phase", "")] = float(item["value"][1])
    return {
        k: {p: v / sum(d.values()) for p, v in d.items()}
        for k, d in raw.items()
        if sum(d.values()) > 0
    }


def _gpu_by_host(url: str) -> dict[str, tuple[float, float]]:
    """Mean GPU utilisation and memory share per host, from dcgm-exporter (either host label)."""
    d = n.DCGM
    out: dict[str, tuple[float, float]] = {}
    for label in n.DCGM_HOST_LABELS:
        util = _query(url, f"avg by ({label}) ({d['util']})")
        fb = f"{d['fb_used']} / ({d['fb_used']} + {d['fb_free']} + {d['fb_reserved']})"
        mem = {
            i["metric"].get(label): float(i["value"][1])
            for i in _query(url, f"avg by ({label}) ({fb})")
        }
        for item in util:
            host = item["metric"].get(label)
            if host:
                out[host] = (float(item["value"][1]), 100.0 * mem.get(host, 0.0))
    return out


def from_prometheus(url: str, window: str = "1m") -> list[RankRow]:
    """Rows from a Prometheus server's HTTP API (``rate`` over ``window``): one per live rank,
    then one per finished run (rates still in the window, gauges gone stale)."""
    samples = _by_rank(url, f"rate({n.SAMPLES}[{window}])")
    steps = _by_rank(url, n.STEPS)
    loss, epoch = _by_rank(url, n.LOSS), _by_rank(url, n.EPOCH)
    last = _by_rank(url, f"time() - {n.LAST_STEP}")
    saved = _by_rank(url, f"100 * (1 - {n.GRAD_SENT} / {n.GRAD_UNCOMPRESSED})")
    phases, gpus = _phases(url, window), _gpu_by_host(url)
    rows = []
    for key in sorted(steps):
        labels = steps[key][0]
        row = RankRow(run_id=key[0], rank=key[1], host=labels.get("host", ""))
        row.team = labels.get("team", "")
        row.samples_per_s = samples.get(key, ({}, 0.0))[1]
        row.steps = steps[key][1]
        row.epoch = epoch.get(key, ({}, 0.0))[1]
        row.loss = loss[key][1] if key in loss else None
        row.last_step_age_s = last[key][1] if key in last else None
        row.bytes_saved_pct = saved[key][1] if key in saved else None
        row.phases = phases.get(key, {})
        if row.host in gpus:
            row.gpu_util_pct, row.gpu_memory_pct = gpus[row.host]
        rows.append(row)
    return rows + _finished(samples, {run for run, _ in steps})


def _finished(samples: dict[_KEY, tuple[dict[str, str], float]], live: set[str]) -> list[RankRow]:
    """One ``finished`` row per run that has rates in the window but no live rank."""
    runs = {key[0]: labels for key, (labels, _) in samples.items() if key[0] not in live}
    return [
        RankRow(run_id=run, rank="-", team=labels.get("team", ""), state="finished")
        for run, labels in sorted(runs.items())
    ]


def collect(
    prometheus: str | None, targets_directory: Any, interval: float = 1.0
) -> tuple[str, list[RankRow]]:
    """``(source, rows)``: from ``prometheus`` when given, else from the ranks' endpoints."""
    if prometheus:
        return prometheus, from_prometheus(prometheus)
    return "endpoints", from_endpoints(run_targets(targets_directory), interval)


# -- rendering -------------------------------------------------------------------------------

_STYLE = {  # phase -> (glyph, colour): the glyphs tell phases apart without colour too
    "data_wait": ("░", "red"),
    "compute": ("█", "green"),
    "comm": ("▓", "yellow"),
    "optimizer": ("▒", "blue"),
}
_BAR = 20


def _bar(phases: dict[str, float], width: int = _BAR) -> Any:
    from rich.text import Text

    text, done, share = Text(), 0, 0.0
    for phase in n.PHASES:
        glyph, colour = _STYLE[phase]
        share += phases.get(phase, 0.0)
        cells = min(width, round(share * width)) - done  # cumulative: never wider than width
        text.append(glyph * cells, style=colour)
        done += cells
    return text


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


# What a narrow terminal gives up first, in order: columns, and (``_NARROW_BAR``) half the
# step-time bar; run, rank, samples/s, step, loss and the bar always stay.
_NARROW_BAR = 10
_DROP_ORDER: tuple[str | int, ...] = (
    "host",
    "team",
    _NARROW_BAR,
    "bytes saved",
    "GPU mem",
    "epoch",
    "last step",
    "data wait",
)


def _cells(r: RankRow, bar: int, gpu: bool) -> dict[str, Any]:
    """A row's cells by column head."""
    if r.state != "live":
        return {"run": r.run_id, "rank": r.rank, "team": r.team or "-", "step time": r.state}
    cells: dict[str, Any] = {"run": r.run_id, "rank": r.rank, "host": r.host}
    cells |= {"team": r.team or "-", "samples/s": f"{r.samples_per_s:.1f}"}
    cells |= {"step": f"{r.steps:.0f}", "epoch": f"{r.epoch:.0f}", "loss": _fmt(r.loss, ".4f")}
    cells |= {"step time": _bar(r.phases, bar), "data wait": f"{r.data_wait_pct:.0f}%"}
    cells |= {"bytes saved": _fmt(r.bytes_saved_pct, ".0f", "%")}
    cells["last step"] = _fmt(r.last_step_age_s, ".0f", " s ago")
    if gpu:
        cells["GPU util"] = _fmt(r.gpu_util_pct, ".0f", "%")
        cells["GPU mem"] = _fmt(r.gpu_memory_pct, ".0f", "%")
    return cells


def _table(rows: list[RankRow], source: str, heads: list[str], bar: int) -> Any:
    from rich import box
    from rich.table import Table

    gpu = "GPU util" in heads
    live = sum(r.state == "live" for r in rows)
    ranks = f"{live} rank" + ("" if live == 1 else "s")
    table = Table(title=f"gpuspark top — {ranks} — {source}", box=box.SIMPLE_HEAD)
    for head in heads:
        left = head in ("run", "host", "team", "step time")
        table.add_column(head, justify="left" if left else "right", no_wrap=True)
    for r in rows:
        cells = _cells(r, bar, gpu)
        table.add_row(*(cells.get(head, "") for head in heads))
    table.caption = "  ".join(f"[{c}]{g}[/{c}] {p}" for p, (g, c) in _STYLE.items())
    return table


def render(rows: list[RankRow], source: str, width: int | None = None) -> Any:
    """A rich table of ``rows`` (one line per rank, one per finished run) that fits ``width``
    columns (default: the terminal's), with a legend in its caption."""
    from rich.console import Console
    from rich.measure import Measurement
    from rich.text import Text

    if not rows:
        return Text(f"gpuspark top — source: {source} — no training run is reporting metrics")
    console = Console(width=width) if width else Console()
    heads = ["run", "rank", "host", "team", "samples/s", "step", "epoch", "loss"]
    heads += ["step time", "data wait", "bytes saved", "last step"]
    heads += ["GPU util", "GPU mem"] if any(r.gpu_util_pct is not None for r in rows) else []
    drop, bar = list(_DROP_ORDER), _BAR
    unbounded = console.options.update_width(10_000)  # the width it needs, not the one it has
    while True:
        table = _table(rows, source, heads, bar)
        need = Measurement.get(console, unbounded, table).maximum
        if need <= console.width or not drop:
            return table
        gone = drop.pop(0)
        if isinstance(gone, int):
            bar = gone
        heads = [h for h in heads if h != gone]


def as_json(rows: list[RankRow], source: str) -> dict[str, Any]:
    """The ``--json`` form: source and one dict per rank."""
    return {"source": source, "ranks": [asdict(r) for r in rows]}
