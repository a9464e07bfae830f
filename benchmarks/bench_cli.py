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
* then, after ``gpuspark cluster up --connect`` added a Spark Connect server to the same
  cluster (``--no-connect`` leaves these out): the same ``launch -n 2`` and ``prep images``,
  which go through the server (its executors are up already), vs the same TorchDistributor
  script and plain PySpark job as Connect clients of that server (``builder.remote``);
* the README's "Quickstart on this machine" block, as written (full mode only), with the
  median time of each of its commands (bash's trace, ``PS4`` with ``$EPOCHREALTIME``).

``train.py`` is the README quickstart's script (an all-reduce of one tensor). Medians of the
timed runs, ratios (gpuspark / baseline: below 1 is faster), and the machine's 1-minute load
before and after each case go to ``benchmarks/results/cli.json`` (``cli_quick.json`` for
``--quick``).

``--only prep,connect`` runs those groups (:data:`GROUPS`) and keeps the other groups of the
last results file; each group records when it ran (``measured_at``).

    python benchmarks/bench_cli.py [--quick] [--runs N] [--no-connect] [--only GROUPS]
"""

from __future__ import annotations

import argparse
import json
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
    import os
    import sys
    from pyspark.sql import SparkSession
    from pyspark.ml.torch.distributor import TorchDistributor

    builder = SparkSession.builder.appName("bench-cli-torchdistributor")
    if len(sys.argv) > 3:  # a Spark Connect server's sc:// URL
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # what TorchDistributor reads
        builder = builder.remote(sys.argv[3])
    spark = builder.getOrCreate()
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

    builder = SparkSession.builder.appName("bench-cli-plain-prep")
    if len(sys.argv) > 3:  # a Spark Connect server's sc:// URL
        builder = builder.remote(sys.argv[3])
    spark = builder.getOrCreate()
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
        return self.call(command, check)[1]

    def call(self, command: str, check: bool = True) -> tuple[subprocess.CompletedProcess, float]:
        """Run ``command`` with bash in the scratch directory: its process and wall time."""
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
        return proc, took

    def up(self, flags: str = "") -> float:
        took = self.run(f"gpuspark cluster up {flags}".strip())
        self.master = self.status("master_url")
        return took

    def status(self, key: str) -> str:
        """One field of ``gpuspark cluster status --json``."""
        status = subprocess.run(
            [str(BIN / "gpuspark"), "cluster", "status", "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return re.search(rf'"{key}":\s*"([^"]+)"', status.stdout).group(1)  # type: ignore[union-attr]

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


def _connect_groups(s: Scratch, runs: int, warm: bool) -> dict[str, dict[str, Any]]:
    """The launch and the prep through a Connect server that ``cluster up --connect`` adds to
    the running cluster (it holds the executors: the next commands find them up), next to
    TorchDistributor and the plain PySpark job through the same server."""
    s.run("gpuspark cluster up --connect")
    url = s.status("connect_url")
    td = f"{shlex.quote(sys.executable)} td.py 2 {shlex.quote(str(s.root / 'train.py'))} {url}"
    # the server resolves relative paths against its own folder: absolute ones
    here = shlex.quote(str(s.root))
    plain = (
        f"rm -rf plain && {shlex.quote(sys.executable)} plain_prep.py "
        f"{here}/images {here}/plain {url}"
    )
    launch = {
        "gpuspark launch -n 2 (Connect server)": lambda: s.run("gpuspark launch -n 2 train.py"),
        "python + TorchDistributor (2, sc://)": lambda: s.run(td),
    }
    prep = {
        "gpuspark prep images (16, Connect server)": lambda: s.run(
            "rm -rf shards && gpuspark prep images images shards --world-size 2"
        ),
        "plain PySpark job (16, sc://)": lambda: s.run(plain),
    }
    return {
        "launch_2_connect": _alternate(launch, runs, warm),
        "prep_images_connect": _alternate(prep, runs, warm),
    }


def quickstart_block() -> str:
    """The README's "Quickstart on this machine" shell block, as written."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quickstart on this machine", 1)[1]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    if match is None:
        raise SystemExit("README.md: no bash block under 'Quickstart on this machine'")
    return match.group(1)


_TRACE = "PS4='+ $EPOCHREALTIME '\nset -x\n"
"""bash's trace of each command with its start time (the block's steps, for the breakdown)."""


def _steps(trace: str, end: float) -> list[tuple[str, float]]:
    """Each top-level command of a ``_TRACE``d script and its seconds (to the next one's
    start, the last one's to ``end``)."""
    starts = [
        (float(m.group(1)), m.group(2))
        for m in re.finditer(r"^\+ (\d+\.\d+) (.*)$", trace, re.M)  # "++": nested, left out
    ]
    ends = [t for t, _ in starts[1:]] + [end]
    return [(cmd, round(stop - t, 2)) for (t, cmd), stop in zip(starts, ends, strict=True)]


def _quickstart(root: Path, runs: int) -> dict[str, Any]:
    times: list[float] = []
    steps: list[list[tuple[str, float]]] = []
    load_before = _load()
    for i in range(runs):
        s = Scratch(root / f"quickstart-{i}")
        try:
            (s.root / "run.sh").write_text("set -euo pipefail\n" + _TRACE + quickstart_block())
            proc, took = s.call("bash run.sh")
            times.append(took)
            steps.append(_steps(proc.stderr, time.time()))
        finally:
            s.down()
    return {
        "README quickstart block": {
            "runs_s": [round(t, 2) for t in times],
            "median_s": round(statistics.median(times), 2),
            "steps_median_s": {
                f"{j + 1}. {cmd}": round(statistics.median(run[j][1] for run in steps), 2)
                for j, (cmd, _) in enumerate(steps[0])
            },
        },
        "load_1m": [load_before, _load()],
    }


def _cases(group: dict[str, Any]) -> list[str]:
    """The case rows of a group (not its ``load_1m`` and ``measured_at``)."""
    return [k for k, v in group.items() if isinstance(v, dict)]


def _ratio(group: dict[str, Any]) -> float | None:
    names = _cases(group)
    if len(names) != 2:
        return None
    ours, theirs = (group[n]["median_s"] for n in names)
    return round(ours / theirs, 3) if theirs else None


def _table(results: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'command':<44} {'median s':>9} {'ratio':>7}  load (before, after)"]
    for group in results.values():
        ratio = _ratio(group)
        first = True
        for name in _cases(group):
            row = group[name]
            shown = f"{ratio:>7.2f}" if ratio is not None and first else " " * 7
            load = f"  {group['load_1m']}" if first else ""
            lines.append(f"{name:<44} {row['median_s']:>9.2f} {shown}{load}")
            first = False
            for step, took in row.get("steps_median_s", {}).items():
                lines.append(f"  {step[:42]:<42} {took:>9.2f}")
    return "\n".join(lines)


GROUPS = ("up", "launch", "launch8", "local", "prep", "connect", "quickstart")
"""What ``--only`` chooses from: ``cluster up``, ``launch -n 2``, ``launch -n 8``, ``--local``,
``prep images``, the two cases through a Connect server, the README quickstart."""


def _measure(root: Path, runs: int, quick: bool, want: set[str]) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    s = Scratch(root / "main")
    warm = not quick
    try:
        if "up" in want:
            results["cluster_up"] = _up_cases(s, runs)
        if want & {"launch", "launch8", "local", "prep", "connect"}:
            s.up()
        if "launch" in want:
            results["launch_2"] = _alternate(_launch_cases(s, 2), runs, warm)
        if "launch8" in want and not quick:
            results["launch_8"] = _alternate(_launch_cases(s, 8), max(1, runs // 2), warm)
        if "local" in want:
            results["launch_local"] = _alternate(_local_cases(s), runs, warm)
        if "prep" in want or "connect" in want:
            prep = _prep_cases(s)  # makes the images the Connect cases read too
            if "prep" in want:
                results["prep_images"] = _alternate(prep, runs, warm)
        if "connect" in want:
            results |= _connect_groups(s, runs, warm)
    finally:
        s.down()
    if "quickstart" in want and not quick:
        results["quickstart"] = _quickstart(root, max(1, runs // 2))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {name: group | {"measured_at": stamp} for name, group in results.items()}


def _earlier(name: str) -> dict[str, dict[str, Any]]:
    """The groups of the last results file ``name`` (``--only`` keeps those it does not run)."""
    path = Path(__file__).resolve().parent / "results" / f"{name}.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8")).get("results", {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 timed run of each, no warm-up")
    parser.add_argument("--runs", type=int, default=None, help="timed runs of each (default 5)")
    parser.add_argument(
        "--no-connect", action="store_true", help="leave out the cases through a Connect server"
    )
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated groups to run, of {','.join(GROUPS)} (the others keep their "
        "results from the last run's file)",
    )
    args = parser.parse_args(argv)
    runs = args.runs or (1 if args.quick else 5)
    want = set(args.only.split(",")) if args.only else set(GROUPS)
    if unknown := want - set(GROUPS):
        parser.error(f"--only: unknown group(s) {', '.join(sorted(unknown))}; of {GROUPS}")
    if args.no_connect:
        want.discard("connect")
    name = "cli_quick" if args.quick else "cli"
    root = Path(tempfile.mkdtemp(prefix="gpuspark-bench-cli-"))
    try:
        measured = _measure(root, runs, args.quick, want)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results = (_earlier(name) if args.only else {}) | measured
    print(_table(results))
    ratios = {group: _ratio(rows) for group, rows in results.items()}
    path = write_results(name, {"runs": runs, "results": results, "ratios": ratios})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
