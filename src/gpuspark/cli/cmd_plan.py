"""``gpuspark plan``: predicted step time, comm share, scaling and time to train for a spec;
``gpuspark plan calibrate``: measure the cluster at hand for the model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuspark.cli._checks import check_output_file
from gpuspark.cli._common import (
    ConfOpt,
    JsonOpt,
    SpecOpt,
    deprecated,
    echo,
    new_app,
    print_json,
    print_table,
    spec_with_conf,
)

if TYPE_CHECKING:
    from gpuspark.plan import Calibration, PlanRequest, Workload
    from gpuspark.spec import ClusterSpec

plan_app = new_app(
    help="Predict step time, communication share, scaling and time to train; calibrate.",
    invoke_without_command=True,
)


def register(app: typer.Typer) -> None:
    """Add the ``plan`` group to ``app``."""
    app.add_typer(plan_app, name="plan")


def parse_sweep(text: str) -> list[int]:
    """``nodes=1..8`` or ``nodes=1,2,4`` -> node counts; anything else is refused."""
    from gpuspark.errors import PlanError
    from gpuspark.plan.checks import MAX_SWEEP

    key, _, values = text.partition("=")
    lo, dots, hi = values.partition("..")
    try:
        if key.strip() != "nodes" or not values:
            raise ValueError
        bounds = (int(lo), int(hi)) if dots else None
        counts = [] if dots else [int(v) for v in values.split(",")]
    except ValueError:
        bounds, counts = None, []
    if bounds is not None and bounds[1] - bounds[0] >= MAX_SWEEP:
        raise PlanError(
            f"--sweep {text} names {bounds[1] - bounds[0] + 1:,} node counts; at most "
            f"{MAX_SWEEP:,}",
            remedy="sweep a narrower range, or list the counts: nodes=1,2,4,8",
        )
    if bounds is not None:
        counts = list(range(bounds[0], bounds[1] + 1))
    if not counts or min(counts) < 1:
        raise PlanError(
            f"--sweep {text!r} is not nodes=A..B or nodes=A,B,C (whole numbers, 1 <= A <= B)",
            remedy="e.g. --sweep nodes=1..8",
        )
    return counts


def _workload(
    model: str | None, params: int | None, flops: float | None, cal: Calibration | None
) -> Workload:
    from gpuspark.plan import Workload, custom_workload, find_workload

    probe = cal.compute if cal is not None else None
    if model is not None and probe is not None and probe.recipe == model:
        # The calibrated network itself: its shapes and FLOPs were recorded by the probe.
        from gpuspark.train.recipes import get_recipe

        fmt = get_recipe(model).input_kind or "jpeg"
        return Workload(model, probe.shapes, probe.flops_per_sample, decode_format=fmt)
    if model is not None:
        return find_workload(model)
    assert params is not None and flops is not None  # _check_model
    return custom_workload(params, flops)


def _check_model(model: str | None, params: int | None, flops: float | None) -> None:
    """One way to name the model: ``--model``, or both ``--params`` and ``--flops-per-sample``."""
    from gpuspark.errors import PlanError
    from gpuspark.plan import workload_names

    if model is not None and (params is not None or flops is not None):
        given = "--params" if params is not None else "--flops-per-sample"
        raise PlanError(
            f"--model {model} and {given} both name the model",
            remedy=f"give --model NAME, or --params and --flops-per-sample (drop {given})",
        )
    if model is None and (params is None or flops is None):
        half = params is not None or flops is not None
        missing = f" ({'--params' if params is None else '--flops-per-sample'} is missing)"
        raise PlanError(
            "no model to plan: give --model NAME, or --params and --flops-per-sample"
            f"{missing if half else ''}",
            remedy="known models: " + ", ".join(workload_names()),
        )


@plan_app.callback()
def plan(
    ctx: typer.Context,
    spec: SpecOpt = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="resnet50, bert-large, resnet3d or resnet2d."),
    ] = None,
    params: Annotated[
        int | None,
        typer.Option("--params", help="Parameter count (instead of --model), 1 to 2^53."),
    ] = None,
    flops: Annotated[
        float | None,
        typer.Option(
            "--flops-per-sample", help="Forward + backward FLOPs of one sample, > 0, <= 1e24."
        ),
    ] = None,
    global_batch: Annotated[
        int | None,
        typer.Option(
            "--global-batch",
            help="Samples per optimizer step, all GPUs: a multiple of the GPUs, up to 2^53.",
        ),
    ] = None,
    nodes: Annotated[
        int | None, typer.Option("--nodes", help="Nodes of the spec's first group [default 1].")
    ] = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            "--gpus",
            help="GPUs: up to one node's, or whole nodes; with --nodes, GPUS/NODES per node.",
        ),
    ] = None,
    compression: Annotated[
        str, typer.Option("--compression", help="none, fp16, bf16 or powersgd:R (ddp only).")
    ] = "none",
    strategy: Annotated[str, typer.Option("--strategy", help="ddp or fsdp.")] = "ddp",
    dtype: Annotated[
        str, typer.Option("--dtype", help="Compute dtype: fp32, tf32, bf16, fp16.")
    ] = "bf16",
    efficiency: Annotated[
        float | None,
        typer.Option(
            "--efficiency",
            help="Share of GPU peak reached, > 0 and <= 1 [default: from the "
            "model's published throughput, else 0.30].",
        ),
    ] = None,
    epochs: Annotated[
        float | None, typer.Option("--epochs", help="Epochs to train, > 0, <= 1e6.")
    ] = None,
    samples: Annotated[
        int | None,
        typer.Option("--samples", help="Samples per epoch, with --epochs [default: the model's]."),
    ] = None,
    decode: Annotated[
        float | None,
        typer.Option(
            "--decode-per-core",
            help="Samples/s one CPU core decodes, > 0 [default: "
            "calibration, else 230 JPEG / 2,000 volumes]; inf: decoded on the GPUs.",
        ),
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option("--calibration", help="JSON from `gpuspark plan calibrate`."),
    ] = None,
    sweep_text: Annotated[
        str | None,
        typer.Option("--sweep", help="nodes=1..8: one plan per node count (at most 1024)."),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", help="With --sweep: write the scaling PNG here (folder must exist)."
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Predict one training step on the spec's GPUs: compute, all communication and the part
    not hidden behind backward, input wait, samples/s, scaling efficiency, time to train and
    the bottleneck. Figures come from the spec and published references, or a calibration."""
    if ctx.invoked_subcommand is not None:
        _refuse_options_before(ctx)
        return
    from gpuspark.errors import PlanError
    from gpuspark.plan import (
        PlanRequest,
        check_cluster,
        check_request,
        check_sweep,
        check_values,
        load_calibration,
        parse_compression,
    )
    from gpuspark.spec import resolve_spec

    if global_batch is None:
        named = model is not None or params is not None or flops is not None
        raise PlanError(
            "--global-batch is required"
            if named
            else "plan needs --global-batch N and a model: --model NAME, or --params and "
            "--flops-per-sample",
            remedy="e.g. gpuspark plan --spec cluster.toml --model resnet50 --global-batch 2048",
        )
    _check_model(model, params, flops)
    counts = parse_sweep(sweep_text) if sweep_text is not None else None
    if plot is not None and counts is None:
        raise PlanError("--plot draws a sweep", remedy="add --sweep nodes=1..8")
    if plot is not None:
        check_output_file(plot, "--plot")
    kind, rank = parse_compression(compression)
    values: dict[str, Any] = {
        "global_batch": global_batch, "nodes": nodes, "gpus": gpus, "compression": kind,
        "powersgd_rank": rank, "strategy": strategy, "dtype": dtype, "efficiency": efficiency,
        "epochs": epochs, "samples": samples, "decode_per_core": decode,
    }  # fmt: skip
    check_values(params=params, flops_per_sample=flops, **values)
    cal = load_calibration(calibration) if calibration is not None else None
    work = _workload(model, params, flops, cal)  # an unknown --model first: the user's typo
    spec_obj = resolve_spec(spec)
    check_cluster(spec_obj, cal, global_batch, nodes, gpus, efficiency)
    if counts is not None:
        check_sweep(counts, spec_obj.nodes[0].gpus_per_node)
    req = PlanRequest(workload=work, **values)
    check_request(req, spec_obj, cal)  # what the workload serves, before a plan is computed
    _show(spec_obj, req, cal, counts, plot, json_out)


