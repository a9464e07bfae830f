"""Option values without meaning are refused with one line before anything is computed
(issue: hardening, cases 8, 11 and 12): ``gpuspark plan`` and ``gpuspark plan calibrate`` as
a user types them, in process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.main import main
from gpuspark.errors import PlanError
from gpuspark.plan import (
    PLAN_RANGES,
    CalibrateOptions,
    PlanRequest,
    check_calibrate,
    find_workload,
    predict,
)
from gpuspark.spec import load_spec

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "cluster.toml")
PLAN = ["plan", "--spec", EXAMPLE, "--global-batch", "2048"]
MODEL = [*PLAN, "--model", "resnet50"]
CUSTOM = [*PLAN, "--params", "1000", "--flops-per-sample", "1e9"]


def refused(args: list[str], capsys: pytest.CaptureFixture[str], *texts: str) -> str:
    """Run the CLI; it must exit 1 or 2 with one ``error:`` line holding ``texts``."""
    rc = main(args)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc in (1, 2), (rc, captured.out[-300:])
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    for text in texts:
        assert text in err, err
    return err


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Anything past the checks fails the test: predicting, plotting, starting ranks."""

    def forbidden(*_: Any, **__: Any) -> Any:
        raise AssertionError("work started before the options were checked")

    for name in ("predict", "sweep"):
        monkeypatch.setattr(f"gpuspark.plan.{name}", forbidden)
    monkeypatch.setattr("gpuspark.plan.render.plot_scaling", forbidden)
    monkeypatch.setattr("gpuspark.launch.run", forbidden)


# --------------------------------------------------------------------------- plan: ranges

BIG = str(2**53 + 1)


@pytest.mark.parametrize(
    ("args", "texts"),
    [
        ([*PLAN[:-1], "0", "--model", "resnet50"], ["--global-batch 0", "from 1 to"]),
        ([*PLAN[:-1], "-5", "--model", "resnet50"], ["--global-batch -5"]),
        ([*PLAN[:-1], BIG, "--model", "resnet50"], [f"--global-batch {BIG}"]),
        ([*MODEL, "--nodes", "0"], ["--nodes 0", "from 1 to 1,000,000"]),
        ([*MODEL, "--nodes", "10000000"], ["--nodes 10000000"]),
        ([*MODEL, "--gpus", "0"], ["--gpus 0"]),
        ([*MODEL, "--efficiency", "0"], ["--efficiency 0.0", "> 0 and <= 1"]),
        ([*MODEL, "--efficiency", "1.5"], ["--efficiency 1.5"]),
        ([*MODEL, "--efficiency", "nan"], ["--efficiency", "nan"]),
        ([*MODEL, "--efficiency", "inf"], ["--efficiency", "inf"]),
        ([*MODEL, "--epochs", "0"], ["--epochs 0.0"]),
        ([*MODEL, "--epochs", "nan"], ["--epochs", "nan"]),
        ([*MODEL, "--epochs", "inf"], ["--epochs", "inf"]),
        ([*MODEL, "--epochs", "90", "--samples", "0"], ["--samples 0"]),
        ([*MODEL, "--decode-per-core", "0"], ["--decode-per-core 0.0", "(inf allowed)"]),
        ([*MODEL, "--decode-per-core", "-230"], ["--decode-per-core -230.0"]),
        ([*MODEL, "--decode-per-core", "nan"], ["--decode-per-core", "nan"]),
        ([*MODEL, "--dtype", "fp8"], ["--dtype 'fp8' is unknown", "fp32, tf32, bf16, fp16"]),
        ([*MODEL, "--dtype", ""], ["--dtype"]),
        ([*MODEL, "--strategy", "zero"], ["--strategy 'zero' is unknown"]),
        ([*MODEL, "--compression", "zstd"], ["--compression 'zstd' is unknown"]),
        ([*MODEL, "--compression", ""], ["--compression"]),
        ([*MODEL, "--compression", "powersgd:0"], ["powersgd:0", "rank R must be"]),
        ([*MODEL, "--compression", "powersgd:"], ["'powersgd:'", "rank R must be"]),
        ([*MODEL, "--compression", "powersgd:two"], ["powersgd:two", "rank R must be"]),
        ([*MODEL, "--compression", "fp16:2"], ["'fp16:2' is unknown"]),
        ([*MODEL, "--model", "resnt50"], ["--model 'resnt50' is unknown"]),
        ([*PLAN, "--model", ""], ["--model"]),
        ([*PLAN, "--params", "0", "--flops-per-sample", "1e9"], ["--params 0", "from 1 to"]),
        ([*PLAN, "--params", BIG, "--flops-per-sample", "1e9"], [f"--params {BIG}"]),
        ([*PLAN, "--params", "10", "--flops-per-sample", "0"], ["--flops-per-sample 0.0"]),
        ([*PLAN, "--params", "10", "--flops-per-sample", "nan"], ["--flops-per-sample", "nan"]),
        ([*PLAN, "--params", "10", "--flops-per-sample", "inf"], ["--flops-per-sample", "inf"]),
        ([*PLAN, "--params", "10", "--flops-per-sample", "1e30"], ["<= 1e+24"]),
    ],
)
def test_plan_refuses_a_value_out_of_range(
    args: list[str], texts: list[str], capsys: pytest.CaptureFixture[str], no_work: None
) -> None:
    refused(args, capsys, *texts)


