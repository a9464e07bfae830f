"""Where the test suite's time goes: seconds per test module (setup, call and teardown
together), from a JUnit XML report of a pytest run.

    .venv/bin/python -m pytest --junitxml=/tmp/junit.xml     # the default run, as make test
    python benchmarks/profile_tests.py /tmp/junit.xml --top 30

Prints the modules by time with their test counts and the running share of the whole run,
then the slowest single tests, and writes ``benchmarks/results/profile_tests.json``. A
module's first test carries the set-up of the fixtures it starts (the shared embedded cluster
and session land on the first test that asks for them).
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results


def read_report(path: Path) -> list[tuple[str, str, float]]:
    """(module, test name, seconds) of every test case in the report."""
    root = ET.parse(path).getroot()
    return [
        (case.get("classname", ""), case.get("name", ""), float(case.get("time", 0.0)))
        for case in root.iter("testcase")
    ]


def by_module(cases: list[tuple[str, str, float]]) -> tuple[dict[str, float], Counter[str]]:
    """Seconds and test counts per module (a test class counts with its module)."""
    seconds: dict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    for classname, _name, took in cases:
        module = ".".join(p for p in classname.split(".") if not p[:1].isupper())
        seconds[module] += took
        counts[module] += 1
    return seconds, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="JUnit XML of a pytest run (--junitxml)")
    parser.add_argument("--top", type=int, default=30, help="modules and tests to list")
    args = parser.parse_args()
    cases = read_report(args.report)
    if not cases:
        sys.exit(f"error: no test cases in {args.report}")
    seconds, counts = by_module(cases)
    total = sum(seconds.values())
    print(f"{len(cases)} tests, {total:.0f} s in {len(seconds)} modules\n")
    print(f"{'seconds':>8} {'tests':>6} {'share':>6}  module")
    running = 0.0
    modules = []
    for module, took in sorted(seconds.items(), key=lambda m: -m[1])[: args.top]:
        running += took
        print(f"{took:8.1f} {counts[module]:6d} {running / total:6.0%}  {module}")
        modules.append({"module": module, "seconds": round(took, 2), "tests": counts[module]})
    print(f"\n{'seconds':>8}  slowest tests")
    slowest = sorted(cases, key=lambda c: -c[2])[: args.top]
    for classname, name, took in slowest:
        print(f"{took:8.1f}  {classname}::{name}")
    write_results(
        "profile_tests",
        {
            "tests": len(cases),
            "seconds": round(total, 1),
            "modules": modules,
            "slowest": [{"test": f"{c}::{n}", "seconds": round(t, 2)} for c, n, t in slowest],
        },
    )


if __name__ == "__main__":
    main()
