"""``gpuspark plan``: predicted step time, comm share, scaling and time to train for a spec;
``gpuspark plan calibrate``: measure the cluster at hand for the model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuspark.cli._common import JsonOpt, SpecOpt, echo, parse_numbers, print_json, print_table

if TYPE_CHECKING:
    from gpuspark.plan import Calibration, Workload

plan_app = typer.Typer(
    help="Predict step time, communication share, scaling and time to train; calibrate.",
    invoke_without_command=True,
)


def register(app: typer.Typer) -> None:
    """Add the ``plan`` group to ``app``."""
    app.add_typer(plan_app, name="plan")


def parse_sweep(text: str) -> list[int]:
    """``nodes=1..8`` or ``nodes=1,2,4`` -> node counts; anything else is a usage error."""
    key, _, values = text.partition("=")
    try:
        if key.strip() != "nodes" or not values:
            raise ValueError
        if ".." in values:
            lo, hi = (int(v) for v in values.split(".."))
            counts = list(range(lo, hi + 1))
        else:
            counts = [int(v) for v in values.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise typer.BadParameter(
            f"expected nodes=A..B or nodes=A,B,C (whole numbers >= 1), got {text!r}",
            param_hint="--sweep",
        )
    return counts


def _workload(
    model: str | None, params: int | None, flops: float | None, cal: Calibration | None
) -> Workload:
    from gpuspark.errors import PlanError
    from gpuspark.plan import Workload, custom_workload, find_workload, workload_names

    probe = cal.compute if cal is not None else None
    if model is not None and probe is not None and probe.recipe == model:
        # The calibrated network itself: its shapes and FLOPs were recorded by the probe.
        from gpuspark.train.recipes import get_recipe

        fmt = get_recipe(model).input_kind or "jpeg"
        return Workload(model, probe.shapes, probe.flops_per_sample, decode_format=fmt)
    if model is not None:
        return find_workload(model)
    if params is None or flops is None:
        missing = "--params" if params is None else "--flops-per-sample"
        raise PlanError(
            f"no model to plan: give --model NAME, or --params and --flops-per-sample "
            f"({missing} is missing)",
            remedy="known models: " + ", ".join(workload_names()),
        )
    return custom_workload(params, flops)


@plan_app.callback()
def plan(
    ctx: typer.Context,
    spec: SpecOpt = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="resnet50, bert-large, resnet3d or resnet2d."),
    ] = None,
    params: Annotated[
        int | None, typer.Option("--params", help="Parameter count (instead of --model).")
    ] = None,
    flops: Annotated[
        float | None,
        typer.Option("--flops-per-sample", help="Forward + backward FLOPs of one sample."),
    ] = None,
    global_batch: Annotated[
        int | None, typer.Option("--global-batch", help="Samples per optimizer step, all GPUs.")
    ] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", min=1, help="Nodes [default 1].")] = None,
    gpus: Annotated[
        int | None, typer.Option("--gpus", min=1, help="GPUs (instead of --nodes).")
    ] = None,
    compression: Annotated[
        str, typer.Option("--compression", help="none, fp16, bf16 or powersgd:R.")
    ] = "none",
    strategy: Annotated[str, typer.Option("--strategy", help="ddp or fsdp.")] = "ddp",
    dtype: Annotated[
        str, typer.Option("--dtype", help="Compute dtype: fp32, tf32, bf16, fp16.")
    ] = "bf16",
    efficiency: Annotated[
        float | None,
        typer.Option(
            "--efficiency",
            help="Share of GPU peak reached [default: from the "
            "model's published throughput, else 0.30].",
        ),
    ] = None,
    epochs: Annotated[float | None, typer.Option("--epochs", help="Epochs to train.")] = None,
    samples: Annotated[
        int | None, typer.Option("--samples", help="Samples per epoch [default: the model's].")
    ] = None,
    decode: Annotated[
        float | None,
        typer.Option(
            "--decode-per-core",
            help="Samples/s one CPU core decodes [default: "
            "calibration, else 230 JPEG / 2,000 volumes]; inf: decoded on the GPUs.",
        ),
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option("--calibration", help="JSON from `gpuspark plan calibrate`."),
    ] = None,
    sweep_text: Annotated[
        str | None, typer.Option("--sweep", help="nodes=1..8: one plan per node count.")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="With --sweep: write the scaling PNG here.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Predict one training step on the spec's GPUs: compute, all communication and the part
    not hidden behind backward, input wait, samples/s, scaling efficiency, time to train and
    the bottleneck. Figures come from the spec and published references, or a calibration."""
    if ctx.invoked_subcommand is not None:
        return
    from gpuspark.errors import PlanError
    from gpuspark.plan import PlanRequest, load_calibration, parse_compression, predict, sweep
    from gpuspark.plan.render import breakdown_rows, plot_scaling, sweep_rows
    from gpuspark.spec import resolve_spec

    if global_batch is None:
        raise PlanError("--global-batch is required", remedy="e.g. --global-batch 2048")
    counts = parse_sweep(sweep_text) if sweep_text else None
    if plot is not None and counts is None:
        raise PlanError("--plot draws a sweep", remedy="add --sweep nodes=1..8")
    kind, rank = parse_compression(compression)
    cal = load_calibration(calibration) if calibration is not None else None
    req = PlanRequest(
        workload=_workload(model, params, flops, cal),
        global_batch=global_batch,
        nodes=nodes,
        gpus=gpus,
        compression=kind,
        powersgd_rank=rank,
        strategy=strategy,
        dtype=dtype,
        efficiency=efficiency,
        epochs=epochs,
        samples=samples,
        decode_per_core=decode,
    )
    spec_obj = resolve_spec(spec)
    if counts is None:
        one = predict(spec_obj, req, cal)
        if json_out:
            print_json(one.as_dict())
            return
        print_table(f"plan: {one.model} on {spec_obj.name}", ["figure", "value"],
                    breakdown_rows(one))  # fmt: skip
        echo(f"bottleneck: [bold]{one.bottleneck}[/]")
        return
    plans = sweep(spec_obj, req, counts, cal)
    if plot is not None:
        plot_scaling(plans, plot)
    if json_out:
        print_json({"plans": [p.as_dict() for p in plans], "plot": str(plot) if plot else None})
        return
    columns = ["nodes", "GPUs", "step ms", "comm", "samples/s", "scaling", "train", "bound by"]
    print_table(f"plan sweep: {req.workload.name} on {spec_obj.name}", columns, sweep_rows(plans))
    if plot is not None:
        echo(f"plot: {plot}")


