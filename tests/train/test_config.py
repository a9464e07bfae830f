"""RecipeConfig: nested groups, flat construction and reads, and its `gpuspark train` flags."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from gpuspark.train import recipes
from gpuspark.train.recipes import RecipeConfig, RecipeError
from gpuspark.train.recipes.bert import BertOptions
from gpuspark.train.recipes.config import (
    CheckpointConfig,
    DataConfig,
    ModelConfig,
    OptimConfig,
    ParallelConfig,
    flag_fields,
    leaf_fields,
    option,
)
from gpuspark.train.recipes.resnet3d import ResNet3dOptions
from gpuspark.train.recipes.tabular import TabularOptions

NOT_FLAGS = {
    # Python API only: `gpuspark train` keeps the defaults (the CLI has never had them).
    "num_workers",
    "augment",
    "seed",
    "weight_decay",
    "powersgd_start_iter",
    "num_classes",
    "out",
    "pool",
    "mask_prob",
}
RUN_FLAGS = {
    # `gpuspark train` options that are not RecipeConfig: where and how the run goes.
    "num_processes",
    "gpus_per_process",
    "processes_per_task",
    "local",
    "no_local",
    "max_restarts",
    "max_attempts",
    "collective_timeout",
    "min_ranks",
    "metrics_port",
    "metrics_host",
    "team",
    "master",
    "spec",
    "conf",
    "json_out",
    "recipe",
    "mlflow",
    "mlflow_model",
}


def _train_params() -> dict[str, Any]:
    import typer.main

    from gpuspark.cli.main import app

    command = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    return {p.name: p for p in command.params}


def test_every_flag_field_is_a_train_flag_and_back() -> None:
    leaves = leaf_fields()
    flags = {n for n, (_, f) in leaves.items() if f.metadata.get("cli")}
    assert set(leaves) - flags == NOT_FLAGS
    assert set(_train_params()) == flags | RUN_FLAGS


def test_train_flags_match_the_config_metadata() -> None:
    params = _train_params()
    for name, (_, f) in leaf_fields().items():
        meta = f.metadata
        if not meta.get("cli"):
            continue
        param = params[name]
        assert param.help == meta["cli"], name
        assert param.opts == list(meta["decls"] or [f"--{name.replace('_', '-')}"]), name
        if meta["recipe_default"]:  # the recipe's default, else the field's (in the help)
            said = meta["cli"].split("[default: ")[1].split(";")[0].rstrip("].")
            assert param.default is None and float(said) == f.default, name
        elif f.default is dataclasses.MISSING:
            assert param.required, name
        else:
            assert param.default == f.default, name


def test_flat_construction_equals_nested() -> None:
    flat = RecipeConfig(
        data="ds",
        test_split="test",
        epochs=3,
        lr=0.01,
        strategy="fsdp",
        amp="bf16",
        width=0.5,
        dropout=0.2,
        depth=10,
        window=(100.0, 100.0),
        hidden=16,
        size="small",
        checkpoint_dir="ck",
        resume=True,
        extra={"k": 1},
    )
    nested = RecipeConfig(
        dataset=DataConfig(data="ds", test_split="test"),
        optim=OptimConfig(epochs=3, lr=0.01),
        parallel=ParallelConfig(strategy="fsdp", amp="bf16"),
        model=ModelConfig(
            width=0.5,
            dropout=0.2,
            options={
                "resnet3d": ResNet3dOptions(depth=10, window=(100.0, 100.0)),
                "tabular": TabularOptions(hidden=16),
                "bert": BertOptions(size="small"),
            },
        ),
        checkpoint=CheckpointConfig(checkpoint_dir="ck", resume=True),
        extra={"k": 1},
    )
    assert flat == nested
    assert (flat.data, flat.epochs, flat.depth, flat.hidden, flat.size) == (
        "ds",
        3,
        10,
        16,
        "small",
    )
    assert flat.out_dir == "ck" and flat.model.of("resnet3d").window == (100.0, 100.0)
    assert pickle.loads(pickle.dumps(flat)) == flat
    assert dataclasses.replace(flat, strategy="ddp", depth=18).parallel.strategy == "ddp"
    assert dataclasses.replace(flat, depth=18).depth == 18


def test_flat_and_nested_keep_every_check() -> None:
    with pytest.raises(RecipeError, match="depth must be one of"):
        RecipeConfig(data="-", depth=20)
    with pytest.raises(RecipeError, match="depth must be one of"):
        ResNet3dOptions(depth=20)
    with pytest.raises(RecipeError, match=r"dropout must be in \[0, 1\)"):
        RecipeConfig(data="-", dropout=1.0)
    with pytest.raises(RecipeError, match="resume and overwrite contradict"):
        RecipeConfig(data="-", checkpoint=CheckpointConfig(resume=True), overwrite=True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        RecipeConfig(data="-", bogus=1)
    with pytest.raises(AttributeError):
        _ = RecipeConfig(data="-").bogus


def test_a_recipe_option_must_not_repeat_a_name() -> None:
    @dataclasses.dataclass
    class Clash:
        depth: int = option(3, cli="clash")

    recipe = dataclasses.replace(recipes.get_recipe("resnet2d"), name="clash", options=Clash)
    recipes.register_recipe(recipe)
    try:
        with pytest.raises(
            RecipeError, match="option 'depth' of recipe:resnet3d is also declared by recipe:clash"
        ):
            RecipeConfig(data="-")
    finally:
        recipes.unregister_recipe("clash")


def test_the_builtin_options_table_is_the_registry() -> None:
    from gpuspark.train.recipes.options import BUILTIN_OPTIONS

    registered = {n: c for n in recipes.recipe_names() if (c := recipes.get_recipe(n).options)}
    assert registered == BUILTIN_OPTIONS
    assert set(flag_fields()) == set(leaf_fields())


def test_train_flags_are_made_without_torch_or_numpy() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from gpuspark.cli.main import _command; _command(); "
        "print(sorted(m for m in ('torch', 'numpy', 'pyspark') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], {"batch_size": 512, "val_split": "val", "window": None}),
        (["--batch-size", "4", "--val-split", "none"], {"batch_size": 4, "val_split": None}),
        (["--train-split", "all", "--window", "40,400"], {"train_split": None}),
        (["--window", "-50.5,350"], {"window": (-50.5, 350.0)}),
    ],
)
def test_train_flags_become_the_config(
    flags: list[str], expected: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuspark.cli.main import main

    seen: list[RecipeConfig] = []

    def run(name: str, cfg: RecipeConfig, **how: Any) -> None:
        seen.append(cfg)  # the library call the command ends in, stopped before any work
        raise _Stopped

    monkeypatch.setattr(recipes, "run", run)
    with pytest.raises(_Stopped):
        main(["train", "tabular", "--data", "ds", *flags])
    cfg = seen[0]
    for name, value in expected.items():
        assert getattr(cfg, name) == value, name
    assert cfg.data == "ds" and cfg.epochs == 10


@pytest.mark.parametrize("value", ["100", "100,0", "a,b", "1,2,3"])
def test_a_bad_window_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuspark.cli.main import main

    assert main(["train", "resnet3d", "--data", "ds", "--window", value]) == 2
    err = capsys.readouterr().err
    assert "--window" in err and "LEVEL,WIDTH in HU with WIDTH > 0" in err, err
    assert f"got {value!r}" in err


class _Stopped(Exception):
    pass


def test_nproc_per_node_reaches_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    # `train --nproc-per-node` is launch's processes_per_task (LOCAL_WORLD_SIZE, HSDP's shard
    # group): the driver passes it to gpuspark.launch.run, stopped before any rank starts.
    from gpuspark import launch
    from gpuspark.cli.main import main
    from gpuspark.train.recipes import driver

    seen: dict[str, Any] = {}

    def run(*args: Any, **how: Any) -> None:
        seen.update(how)
        raise _Stopped

    monkeypatch.setattr(launch, "run", run)
    monkeypatch.setattr(driver, "preflight", lambda name, cfg, **kw: recipes.get_recipe(name))
    monkeypatch.setattr(driver, "clear_earlier_run", lambda cfg: None)
    with pytest.raises(_Stopped):
        main(["train", "tabular", "--data", "ds", "-n", "4", "--nproc-per-node", "2", "--local",
              "--collective-timeout", "45"])  # fmt: skip
    assert seen["num_processes"] == 4 and seen["processes_per_task"] == 2
    assert seen["collective_timeout"] == 45.0  # a launch option: the ranks' collective timeout