def _refuse_options_before(ctx: typer.Context) -> None:
    """``plan --model X calibrate``: the plan's options would be ignored by the subcommand."""
    from gpuspark.errors import PlanError

    given = [
        param.opts[0] for param in ctx.command.params
        if param.name and getattr(ctx.get_parameter_source(param.name), "name", "") == "COMMANDLINE"
    ]  # fmt: skip
    if given:
        options = ", ".join(given)
        raise PlanError(
            f"plan {ctx.invoked_subcommand} does not take the plan's options ({options})",
            remedy=f"put options after the command: gpuspark plan {ctx.invoked_subcommand} ...",
        )


def _show(
    spec: ClusterSpec,
    req: PlanRequest,
    cal: Calibration | None,
    counts: list[int] | None,
    plot: Path | None,
    json_out: bool,
) -> None:
    """One plan as a breakdown, or a sweep as a table (and its plot)."""
    from gpuspark.plan import predict, sweep
    from gpuspark.plan.render import breakdown_rows, plot_scaling, sweep_rows

    if counts is None:
        one = predict(spec, req, cal)
        if json_out:
            print_json(one.as_dict())
            return
        print_table(f"plan: {one.model} on {spec.name}", ["figure", "value"], breakdown_rows(one))
        echo(f"bottleneck: [bold]{one.bottleneck}[/]")
        return
    plans = sweep(spec, req, counts, cal)
    if plot is not None:
        plot_scaling(plans, plot)
    if json_out:
        print_json({"plans": [p.as_dict() for p in plans], "plot": str(plot) if plot else None})
        return
    columns = ["nodes", "GPUs", "step ms", "comm", "samples/s", "scaling", "train", "bound by"]
    print_table(f"plan sweep: {req.workload.name} on {spec.name}", columns, sweep_rows(plans))
    if plot is not None:
        echo(f"plot: {plot}")


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    """``1,64,64,64`` -> ``(1, 64, 64, 64)``; text that is not whole numbers is refused (the
    sizes' ranges are the calibration's to check)."""
    from gpuspark.errors import PlanError

    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise PlanError(
            f"--input {text!r} is not comma-separated whole numbers",
            remedy="e.g. --input 1,64,64,64",
        ) from None


