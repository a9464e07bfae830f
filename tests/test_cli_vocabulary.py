"""One vocabulary across commands: one split syntax for every ``prep`` source, ``--codec``
for record codecs (``--compression`` is gradient compression only), the old spellings kept
for one release with a ``deprecated:`` line."""

from __future__ import annotations

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