def _default_out(spec: Path | None) -> Path:
    if spec is not None:
        return spec.with_name(spec.stem + ".calibration.json")
    return Path("gpuspark-calibration.json")


@plan_app.command("calibrate")
def calibrate_cmd(
    spec: SpecOpt = None,
    recipe: Annotated[
        str, typer.Option("--recipe", help="Network of the compute probe: resnet3d, resnet2d.")
    ] = "resnet3d",
    depth: Annotated[int, typer.Option("--depth", help="resnet3d depth.")] = 18,
    width: Annotated[float, typer.Option("--width", help="MONAI widen_factor.")] = 1.0,
    input_shape: Annotated[
        str | None,
        typer.Option(
            "--input",
            help="One sample's shape, e.g. 1,64,64,64 [default: resnet3d "
            "1,64,64,64; resnet2d 3,224,224].",
        ),
    ] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Per-rank batch.")] = 4,
    threads: Annotated[int, typer.Option("--threads", min=1, help="torch threads per rank.")] = 1,
    ranks: Annotated[int, typer.Option("-n", "--num-processes", min=2, help="Ranks.")] = 2,
    spark: Annotated[
        bool, typer.Option("--spark/--local", help="Ranks on the Spark cluster or locally.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Where to write [default: SPEC.calibration.json next to the "
            "spec, else ./gpuspark-calibration.json].",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Measure this cluster: an all-reduce sweep (nccl-tests columns), the recipe's forward +
    backward per sample with all ranks running, and decode samples/s per core."""
    from gpuspark.plan import CalibrateOptions, calibrate, save_calibration

    shape = parse_numbers(input_shape, int, None, "--input", "comma-separated sizes")
    from gpuspark.train.recipes import get_recipe

    options: dict[str, object] = {"width": width}
    if "depth" in get_recipe(recipe).shape_options:
        options["depth"] = depth
    opts = CalibrateOptions(recipe=recipe, options=options, input_shape=shape, batch=batch,
                            threads=threads, ranks=ranks)  # fmt: skip
    cal = calibrate(opts, spec=spec, local=not spark)
    path = save_calibration(cal, out or _default_out(spec))
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
