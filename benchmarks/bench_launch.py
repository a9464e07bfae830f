"""Launch latency: call -> every rank past init_process_group -> back on the driver.

Side by side in one run, alternating, on the same embedded cluster and session:

* Spark: ``gpuspark.launch.run(fn, num_processes=2, spark=spark)`` vs
  ``pyspark.ml.torch.distributor.TorchDistributor(num_processes=2, local_mode=False,
  use_gpu=False).run(fn)`` (both CPU ranks, gloo);
* local: ``gpuspark.launch.run(fn, num_processes=2, local=True)`` vs
  ``torchrun --standalone --nproc_per_node 2 script.py`` (a subprocess, as a user would run it);
* Spark Connect, on the same cluster: the cluster also runs a Connect server
  (:meth:`LocalCluster.start_connect`), its application and the classic session each capped to
  one executor; ``gpuspark.launch.run(fn, spark=<sc:// session>)`` (a barrier ``mapInArrow``
  stage) and ``TorchDistributor`` with the Connect session join the Spark cases above.

One untimed warm-up run of each first (Spark starts its Python workers), then N timed runs of
each, alternating; medians and ratios (gpuspark / alternative; below 1 is faster).

    python benchmarks/bench_launch.py [--quick] [--runs N] [--master spark://...]
                                      [--connect-url sc://...]

With ``--master``, the Connect cases run only against ``--connect-url``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def _connect_mode() -> Iterator[None]:
    """pyspark's process-wide switch to Connect, which TorchDistributor reads (gpuspark's
    Connect sessions do not set it: this process runs a classic session too)."""
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    try:
        yield
    finally:
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


def _connect_cases(remote: Any) -> dict[str, Callable[[], Any]]:
    from pyspark.ml.torch.distributor import TorchDistributor

    from gpuspark.launch import run

    def ours() -> Any:
        return run(init_and_barrier, num_processes=2, gpus_per_process=0, spark=remote)

    def theirs() -> Any:
        with _connect_mode():
            td = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
            return td.run(init_and_barrier)

    return {"gpuspark run (sc://)": ours, "TorchDistributor (sc://)": theirs}


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


def _spark_sessions(master: str | None, connect_url: str | None) -> tuple[Any, Any, Any]:
    """``(classic session, Connect session or None, cluster started here or None)``. A cluster
    started here also runs a Connect server; each application gets one of its two executors."""
    from gpuspark.cluster.local import LocalCluster
    from gpuspark.cluster.session import session

    cluster, cap = None, {}
    if master is None:
        state = tempfile.mkdtemp(prefix="gpuspark-bench-launch-")
        cluster = LocalCluster(workers=2, cores=8, memory="2g", gpus=2, state_dir=state).start()
        master = cluster.master_url
        shape = cluster.shape
        assert shape is not None
        cap = {"spark.cores.max": str(shape.executor_cores)}  # one executor each
        connect_url = cluster.start_connect(**cap)
    classic = session(master=master, kind="training", app_name="bench-launch", **cap)
    remote = None
    if connect_url is not None:
        remote = session(master=connect_url, kind="training", app_name="bench-launch")
    return classic, remote, cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 timed runs of each")
    parser.add_argument("--runs", type=int, default=None, help="timed runs of each (default 5)")
    parser.add_argument("--master", default=None, help="Spark master (default: start one)")
    parser.add_argument(
        "--connect-url", default=None, help="Spark Connect server (default: one on the cluster)"
    )
    args = parser.parse_args(argv)
    runs = args.runs or (2 if args.quick else 5)

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "torchrun_init.py")
        script.write_text(TORCHRUN_SCRIPT)
        local = _summary(_alternate(_local_cases(script), runs))
    spark, connect, cluster = _spark_sessions(args.master, args.connect_url)
    try:
        cases = _spark_cases(spark)
        if connect is not None:
            cases.update(_connect_cases(connect))
        remote = _summary(_alternate(cases, runs))
    finally:
        spark.stop()
        if connect is not None:
            connect.stop()
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(cluster.state_dir, ignore_errors=True)

    ratios = {
        "spark: gpuspark / TorchDistributor": remote["gpuspark run (spark)"]["median_s"]
        / remote["TorchDistributor"]["median_s"],
        "local: gpuspark / torchrun": local["gpuspark run (local)"]["median_s"]
        / local["torchrun"]["median_s"],
    }
    if "gpuspark run (sc://)" in remote:
        over = remote["gpuspark run (sc://)"]["median_s"]
        ratios["connect: gpuspark sc:// / gpuspark classic"] = (
            over / remote["gpuspark run (spark)"]["median_s"]
        )
        ratios["connect: gpuspark sc:// / TorchDistributor sc://"] = (
            over / remote["TorchDistributor (sc://)"]["median_s"]
        )
    rows = [*remote.items(), *local.items()]
    print(f"launch latency, 2 ranks, gloo, {runs} alternating runs each (median seconds)")
    print(f"{'case':<26} {'median s':>9}  runs")
    for name, res in rows:
        print(f"{name:<26} {res['median_s']:>9.2f}  {res['runs_s']}")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
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