# --------------------------------------------------------------------------- plan: combinations


@pytest.mark.parametrize(
    ("args", "texts"),
    [
        # a node of the example holds 8 GPUs
        ([*MODEL, "--gpus", "12"], ["--gpus 12 is more than one node holds (8)"]),
        ([*MODEL, "--gpus", "8", "--nodes", "3"], ["--gpus 8 on --nodes 3"]),
        ([*MODEL, "--gpus", "24", "--nodes", "2"], ["--gpus 24 on --nodes 2", "from 1 to 8"]),
        ([*MODEL, "--gpus", "3"], ["--global-batch 2048 does not split evenly over 3 GPUs"]),
        ([*PLAN[:-1], "4", "--model", "resnet50", "--gpus", "8"], ["0.5 samples each"]),
        ([*MODEL, "--params", "10"], ["--model resnet50 and --params both name the model"]),
        ([*MODEL, "--flops-per-sample", "1e9"], ["--flops-per-sample both name the model"]),
        ([*PLAN, "--params", "10"], ["--flops-per-sample is missing"]),
        ([*PLAN], ["no model to plan"]),
        ([*MODEL, "--strategy", "fsdp", "--compression", "fp16"], ["DDP communication hook"]),
        ([*MODEL, "--samples", "5000"], ["--samples 5000 would be ignored", "--epochs"]),
        ([*MODEL, "--epochs", "1", "--samples", "100"], ["epoch of 100 samples is less than"]),
        ([*CUSTOM, "--epochs", "3"], ["size of an epoch of custom is unknown", "--samples"]),
        ([*CUSTOM, "--decode-per-core", "100"], ["--decode-per-core 100 would be ignored"]),
        ([*CUSTOM, "--compression", "powersgd"], ["weight shapes"]),
        ([*MODEL, "--sweep", "nodes=4..1"], ["--sweep 'nodes=4..1' is not nodes=A..B"]),
        ([*MODEL, "--sweep", "nodes=0..3"], ["--sweep 'nodes=0..3'"]),
        ([*MODEL, "--sweep", "gpus=1..3"], ["nodes=A..B"]),
        ([*MODEL, "--sweep", "nodes="], ["--sweep 'nodes='"]),
        ([*MODEL, "--sweep", ""], ["--sweep"]),
        ([*MODEL, "--sweep", "nodes=1..100000000"], ["100,000,000 node counts; at most 1,024"]),
        ([*MODEL, "--sweep", "nodes=1..10" + "0" * 30], ["at most 1,024"]),
        ([*MODEL, "--sweep", "nodes=1,2,2"], ["names a node count twice"]),
        ([*MODEL, "--sweep", "nodes=1,200000"], ["--sweep nodes 200000", "from 1 to 125,000"]),
        ([*MODEL, "--plot", "x.png"], ["--plot draws a sweep"]),
        ([*MODEL, "--calibration", "/no/such.json"], ["does not exist"]),
    ],
)
def test_plan_refuses_options_that_do_not_fit_together(
    args: list[str], texts: list[str], capsys: pytest.CaptureFixture[str], no_work: None
) -> None:
    refused(args, capsys, *texts)


