"""One vocabulary across commands: one split syntax for every ``prep`` source, ``--codec``
for record codecs (``--compression`` is gradient compression only), the old spellings kept
for one release with a ``deprecated:`` line."""

from __future__ import annotations

import json
from typing import Any

import pytest
import typer

from gpuspark.cli._common import parse_split


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("train=0.8,val=0.1,test=0.1", (0.8, 0.1, 0.1)),
        ("val=0.1,train=0.9", (0.9, 0.1)),
        ("val=0.05", (0.95, 0.05)),  # train gets the rest
        ("val=0.1,test=0.2", (0.7, 0.1, 0.2)),
    ],
)
def test_named_fractions(text: str, want: tuple[float, ...], capsys: Any) -> None:
    assert parse_split(text) == pytest.approx(want)
    assert capsys.readouterr().err == ""


def test_bare_fractions_still_work_with_a_deprecation_line(capsys: Any) -> None:
    assert parse_split("0.8,0.1,0.1") == (0.8, 0.1, 0.1)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "deprecated: --split 0.8,0.1,0.1 (bare fractions); use --split "
        "train=0.8,val=0.1,test=0.1 (the old form goes in the next release)"
    ]


@pytest.mark.parametrize("text", ["train=0.8,valid=0.2", "val=x", "val=0.1,val=0.2", "0.8;0.2"])
def test_a_bad_split_names_the_form(text: str) -> None:
    with pytest.raises(typer.BadParameter, match="train=F,val=F"):
        parse_split(text)


def test_none_only_where_allowed() -> None:
    assert parse_split("none", allow_none=True) is None
    with pytest.raises(typer.BadParameter):
        parse_split("none")


@pytest.mark.parametrize("command", ["images", "dicom", "parquet", "text"])
def test_every_prep_source_defaults_to_the_named_form(command: str) -> None:
    import typer.main

    from gpuspark.cli.main import app

    prep = typer.main.get_command(app).commands["prep"]  # type: ignore[attr-defined]
    split = next(p for p in prep.commands[command].params if p.name == "split")
    assert str(split.default).startswith("train=") and "," in split.default


def test_parquet_codec_and_its_old_name(tmp_path: Any, capsys: Any) -> None:
    from gpuspark.cli.main import main

    # A usage error comes before any Spark job: --codec and --compression are one setting.
    args = ["prep", "parquet", str(tmp_path / "missing.parquet"), str(tmp_path / "out")]
    assert main([*args, "--label", "y", "--codec", "zstd", "--compression", "zstd"]) == 2
    assert "give --codec only" in capsys.readouterr().err


def test_train_takes_plans_powersgd_syntax(monkeypatch: pytest.MonkeyPatch) -> None:
    # `--compression powersgd:4` means the same in train as in plan: PowerSGD of rank 4.
    from gpuspark.cli.main import main
    from gpuspark.train import recipes

    seen: list[Any] = []

    def run(name: str, cfg: Any, **how: Any) -> None:
        seen.append(cfg)
        raise KeyboardInterrupt  # stopped before any work

    monkeypatch.setattr(recipes, "run", run)
    main(["train", "tabular", "--data", "ds", "--compression", "powersgd:4"])
    assert (seen[0].parallel.compression, seen[0].parallel.powersgd_rank) == ("powersgd", 4)
    assert main(["train", "tabular", "--data", "ds", "--compression", "powersgd:0"]) == 1


def test_every_out_option_is_also_dash_o() -> None:
    # One way to name where a command writes: -o/--out (or a positional destination).
    import click
    import typer.main

    from gpuspark.cli.main import app

    def walk(cmd: click.Command, path: str) -> list[tuple[str, click.Parameter]]:
        found = [(path, p) for p in cmd.params]
        for name, sub in getattr(cmd, "commands", {}).items():
            found += walk(sub, f"{path} {name}")
        return found

    for path, param in walk(typer.main.get_command(app), "gpuspark"):
        opts = getattr(param, "opts", [])
        if "--out" in opts:
            assert "-o" in opts, f"{path}: --out without -o"


# --------------------------------------------------------------------------- --conf K=V


def test_conf_goes_over_the_specs_spark_conf(tmp_path: Any) -> None:
    from gpuspark.cli._common import spec_with_conf
    from gpuspark.cluster.session import session_plan
    from gpuspark.spec import example_spec

    spec_file = tmp_path / "c.toml"
    spec_file.write_text(example_spec())
    assert spec_with_conf(spec_file, None) == spec_file  # nothing given: read where it runs
    conf = ["spark.sql.shuffle.partitions=7", "spark.pyspark.python=/opt/venv/bin/python"]
    spec = spec_with_conf(spec_file, [*conf, "spark.sql.shuffle.partitions=9"])  # later wins
    plan = session_plan("spark://dgx01:7077", spec)
    assert plan.conf["spark.sql.shuffle.partitions"] == "9"
    # a spark.pyspark.python given by --conf is kept, as one from the spec (venv-pack)
    assert plan.conf["spark.pyspark.python"] == "/opt/venv/bin/python"
    assert plan.env["PYSPARK_PYTHON"] == "/opt/venv/bin/python"


@pytest.mark.parametrize("item", ["spark.x", "x=1", "=1", "spark.=1"])
def test_a_bad_conf_is_a_usage_error(item: str) -> None:
    from gpuspark.cli._common import parse_conf

    with pytest.raises(typer.BadParameter, match="K=V with a spark"):
        parse_conf([item])


@pytest.mark.parametrize(
    "command", ["launch", "train", "prep images", "prep dicom", "prep parquet", "prep text",
                "plan calibrate"],
)  # fmt: skip
def test_every_job_command_takes_conf(command: str) -> None:
    import typer.main

    from gpuspark.cli.main import app

    cmd: Any = typer.main.get_command(app)
    for word in command.split():
        cmd = cmd.commands[word]
    conf = next(p for p in cmd.params if p.name == "conf")
    assert conf.multiple and "--conf" in conf.opts


def test_launch_dry_run_shows_the_conf(tmp_path: Any, capsys: Any) -> None:
    from gpuspark.cli.main import main

    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    args = ["launch", "--dry-run", "--master", "spark://h:7077", "-n", "2", "--gpus-per-process"]
    code = main([*args, "0", "--conf", "spark.network.timeout=301s", str(script)])
    out = capsys.readouterr().out
    assert code == 0 and "spark.network.timeout=301s" in out, out
    code = main([*args, "0", "--conf", "spark.network.timeout=301s", "--json", str(script)])
    plan = json.loads(capsys.readouterr().out)
    assert plan["session"]["conf"]["spark.network.timeout"] == "301s"
    assert plan["session"]["master"] == "spark://h:7077"
