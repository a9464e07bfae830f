"""Everyday commands end to end, as a user types them, next to their baselines.

Each case is a shell command run in a fresh process (``subprocess``), timed from start to
exit, in a scratch directory with its own embedded-cluster state (``GPUSPARK_STATE_DIR``), so
a cluster of the user's is never touched. The cases alternate with their baselines, run by
run, on the same embedded cluster:

* ``gpuspark cluster up`` (and ``cluster down``, untimed): no baseline, the target is absolute;
* ``gpuspark launch -n 2 train.py`` on the running cluster vs ``spark-submit`` of a script that
  runs the same ``train.py`` through ``TorchDistributor(num_processes=2, local_mode=False,
  use_gpu=False)`` on the same master;
* ``gpuspark launch -n 8 --gpus-per-process 0 train.py`` vs the same TorchDistributor submit
  with ``num_processes=8`` (full mode only: 8 ranks on 2 cores take minutes);
* ``gpuspark launch --local -n 2 train.py`` vs ``torchrun --standalone --nproc-per-node 2``;
* ``gpuspark prep images`` of 16 small images vs ``spark-submit`` of a plain PySpark job that
  reads the same images with ``binaryFile`` and writes them as Parquet;
* the README's "Quickstart on this machine" block, as written (full mode only).

``train.py`` is the README quickstart's script (an all-reduce of one tensor). Medians of the
timed runs, ratios (gpuspark / baseline: below 1 is faster), and the machine's 1-minute load
before and after each case go to ``benchmarks/results/cli.json`` (``cli_quick.json`` for
``--quick``).

    python benchmarks/bench_cli.py [--quick] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
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

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TRAIN = textwrap.dedent(
    """
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group(os.environ.get("GPUSPARK_BACKEND", "gloo"))
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {int(t.item())}")
    dist.destroy_process_group()
    """
)

TORCH_DISTRIBUTOR = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from pyspark.ml.torch.distributor import TorchDistributor

    spark = SparkSession.builder.appName("bench-cli-torchdistributor").getOrCreate()
    TorchDistributor(num_processes=int(sys.argv[1]), local_mode=False, use_gpu=False).run(
        sys.argv[2]
    )
    spark.stop()
    """
)