def test_plan_options_before_calibrate_are_refused(
    capsys: pytest.CaptureFixture[str], no_work: None
) -> None:
    args = ["plan", "--model", "resnet50", "--json", "calibrate"]
    refused(args, capsys, "plan calibrate does not take the plan's options (--model, --json)")


@pytest.mark.parametrize(
    ("args", "option"),
    [([*MODEL, "--nodes", "two"], "--nodes"), ([*MODEL, "--efficiency", "high"], "--efficiency"),
     ([*PLAN[:-1], "2k"], "--global-batch"), (["plan", "calibrate", "--batch", "4.5"], "--batch"),
     (["plan", "calibrate", "--width", ""], "--width")],
)  # fmt: skip
def test_a_value_of_the_wrong_type_is_a_usage_error(
    args: list[str], option: str, capsys: pytest.CaptureFixture[str], no_work: None
) -> None:
    """Parsed by the command-line library before the command runs: a usage error naming the
    option."""
    refused(args, capsys, f"Invalid value for '{option}'")


def test_efficiency_is_refused_when_a_calibration_measured_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_work: None
) -> None:
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"compute": _probe()}))
    args = [*MODEL, "--calibration", str(cal), "--efficiency", "0.5"]
    refused(args, capsys, "--efficiency 0.5 would be ignored", "calibration measured compute")


def _probe(**changes: Any) -> dict[str, Any]:
    probe = {"recipe": "resnet3d", "options": {}, "input_shape": [1, 8, 8, 8], "batch": 4,
             "ranks": 2, "threads": 1, "sample_s": 0.01, "backward_share": 0.6,
             "optimizer_s": 0.001, "flops_per_sample": 1e9, "shapes": [[4, 1, 3, 3, 3]],
             "straggler_s": 0.0, "hook_s": {"none": 0.0}}  # fmt: skip
    return {**probe, **changes}


_ROW = {"bytes": 1024, "time_s": 1e-4, "algbw": 1e7, "busbw": 1e7}


@pytest.mark.parametrize(
    ("doc", "text"),
    [
        ({"allreduce": {"world": 2, "backend": "gloo", "rows": []}}, "without rows"),
        ({"allreduce": {"world": 1, "backend": "gloo", "rows": [_ROW]}}, "allreduce.world"),
        ({"allreduce": {"world": 2, "backend": "gloo", "rows": [{**_ROW, "time_s": 0}]}},
         "allreduce.rows[0].time_s"),
        ({"allreduce": {"world": 2, "backend": "gloo", "rows": [{**_ROW, "busbw": -1}]}},
         "allreduce.rows[0].busbw"),
        ({"compute": _probe(sample_s=0)}, "compute.sample_s"),
        ({"compute": _probe(flops_per_sample=float("nan"))}, "compute.flops_per_sample"),
        ({"compute": _probe(optimizer_s=-1)}, "compute.optimizer_s"),
        ({"compute": _probe(backward_share=1.5)}, "backward_share must be below 1"),
        ({"compute": _probe(shapes=[[0, 3]])}, "compute.shapes"),
        ({"decode": {"jpeg": 0}}, "decode.jpeg"),
        ({"decode": {"jpeg": float("inf")}}, "decode.jpeg"),
    ],
)  # fmt: skip
def test_a_calibration_file_with_figures_out_of_range_is_refused(
    doc: dict[str, Any],
    text: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_work: None,
) -> None:
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(doc))
    refused([*MODEL, "--calibration", str(cal)], capsys, text, str(cal))


