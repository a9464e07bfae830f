"""Launch latency: call -> every rank past init_process_group -> back on the driver.

Side by side in one run, alternating, on the same embedded cluster and session:

* Spark: ``gpuspark.launch.run(fn, num_processes=2, spark=spark)`` vs
  ``pyspark.ml.torch.distributor.TorchDistributor(num_processes=2, local_mode=False,
  use_gpu=False).run(fn)`` (both CPU ranks, gloo);
* local: ``gpuspark.launch.run(fn, num_processes=2, local=True)`` vs
  ``torchrun --standalone --nproc_per_node 2 script.py`` (a subprocess, as a user would run it).

One untimed warm-up run of each first (Spark starts its Python workers), then N timed runs of
each, alternating; medians and ratios (gpuspark / alternative; below 1 is faster).

    python benchmarks/bench_launch.py [--quick] [--runs N] [--master spark://...]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results

TORCHRUN_SCRIPT = textwrap.dedent(
    """
    import torch.distributed as dist
    dist.init_process_group("gloo")
    dist.barrier()
    dist.destroy_process_group()
    """
)


def init_and_barrier() -> int:
    """What every rank runs: join the group, meet the others, leave."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.barrier()
    rank = dist.get_rank()
    dist.destroy_process_group()
    return rank


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _alternate(cases: dict[str, Callable[[], Any]], runs: int) -> dict[str, list[float]]:
    for fn in cases.values():  # warm-up, untimed
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, fn in cases.items():
            times[name].append(_timed(fn))
    return times


def _spark_cases(spark: Any) -> dict[str, Callable[[], Any]]:
    from pyspark.ml.torch.distributor import TorchDistributor

    from gpuspark.launch import run

    def ours() -> Any:
        return run(init_and_barrier, num_processes=2, gpus_per_process=0, spark=spark)

    def theirs() -> Any:
        td = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
        return td.run(init_and_barrier)

    return {"gpuspark run (spark)": ours, "TorchDistributor": theirs}


def _local_cases(script: Path) -> dict[str, Callable[[], Any]]:
    from gpuspark.launch import run

    def ours() -> Any:
        return run(init_and_barrier, num_processes=2, local=True, gpus_per_process=0)

    def theirs() -> Any:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
        cmd.insert(3, "--standalone")
        cmd.append(str(script))
        subprocess.run(cmd, check=True, capture_output=True)

    return {"gpuspark run (local)": ours, "torchrun": theirs}


def _summary(times: dict[str, list[float]]) -> dict[str, Any]:
    return {
        name: {"runs_s": [round(t, 3) for t in ts], "median_s": statistics.median(ts)}
        for name, ts in times.items()
    }


def _spark_session(master: str | None) -> tuple[Any, Any]:
    from gpuspark.cluster.local import LocalCluster
    from gpuspark.cluster.session import session

    cluster = None
    if master is None:
        state = tempfile.mkdtemp(prefix="gpuspark-bench-launch-")
        cluster = LocalCluster(workers=2, cores=8, memory="2g", gpus=2, state_dir=state).start()
        master = cluster.master_url
    return session(master=master, kind="training", app_name="bench-launch"), cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 timed runs of each")
    parser.add_argument("--runs", type=int, default=None, help="timed runs of each (default 5)")
    parser.add_argument("--master", default=None, help="Spark master (default: start one)")
    args = parser.parse_args(argv)
    runs = args.runs or (2 if args.quick else 5)

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "torchrun_init.py")
        script.write_text(TORCHRUN_SCRIPT)
        local = _summary(_alternate(_local_cases(script), runs))
    spark, cluster = _spark_session(args.master)
    try:
        remote = _summary(_alternate(_spark_cases(spark), runs))
    finally:
        spark.stop()
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(cluster.state_dir, ignore_errors=True)

    ratios = {
        "spark: gpuspark / TorchDistributor": remote["gpuspark run (spark)"]["median_s"]
        / remote["TorchDistributor"]["median_s"],
        "local: gpuspark / torchrun": local["gpuspark run (local)"]["median_s"]
        / local["torchrun"]["median_s"],
    }
    rows = [*remote.items(), *local.items()]
    print(f"launch latency, 2 ranks, gloo, {runs} alternating runs each (median seconds)")
    print(f"{'case':<26} {'median s':>9}  runs")
    for name, res in rows:
        print(f"{name:<26} {res['median_s']:>9.2f}  {res['runs_s']}")
    for name, value in ratios.items():
        print(f"ratio {name}: {value:.2f}x")
    path = write_results(
        "launch",
        {"runs": runs, "quick": args.quick, "spark": remote, "local": local, "ratios": ratios},
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