PLAIN_PREP = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("bench-cli-plain-prep").getOrCreate()
    df = spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(sys.argv[1])
    df.select("path", "content").repartition(4).write.mode("overwrite").parquet(sys.argv[2])
    spark.stop()
    """
)


class Scratch:
    """A scratch directory with its own embedded-cluster state and the scripts the cases run."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ)
        self.env["GPUSPARK_STATE_DIR"] = str(root / "state")
        self.env["PATH"] = f"{BIN}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["PYSPARK_PYTHON"] = sys.executable
        self.env.pop("GPUSPARK_SPEC", None)
        (root / "train.py").write_text(TRAIN)
        (root / "td.py").write_text(TORCH_DISTRIBUTOR)
        (root / "plain_prep.py").write_text(PLAIN_PREP)
        self.master = ""

    def run(self, command: str, check: bool = True) -> float:
        """Run ``command`` with bash in the scratch directory; its wall time in seconds."""
        start = time.perf_counter()
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        took = time.perf_counter() - start
        if check and proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-2000:]
            raise RuntimeError(f"{command!r} exited {proc.returncode}:\n{tail}")
        return took

    def up(self) -> float:
        took = self.run("gpuspark cluster up")
        status = subprocess.run(
            [str(BIN / "gpuspark"), "cluster", "status", "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        self.master = re.search(r'"master_url":\s*"([^"]+)"', status.stdout).group(1)  # type: ignore[union-attr]
        return took

    def down(self) -> None:
        self.run("gpuspark cluster down", check=False)

    def submit(self, script: str, *args: str) -> str:
        spark_submit = Path(_spark_home(), "bin", "spark-submit")
        words = [str(spark_submit), "--master", self.master, script, *args]
        return " ".join(shlex.quote(w) for w in words)


def _spark_home() -> str:
    import pyspark

    return os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _alternate(
    cases: dict[str, Callable[[], float]], runs: int, warmup: bool = True
) -> dict[str, Any]:
    """Run every case ``runs`` times, alternating (one untimed warm-up of each first)."""
    if warmup:
        for fn in cases.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    load_before = _load()
    for _ in range(runs):
        for name, fn in cases.items():
            times[name].append(fn())
    return {
        name: {
            "runs_s": [round(t, 2) for t in ts],
            "median_s": round(statistics.median(ts), 2),
        }
        for name, ts in times.items()
    } | {"load_1m": [load_before, _load()]}


def _up_cases(s: Scratch, runs: int) -> dict[str, Any]:
    ups: list[float] = []
    load_before = _load()
    for _ in range(runs):
        ups.append(s.up())
        s.down()
    return {
        "gpuspark cluster up": {
            "runs_s": [round(t, 2) for t in ups],
            "median_s": round(statistics.median(ups), 2),
        },
        "load_1m": [load_before, _load()],
    }


def _launch_cases(s: Scratch, n: int) -> dict[str, Callable[[], float]]:
    gpus = "" if n == 2 else " --gpus-per-process 0"
    return {
        f"gpuspark launch -n {n}{gpus}": lambda: s.run(f"gpuspark launch -n {n}{gpus} train.py"),
        f"spark-submit + TorchDistributor ({n})": lambda: s.run(
            s.submit("td.py", str(n), str(s.root / "train.py"))
        ),
    }


def _local_cases(s: Scratch) -> dict[str, Callable[[], float]]:
    torchrun = f"{sys.executable} -m torch.distributed.run --standalone --nproc-per-node 2"
    return {
        "gpuspark launch --local -n 2": lambda: s.run("gpuspark launch --local -n 2 train.py"),
        "torchrun --standalone": lambda: s.run(f"{torchrun} train.py"),
    }


def _prep_cases(s: Scratch) -> dict[str, Callable[[], float]]:
    s.run("gpuspark datasets synth-images images --classes 2 --per-class 8")
    return {
        "gpuspark prep images (16)": lambda: s.run(
            "rm -rf shards && gpuspark prep images images shards --world-size 2"
        ),
        "plain PySpark job (16)": lambda: s.run(
            "rm -rf plain && " + s.submit("plain_prep.py", "images", "plain")
        ),
    }


def quickstart_block() -> str:
    """The README's "Quickstart on this machine" shell block, as written."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quickstart on this machine", 1)[1]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    if match is None:
        raise SystemExit("README.md: no bash block under 'Quickstart on this machine'")
    return match.group(1)


def _quickstart(root: Path, runs: int) -> dict[str, Any]:
    times: list[float] = []
    load_before = _load()
    for i in range(runs):
        s = Scratch(root / f"quickstart-{i}")
        try:
            (s.root / "run.sh").write_text("set -euo pipefail\n" + quickstart_block())
            times.append(s.run("bash run.sh"))
        finally:
            s.down()
    return {
        "README quickstart block": {
            "runs_s": [round(t, 2) for t in times],
            "median_s": round(statistics.median(times), 2),
        },
        "load_1m": [load_before, _load()],
    }


def _ratio(group: dict[str, Any]) -> float | None:
    names = [k for k in group if k != "load_1m"]
    if len(names) != 2:
        return None
    ours, theirs = (group[n]["median_s"] for n in names)
    return round(ours / theirs, 3) if theirs else None


def _table(results: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'command':<44} {'median s':>9} {'ratio':>7}  load (before, after)"]
    for group in results.values():
        ratio = _ratio(group)
        first = True
        for name, row in group.items():
            if name == "load_1m":
                continue
            shown = f"{ratio:>7.2f}" if ratio is not None and first else " " * 7
            load = f"  {group['load_1m']}" if first else ""
            lines.append(f"{name:<44} {row['median_s']:>9.2f} {shown}{load}")
            first = False
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 timed run of each, no warm-up")
    parser.add_argument("--runs", type=int, default=None, help="timed runs of each (default 5)")
    args = parser.parse_args(argv)
    runs = args.runs or (1 if args.quick else 5)
    root = Path(tempfile.mkdtemp(prefix="gpuspark-bench-cli-"))
    results: dict[str, dict[str, Any]] = {}
    s = Scratch(root / "main")
    try:
        results["cluster_up"] = _up_cases(s, runs)
        s.up()
        warm = not args.quick
        results["launch_2"] = _alternate(_launch_cases(s, 2), runs, warm)
        if not args.quick:
            results["launch_8"] = _alternate(_launch_cases(s, 8), max(1, runs // 2), warm)
        results["launch_local"] = _alternate(_local_cases(s), runs, warm)
        results["prep_images"] = _alternate(_prep_cases(s), runs, warm)
    finally:
        s.down()
    if not args.quick:
        results["quickstart"] = _quickstart(root, max(1, runs // 2))
    shutil.rmtree(root, ignore_errors=True)
    print(_table(results))
    ratios = {name: _ratio(group) for name, group in results.items()}
    path = write_results(
        "cli_quick" if args.quick else "cli",
        {"runs": runs, "results": results, "ratios": ratios},
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