def _default_out(spec: Path | None) -> Path:
    if spec is not None:
        return spec.with_name(spec.stem + ".calibration.json")
    return Path("gpuspark-calibration.json")


@plan_app.command("calibrate")
def calibrate_cmd(
    spec: SpecOpt = None,
    conf: ConfOpt = None,
    recipe: Annotated[
        str, typer.Option("--recipe", help="Network of the compute probe: resnet3d, resnet2d.")
    ] = "resnet3d",
    depth: Annotated[
        int | None, typer.Option("--depth", help="resnet3d depth: 10, 18, 34 or 50 [default 18].")
    ] = None,
    width: Annotated[float, typer.Option("--width", help="ResNet widen_factor, 1/64 to 8.")] = 1.0,
    input_shape: Annotated[
        str | None,
        typer.Option(
            "--input",
            help="One sample's shape, e.g. 1,64,64,64 [default: resnet3d "
            "1,64,64,64; resnet2d 3,224,224]; sides of 16 or less need --batch 2 or more.",
        ),
    ] = None,
    batch: Annotated[int, typer.Option("--batch", help="Per-rank batch, >= 1.")] = 4,
    threads: Annotated[
        int, typer.Option("--threads", help="torch threads per rank (local: up to the cores).")
    ] = 1,
    ranks: Annotated[
        int, typer.Option("-n", "--num-processes", help="Ranks, >= 2 (local: up to the cores).")
    ] = 2,
    local: Annotated[
        bool, typer.Option("--local", help="Ranks on this machine, not on the Spark cluster.")
    ] = False,
    spark: Annotated[
        bool,
        typer.Option(
            "--spark", hidden=True, help="Deprecated: ranks on Spark are the default now."
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--out",
            help="Where to write, in an existing folder [default: SPEC.calibration.json next "
            "to the spec, else ./gpuspark-calibration.json].",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Measure this cluster: an all-reduce sweep (nccl-tests columns), the recipe's forward +
    backward per sample with all ranks running, and decode samples/s per core."""
    from gpuspark.plan import CalibrateOptions, calibrate, save_calibration
    from gpuspark.spec import resolve_spec

    spec_obj = resolve_spec(spec_with_conf(spec, conf))  # a bad --spec is named as such
    target = out or _default_out(spec)
    check_output_file(target, "--out")
    options: dict[str, object] = {"width": width}
    if depth is not None:
        options["depth"] = depth
    opts = CalibrateOptions(recipe=recipe, options=options, input_shape=parse_shape(input_shape),
                            batch=batch, threads=threads, ranks=ranks)  # fmt: skip
    if spark:
        deprecated("plan calibrate --spark", "no flag: ranks run on Spark by default")
    cal = calibrate(opts, spec=spec_obj, local=local)
    path = save_calibration(cal, target)
    if json_out:
        print_json({"path": str(path), **cal.as_dict()})
        return
    assert cal.allreduce is not None
    rows = [
        (f"{r.bytes:,}", f"{r.time_s * 1e6:.1f}", f"{r.algbw / 1e9:.3f}", f"{r.busbw / 1e9:.3f}")
        for r in cal.allreduce.rows
    ]
    title = f"all-reduce, {cal.allreduce.world} ranks, {cal.allreduce.backend}"
    print_table(title, ["size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)"], rows)
    if cal.compute is not None:
        c = cal.compute
        echo(f"compute: {c.recipe} {c.sample_s * 1e3:.2f} ms/sample fwd+bwd "
             f"({c.flops_per_s / 1e9:.1f} GFLOP/s per rank), optimizer {c.optimizer_s * 1e3:.1f} "
             f"ms, hooks {({k: round(v * 1e3, 2) for k, v in c.hook_s.items()})} ms, "
             f"end-of-backward wait {c.straggler_s * 1e3:.1f} ms")  # fmt: skip
    for fmt, rate in cal.decode.items():
        echo(f"decode {fmt}: {rate:,.0f} samples/s per core")
    echo(f"calibration: {path}")