@pytest.mark.parametrize(
    ("doc", "text"),
    [
        # A section's own fields of the wrong type: once a traceback (hook_s) or Python's own
        # words ("argument after ** must be a mapping", "'int' object is not iterable").
        ({"compute": _probe(hook_s="fast")}, "compute.hook_s must be an object, got a string"),
        ({"compute": _probe(shapes=[3])}, "compute.shapes[0] must be a list, got a whole"),
        ({"compute": _probe(input_shape=64)}, "compute.input_shape must be a list, got a whole"),
        ({"compute": _probe(threads="2")}, "compute.threads must be a whole number, got a str"),
        ({"compute": _probe(recipe=3)}, "compute.recipe must be a string, got a whole number"),
        ({"allreduce": {"world": 2, "backend": "gloo", "rows": ["1k"]}},
         "allreduce.rows[0] must be an object, got a string"),
        ({"allreduce": {"world": "two", "backend": "gloo", "rows": [_ROW]}},
         "allreduce.world must be a whole number, got a string"),
        ({"allreduce": {"world": 2, "rows": [_ROW]}}, "allreduce.backend is missing"),
        ({"allreduce": {"world": 2, "backend": "gloo", "rows": [{**_ROW, "gbps": 1}]}},
         "unknown field 'gbps' in allreduce.rows[0] (allreduce.rows[0] has bytes, time_s,"),
        ({"decode": {"jpeg": "fast"}}, "decode.jpeg must be a number, got a string"),
        ({"decode": {"jpeg": True}}, "decode.jpeg must be a number, got true/false"),
    ],
)  # fmt: skip
def test_a_calibration_field_of_the_wrong_type_is_named(
    doc: dict[str, Any],
    text: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_work: None,
) -> None:
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(doc))
    refused([*MODEL, "--calibration", str(cal)], capsys, f"calibration file {cal} ", text)


def test_a_calibration_as_written_is_read_back(tmp_path: Path) -> None:
    """Every field the layout checks is one :func:`save_calibration` writes, and back."""
    from dataclasses import fields

    from gpuspark.plan import (
        AllreduceRow,
        AllreduceSweep,
        Calibration,
        ComputeProbe,
        load_calibration,
        save_calibration,
    )

    probe = _probe()
    probe["input_shape"] = tuple(probe["input_shape"])
    probe["shapes"] = tuple(tuple(s) for s in probe["shapes"])
    rows = (AllreduceRow(**_ROW),)
    cal = Calibration(AllreduceSweep(2, "gloo", rows), ComputeProbe(**probe), {"jpeg": 230.0})
    cal.machine = {"cpu_count": 2, "cuda": None}
    assert load_calibration(save_calibration(cal, tmp_path / "cal.json")) == cal
    assert {f.name for f in fields(ComputeProbe)} == set(_probe()) | {"device"}


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("list", "a JSON list, not an object"),
        ("decode-list", "not a gpuspark calibration"),
        ("dir", "cannot be read: Is a directory"),
        ("below-a-file", "cannot be read: Not a directory"),
    ],
)
def test_a_calibration_that_is_no_calibration_file_is_one_line(
    kind: str, text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_work: None
) -> None:
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "decode-list.json").write_text('{"decode": [1]}')
    (tmp_path / "plain.txt").write_text("text")
    path = {"list": tmp_path / "list.json", "decode-list": tmp_path / "decode-list.json",
            "dir": tmp_path, "below-a-file": tmp_path / "plain.txt" / "c.json"}[kind]  # fmt: skip
    refused([*MODEL, "--calibration", str(path)], capsys, f"calibration file {path}", text)


# ------------------------------------------------------------- plan without --spec (case 12)


