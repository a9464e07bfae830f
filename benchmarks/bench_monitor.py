"""Training metrics: step time with the rank's Prometheus exporter on vs off, and scrape time.

One CPU process (gloo world of one, 1 torch thread) trains a small MLP with
``gpuspark.train.loop.fit``. Blocks of ``steps`` optimizer steps alternate between metrics
off (``metrics_port=0``) and on (the exporter fed every step, and scraped once a second by a
background client, far more often than Prometheus' 15 s), the order swapped every repetition;
the figure per block is its median step time, and the overhead is the median over
repetitions of on/off - 1. The same ratio of the process's CPU seconds per step (all
threads, the HTTP server's included) is printed too: on a shared, loaded machine wall-clock
blocks swing by tens of percent, CPU time much less. Scrape latency: ~200 sequential GETs
(a new connection each) of the live endpoint of that rank, median and p95. Also: the cost of
one ``RankMetrics.step`` call alone.

    python benchmarks/bench_monitor.py [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_results

OVERHEAD_LIMIT_PCT = 1.0
SCRAPE_LIMIT_MS = 5.0


def _model_and_data(width: int, batch: int, n_batches: int) -> tuple[Any, Any, list[Any]]:
    import torch

    from gpuspark.train import prepare

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(128, width), torch.nn.ReLU(),
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10),
    )  # fmt: skip
    model = prepare(net)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(batch, 128, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(n_batches)]  # fmt: skip
    return model, opt, data


def _block(model: Any, opt: Any, data: list[Any], port: int) -> tuple[float, float]:
    """One fit over ``data``: the median wall seconds between consecutive optimizer steps, and
    this process's CPU seconds per step (all threads: the exporter's server included)."""
    import torch

    from gpuspark.train.loop import FitConfig, fit

    stamps: list[float] = []
    cfg = FitConfig(epochs=1, log=None, metrics_port=port)
    cpu0 = time.process_time()
    fit(model, opt, torch.nn.functional.cross_entropy, data, config=cfg,
        on_step=lambda _s: stamps.append(time.perf_counter()))  # fmt: skip
    cpu = (time.process_time() - cpu0) / len(data)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return statistics.median(gaps), cpu


class _Scraper(threading.Thread):
    """GET the endpoint every ``period`` seconds while a block runs."""

    def __init__(self, url: str, period: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.url, self.period, self.count = url, period, 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.period):
            urllib.request.urlopen(self.url, timeout=5).read()
            self.count += 1


def _overhead(shape: dict[str, int], port: int) -> dict[str, Any]:
    from gpuspark.monitor.exporter import serve

    model, opt, data = _model_and_data(shape["width"], shape["batch"], shape["steps"])
    rm = serve(port, run_id="bench")
    assert rm is not None
    _block(model, opt, data[:20], 0)  # warm-up (allocator, autograd graph)
    _block(model, opt, data[:20], port)
    off: list[float] = []
    on: list[float] = []
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    scrapes = 0
    for rep in range(shape["reps"]):
        for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
            if mode == "off":
                wall, cpu_s = _block(model, opt, data, 0)
                off.append(wall)
                cpu["off"].append(cpu_s)
                continue
            scraper = _Scraper(rm.url)
            scraper.start()
            wall, cpu_s = _block(model, opt, data, port)
            on.append(wall)
            cpu["on"].append(cpu_s)
            scraper.stop.set()
            scraper.join()
            scrapes += scraper.count
    ratios = [a / b for a, b in zip(on, off, strict=True)]
    cpu_ratios = [a / b for a, b in zip(cpu["on"], cpu["off"], strict=True)]
    return {
        "cpu_ms_per_step_off_median": round(statistics.median(cpu["off"]) * 1e3, 4),
        "cpu_ms_per_step_on_median": round(statistics.median(cpu["on"]) * 1e3, 4),
        "cpu_overhead_pct_per_rep": [round((r - 1) * 100, 3) for r in cpu_ratios],
        "cpu_overhead_pct": round((statistics.median(cpu_ratios) - 1) * 100, 3),
        "step_ms_off": [round(x * 1e3, 4) for x in off],
        "step_ms_on": [round(x * 1e3, 4) for x in on],
        "step_ms_off_median": round(statistics.median(off) * 1e3, 4),
        "step_ms_on_median": round(statistics.median(on) * 1e3, 4),
        "overhead_pct_per_rep": [round((r - 1) * 100, 3) for r in ratios],
        "overhead_pct": round((statistics.median(ratios) - 1) * 100, 3),
        "scrapes_during_on_blocks": scrapes,
        "url": rm.url,
    }


def _scrape_latency(url: str, n: int) -> dict[str, Any]:
    for _ in range(5):
        urllib.request.urlopen(url, timeout=5).read()
    times, size = [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        body = urllib.request.urlopen(url, timeout=5).read()
        times.append(time.perf_counter() - t0)
        size = len(body)
    times.sort()
    return {
        "scrapes": n,
        "scrape_ms_median": round(statistics.median(times) * 1e3, 3),
        "scrape_ms_p95": round(times[int(0.95 * (n - 1))] * 1e3, 3),
        "scrape_ms_max": round(times[-1] * 1e3, 3),
        "body_bytes": size,
    }


def _step_call_cost(calls: int) -> float:
    """Microseconds of one ``RankMetrics.step`` (phases dict built per call, as in fit)."""
    from gpuspark.monitor.exporter import current

    rm = current()
    assert rm is not None
    t0 = time.perf_counter()
    for _ in range(calls):
        rm.step(64, 0.003, {"data_wait": 1e-5, "compute": 2e-3, "comm": 0.0,
                            "optimizer": 5e-4}, 1000, 1000, 0.5, 1e-3, 0)  # fmt: skip
    return (time.perf_counter() - t0) / calls * 1e6


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and repeats (< 60 s)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    os.environ.pop("GPUSPARK_RANK_DIR", None)
    if args.quick:
        shape = {"width": 512, "batch": 128, "steps": 40, "reps": 12, "gets": 100}
    else:
        shape = {"width": 512, "batch": 128, "steps": 60, "reps": 40, "gets": 200}
    t0 = time.perf_counter()
    over = _overhead(shape, _free_port())
    scrape = _scrape_latency(over["url"], shape["gets"])
    step_us = round(_step_call_cost(100_000), 3)
    wall = time.perf_counter() - t0
    ok_over = over["overhead_pct"] <= OVERHEAD_LIMIT_PCT
    ok_scrape = scrape["scrape_ms_median"] <= SCRAPE_LIMIT_MS
    model = f"MLP 128-{shape['width']}-{shape['width']}-10, batch {shape['batch']}, 1 thread"
    print(f"bench_monitor: {model}; {shape['reps']} alternating reps x {shape['steps']} steps")
    print(f"{'figure':<34} {'value':>10} {'limit':>8} {'ok':>4}")
    rows = [
        ("step ms, metrics off (median)", over["step_ms_off_median"], "", ""),
        ("step ms, metrics on (median)", over["step_ms_on_median"], "", ""),
        ("overhead % (median of on/off)", over["overhead_pct"], OVERHEAD_LIMIT_PCT, ok_over),
        ("CPU ms/step, off (median)", over["cpu_ms_per_step_off_median"], "", ""),
        ("CPU ms/step, on (median)", over["cpu_ms_per_step_on_median"], "", ""),
        ("CPU overhead % (median of on/off)", over["cpu_overhead_pct"], "", ""),
        ("RankMetrics.step us per call", step_us, "", ""),
        ("scrape ms, median", scrape["scrape_ms_median"], SCRAPE_LIMIT_MS, ok_scrape),
        ("scrape ms, p95", scrape["scrape_ms_p95"], "", ""),
    ]
    for name, value, limit, ok in rows:
        flag = "" if ok == "" else ("yes" if ok else "NO")
        print(f"{name:<34} {value:>10} {limit!s:>8} {flag:>4}")
    print(f"per-rep wall overhead %: {over['overhead_pct_per_rep']}")
    print(f"per-rep CPU overhead %: {over['cpu_overhead_pct_per_rep']}; wall {wall:.1f} s")
    path = write_results(
        "monitor" + ("_quick" if args.quick else ""),
        {"quick": args.quick, "shape": shape, "model": model, **over, **scrape,
         "step_call_us": step_us, "overhead_limit_pct": OVERHEAD_LIMIT_PCT,
         "scrape_limit_ms": SCRAPE_LIMIT_MS, "overhead_ok": ok_over, "scrape_ok": ok_scrape,
         "wall_s": round(wall, 2)},
    )  # fmt: skip
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
