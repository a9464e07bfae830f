"""``gpuspark doctor logs PATH...``: match logs against the catalogue of known failures."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuspark.cli._common import JsonOpt, SpecOpt, print_json

if TYPE_CHECKING:
    from gpuspark.doctor.logs import Diagnosis, Finding

echo = typer.echo  # plain text: log lines carry [brackets] that rich would read as markup

EveryOpt = Annotated[
    bool,
    typer.Option("--all", help="List every occurrence, not the first one per known problem."),
]


def logs(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Log files or directories (driver/executor logs, Spark event log dir, "
            "rank logs kept with GPUSPARK_KEEP_LOGS=1).",
            exists=True,
            show_default=False,
        ),
    ],
    spec: SpecOpt = None,
    every: EveryOpt = False,
    json: JsonOpt = False,
) -> None:
    """Explain a failed job: known problems in the logs, where, the likely cause and the fix.

    Exit code 0 when the logs were read, whether or not a known problem was found (the
    findings are the output); 1 when a path cannot be read or is neither a file nor a directory
    (a FIFO, a device); 2 for usage errors. Unknown logs print "no known problem found" and
    their last error lines (never INFO lines). With --spec, messages that depend on the
    network (NCCL on sockets on an InfiniBand cluster) are checked too.
    """
    from gpuspark.doctor.logs import diagnose

    network = None
    if spec is not None:
        from gpuspark.spec import load_spec

        network = load_spec(spec).networks.compute.kind
    result = diagnose(paths, network=network, every=every)
    if json:
        print_json(result.as_dict())
        return
    for n, finding in enumerate(result.findings, 1):
        _show(n, finding)
    _summary(result)


def _show(n: int, f: Finding) -> None:
    times = f" (seen {f.count} times)" if f.count > 1 else ""
    echo(f"{n}. [{f.entry.source}] {f.entry.title}{times}")
    echo(f"   where:   {f.where}")
    echo(f"   line:    {f.excerpt}")
    figures = {k: v for k, v in f.values.items() if v is not None and not k.startswith("xid_")}
    if figures:
        echo("   figures: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
    echo(f"   cause:   {f.cause}")
    for i, fix in enumerate(f.fixes):
        echo(f"   {'fix:    ' if i == 0 else '        '} {fix}")
    if f.entry.doc:
        echo(f"   doc:     {f.entry.doc}")
    echo(f"   id:      {f.entry.id}")
    echo("")


def _summary(result: Diagnosis) -> None:
    read = f"{len(result.files)} file(s), {result.lines} line(s)"
    skipped = f"; skipped {len(result.skipped)} file(s) that are not text" if result.skipped else ""
    if result.known:
        echo(f"{len(result.findings)} known problem(s) in {read}{skipped}")
        return
    echo(f"no known problem found in {read}{skipped}")
    if result.error_lines:
        echo("last error lines:")
        for e in result.error_lines:
            echo(f"  {e.file}:{e.line}: {e.text.strip()[:300]}")
    else:
        echo("no error lines either")