@pytest.fixture
def built_in_spec(monkeypatch: pytest.MonkeyPatch, no_work: None) -> None:
    """No --spec and no GPUSPARK_SPEC: the built-in spec (the embedded cluster)."""
    monkeypatch.delenv("GPUSPARK_SPEC", raising=False)


def test_plan_without_a_spec_says_exactly_what_to_pass(
    capsys: pytest.CaptureFixture[str], built_in_spec: None
) -> None:
    """It said "GPU model 'any' is not in the planner's table", a value the user never wrote."""
    from gpuspark.plan import GPUS
    from gpuspark.plan.checks import BUILT_IN_SPEC
    from gpuspark.spec import default_spec

    spec = default_spec()
    assert (spec.name, spec.nodes[0].gpu_model) == BUILT_IN_SPEC
    err = refused(
        ["plan", "--model", "resnet50", "--global-batch", "64"],
        capsys,
        "the built-in spec (no --spec given) has none",
        "pass --spec FILE whose gpu_model is one of ",
        "`gpuspark init cluster.toml` writes one",
        "or --calibration FILE written by `gpuspark plan calibrate`",
    )
    assert all(g.name in err for g in GPUS)


def test_plan_without_a_spec_names_an_unknown_model_first(
    capsys: pytest.CaptureFixture[str], built_in_spec: None
) -> None:
    """The unknown --model is named, with the known ones, not the spec's GPU model."""
    err = refused(
        ["plan", "--model", "resnt50", "--global-batch", "64"],
        capsys,
        "--model 'resnt50' is unknown (did you mean 'resnet50'?)",
        "resnet50, bert-large, resnet3d, resnet2d",
    )
    assert "GPU" not in err


def test_plan_without_arguments_names_both_missing(
    capsys: pytest.CaptureFixture[str], built_in_spec: None
) -> None:
    refused(["plan"], capsys, "plan needs --global-batch N and a model: --model NAME, or")
    refused(["plan", "--global-batch", "64"], capsys, "no model to plan")
    assert "missing" not in refused(["plan", "--global-batch", "64"], capsys)


def test_a_spec_gpu_the_planner_lacks_is_named_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_work: None
) -> None:
    spec = tmp_path / "v100.toml"
    spec.write_text(Path(EXAMPLE).read_text().replace('"A100-SXM4-80GB"', '"V100-SXM2-32GB"'))
    refused(
        ["plan", "--spec", str(spec), "--model", "resnet50", "--global-batch", "64"],
        capsys,
        "GPU model 'V100-SXM2-32GB' of spec 'dgx-a100' is not in the planner's table",
        "set gpu_model to one of A100-SXM4-40GB, ",
        "--calibration FILE",
    )


def test_calibrate_names_a_bad_spec_before_its_default_out(
    capsys: pytest.CaptureFixture[str], no_work: None
) -> None:
    refused(["plan", "calibrate", "--spec", "/no/such.toml"], capsys, "/no/such.toml: no such")
    refused(["plan", "calibrate", "--spec", ""], capsys, "--spec")


# --------------------------------------------------------------------------- --plot, --out


def _bad_paths(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Output paths no command can write, and the words of their refusal. Tests run as root,
    which ignores permission bits: an unwritable folder is one below a regular file."""
    plain = tmp / "plain.txt"
    plain.write_text("a file, not a folder\n")
    (tmp / "a-dir").mkdir()
    return {
        "dir": (tmp / "a-dir", "is a directory, not a file"),
        "cwd": (Path(""), "is a directory, not a file"),
        "parent-missing": (tmp / "no-such" / "x.png", f"{tmp / 'no-such'} does not exist"),
        "parent-is-a-file": (plain / "x.png", f"{plain} is a file"),
        "below-a-file": (plain / "sub" / "x.png", f"{plain} is a file"),
    }


KINDS = ["dir", "cwd", "parent-missing", "parent-is-a-file", "below-a-file"]


@pytest.mark.parametrize("kind", KINDS)
def test_plot_path_is_checked_before_any_computation(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_work: None
) -> None:
    path, text = _bad_paths(tmp_path)[kind]
    refused([*MODEL, "--sweep", "nodes=1..2", "--plot", str(path)], capsys, "--plot", text)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "plain.txt"]


@pytest.mark.parametrize("kind", ["dir", "parent-missing", "below-a-file"])
def test_calibrate_out_path_is_checked_before_any_rank_starts(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_work: None
) -> None:
    path, text = _bad_paths(tmp_path)[kind]
    refused(["plan", "calibrate", "--out", str(path)], capsys, "--out", text)


def test_an_unwritable_plot_folder_is_found_by_trying(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_work: None,
) -> None:
    """A read-only mount refuses root too; permission bits do not. The check creates a file."""

    def read_only(*_: Any, **__: Any) -> Any:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr("tempfile.mkstemp", read_only)
    args = [*MODEL, "--sweep", "nodes=1..2", "--plot", str(tmp_path / "s.png")]
    refused(args, capsys, f"cannot write in {tmp_path} (Read-only file system)")


def test_decoding_on_the_gpus_is_an_infinite_decode_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--decode-per-core inf`` (documented in its help): no input wait, e.g. with DALI."""
    assert main([*MODEL, "--decode-per-core", "inf", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["decode_s"] == 0 and plan["sources"]["decode"] == "option"


def test_the_plot_replaces_a_file_atomically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "scaling.png"
    png.write_text("old")
    assert main([*MODEL, "--sweep", "nodes=1..2", "--plot", str(png), "--json"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["scaling.png"]  # no temporary file left


# --------------------------------------------------------------------------- calibrate


@pytest.mark.parametrize(
    ("args", "texts"),
    [
        (["--input", "1,0,32"], ["--input 1,0,32: resnet3d takes 4 sizes, got 3"]),
        (["--input", "1,0,32,32"], ["--input 1,0,32,32: every size must be a whole number >= 1"]),
        (["--input", "1,-8,32,32"], ["every size must be a whole number >= 1"]),
        (["--input", "3,32,32,32"], ["resnet3d takes 1 channel(s), got 3"]),
        (["--input", "1,x,3,3"], ["--input '1,x,3,3' is not comma-separated whole numbers"]),
        (["--input", ""], ["--input"]),
        (["--input", "1.5,8,8,8"], ["is not comma-separated whole numbers"]),
        (["--input", "1,16,16,16", "--batch", "1"], ["shrinks each side 16x, to 1x1x1"]),
        (["--recipe", "resnet2d", "--input", "1,64,64,64"], ["resnet2d takes 3 sizes"]),
        (["--recipe", "resnet2d", "--input", "3,16,16", "--batch", "1"], ["to 1x1"]),
        (["--input", "1,4096,4096,4096"], ["GiB for the compute probes"]),
        (["--batch", "0"], ["--batch 0"]),
        (["--batch", "100000000"], ["GiB for the compute probes"]),
        (["--threads", "0"], ["--threads 0"]),
        (["--threads", "100000"], ["--threads 100000", "from 1 to 1,024"]),
        (["-n", "1"], ["-n/--num-processes 1", "from 2"]),
        (["-n", "100000"], ["-n/--num-processes 100000"]),
        (["--width", "0"], ["--width 0.0"]),
        (["--width", "0.01"], ["--width 0.01", ">= 0.015625"]),
        (["--width", "nan"], ["--width", "nan"]),
        (["--width", "inf"], ["--width", "inf"]),
        (["--width", "100"], ["--width 100.0", "<= 8"]),
        (["--depth", "7"], ["--depth 7 is not a ResNet depth", "10, 18, 34, 50"]),
        (["--recipe", "resnet2d", "--depth", "18"], ["--depth does not apply to resnet2d"]),
        (["--recipe", "bert"], ["--recipe 'bert' cannot be probed", "resnet3d, resnet2d"]),
        (["--recipe", "tabular"], ["--recipe 'tabular' cannot be probed"]),
        (["--recipe", ""], ["--recipe"]),
    ],
)
def test_calibrate_refuses_before_any_rank_starts(
    args: list[str],
    texts: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_work: None,
) -> None:
    out = tmp_path / "cal.json"
    # --local: the memory and core limits are this machine's (on Spark, the executors')
    refused(["plan", "calibrate", "--local", *args, "--out", str(out)], capsys, *texts)
    assert not out.exists()


def test_local_ranks_and_threads_stop_at_the_cores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    out = ["--out", str(tmp_path / "c.json")]
    local = ["plan", "calibrate", "--local"]
    refused([*local, "-n", "5", *out], capsys, "from 2 to 4", "4 cores", "without --local")
    refused([*local, "--threads", "5", *out], capsys, "from 1 to 4")


def test_the_smallest_input_is_what_the_network_takes() -> None:
    """The rule of check_calibrate against the real network: at batch 1 a side of 16 leaves
    batch norm one value per channel (torch refuses), 17 leaves two; any side at batch 2."""
    import torch

    from gpuspark.train.recipes import RecipeConfig, build_model

    options = {"depth": 10, "width": 1 / 16}
    net = build_model("resnet3d", RecipeConfig(data="-", **options), 2)
    for shape, batch, runs in [((1, 16, 16, 16), 1, False), ((1, 17, 16, 16), 1, True),
                               ((1, 1, 1, 1), 2, True)]:  # fmt: skip
        opts = CalibrateOptions(options=options, input_shape=shape, batch=batch)
        try:
            net(torch.zeros((batch, *shape))).sum().backward()
            torch_runs = True
        except ValueError as exc:
            assert "more than 1 value per channel" in str(exc)
            torch_runs = False
        assert torch_runs is runs
        if runs:
            check_calibrate(opts, local=False)
        else:
            with pytest.raises(PlanError, match="batch norm"):
                check_calibrate(opts, local=False)


# --------------------------------------------------------------------------- the library

BAD = [0, -1, "above", 10**400, float("nan"), float("inf"), float("-inf"), "8", True]


@pytest.mark.parametrize("name", sorted(PLAN_RANGES))
@pytest.mark.parametrize("value", BAD, ids=repr)
def test_every_range_refuses_what_has_no_meaning(name: str, value: Any) -> None:
    rule = PLAN_RANGES[name]
    if value == "above":  # just above the range; nothing is above "as fast as it gets"
        value = (rule.hi + 1 if rule.whole else rule.hi * 2) if rule.hi != float("inf") else -2
    fast = name == "decode_per_core" and value == float("inf")  # inf: decoded on the GPUs
    assert rule.holds(value) is fast
    if not fast:
        with pytest.raises(PlanError, match=f"^{rule.option} .* is out of range: it must be "):
            rule.check(value)


def test_plan_request_checks_its_fields_like_recipe_config() -> None:
    work = find_workload("resnet50")
    with pytest.raises(PlanError, match="--efficiency 2"):
        PlanRequest(work, 64, efficiency=2)
    with pytest.raises(PlanError, match="--global-batch 0"):
        PlanRequest(work, 0)
    with pytest.raises(PlanError, match="--nodes True"):
        PlanRequest(work, 64, nodes=True)  # type: ignore[arg-type]


def test_nodes_and_gpus_together_put_gpus_over_nodes_on_each() -> None:
    dgx = load_spec(EXAMPLE)
    work = find_workload("resnet50")
    spread = predict(dgx, PlanRequest(work, 1024, nodes=4, gpus=8))
    packed = predict(dgx, PlanRequest(work, 1024, gpus=8))
    assert (spread.nodes, spread.gpus, packed.nodes, packed.gpus) == (4, 8, 1, 8)
    assert spread.comm_s > packed.comm_s  # the network is slower than NVLink
