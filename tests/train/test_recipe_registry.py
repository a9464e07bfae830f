"""Recipe registry: names, registration, no branching on a name; the dataset check up front."""

from __future__ import annotations

import ast
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpuspark
from gpuspark.data.write import ShardWriter
from gpuspark.train import recipes
from gpuspark.train.recipes import Recipe, RecipeConfig, RecipeError


def _toy_build(cfg: RecipeConfig, num_classes: int) -> Any:
    import torch

    torch.manual_seed(cfg.seed)
    return torch.nn.Linear(8, num_classes)


def _toy_decode(sample: dict[str, Any]) -> tuple[np.ndarray, int]:
    return np.asarray(sample["signal"], dtype=np.float32), int(sample["label"])


TOY = Recipe(
    name="toy-linear",
    description="a linear layer on 8-float signals (tests only)",
    keys=("signal", "label"),
    build_model=_toy_build,
    decoder=lambda _cfg, _manifest: _toy_decode,
    num_classes=lambda _cfg, _manifest: 2,
    metrics=lambda probs, labels: {"acc": recipes.accuracy(probs, labels)},
    best_by=("acc",),
)


@pytest.fixture
def toy() -> Iterator[Recipe]:
    recipes.register_recipe(TOY)
    try:
        yield TOY
    finally:
        recipes.unregister_recipe(TOY.name)


def _write(path: Path, samples: list[dict[str, Any]], **kw: Any) -> str:
    with ShardWriter(path, **kw) as w:
        for i, s in enumerate(samples):
            w.write(s, split="train" if i % 4 else "val")
    return str(path)


@pytest.fixture
def ct_data(tmp_path: Path) -> str:
    vol = np.zeros((4, 4, 4), dtype=np.uint8)
    return _write(tmp_path / "ct", [{"volume": vol, "label": i % 2} for i in range(4)])


# -- the registry ----------------------------------------------------------------------------


def test_builtin_recipes_are_registered_values() -> None:
    assert recipes.RECIPES == recipes.recipe_names() == ("bert", "resnet2d", "resnet3d", "tabular")
    r3 = recipes.get_recipe("resnet3d")
    assert r3 is recipes.RESNET3D and r3.keys == ("volume", "label")
    assert recipes.get_recipe("resnet2d").keys == ("image", "label")
    assert recipes.check_recipe("resnet2d") == "resnet2d"


def test_unknown_recipe_lists_the_choices() -> None:
    with pytest.raises(RecipeError) as info:
        recipes.get_recipe("resnet3")
    msg = str(info.value)
    assert "recipe 'resnet3' is unknown (did you mean 'resnet3d'?)" in msg
    assert "use one of: bert, resnet2d, resnet3d" in msg and "\n" not in msg
    with pytest.raises(RecipeError, match="use one of"):
        recipes.build_model("vit", RecipeConfig(data="-"), 2)


def test_register_get_replace_unregister(toy: Recipe) -> None:
    assert recipes.get_recipe("toy-linear") is toy
    assert "toy-linear" in recipes.recipe_names()
    assert recipes.build_model("toy-linear", RecipeConfig(data="-"), 3).out_features == 3
    with pytest.raises(RecipeError, match="already registered"):
        recipes.register_recipe(toy)
    other = Recipe(**{**toy.__dict__, "description": "replaced"})
    assert recipes.register_recipe(other, replace=True) is other
    assert recipes.get_recipe("toy-linear").description == "replaced"
    assert recipes.unregister_recipe("toy-linear") is other
    with pytest.raises(RecipeError, match="unknown"):
        recipes.get_recipe("toy-linear")
    recipes.register_recipe(toy)  # the fixture removes it


def test_recipe_needs_keys_and_metrics() -> None:
    with pytest.raises(RecipeError, match="needs a name, sample keys"):
        Recipe(**{**TOY.__dict__, "keys": ()})


def test_score_takes_the_first_metric_present() -> None:
    r3 = recipes.RESNET3D
    assert r3.score({"acc": 0.5, "auc": 0.75}) == 0.75
    assert r3.score({"acc": 0.5, "auc": None}) == 0.5  # one class in the split: no AUC
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6]])
    assert r3.metrics(probs, np.array([0, 1, 0])) == {"acc": pytest.approx(2 / 3), "auc": 1.0}
    assert recipes.RESNET2D.metrics(probs, np.array([0, 1, 1])) == {"top1": 1.0}


def test_no_code_branches_on_a_recipe_name() -> None:
    """No comparison anywhere in the package mentions a recipe name (``name == "resnet3d"``)."""
    names = set(recipes.recipe_names())
    src = Path(gpuspark.__file__).parent
    found = []
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare | ast.MatchValue):
                consts = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
                if consts & names:
                    found.append(f"{path.relative_to(src)}:{node.lineno}")
    assert not found, found


# -- the dataset check -----------------------------------------------------------------------


def test_resnet2d_on_ct_data_is_refused_up_front(ct_data: str) -> None:
    cfg = RecipeConfig(data=ct_data)
    with pytest.raises(RecipeError) as info:
        recipes.preflight("resnet2d", cfg)
    msg = str(info.value)
    assert "recipe 'resnet2d' needs sample key 'image'" in msg and ct_data in msg
    assert "its keys: label, volume" in msg and "fits this dataset: resnet3d" in msg
    assert "\n" not in msg
    assert recipes.preflight("resnet3d", cfg) is recipes.RESNET3D
    # run() checks on the driver: a RecipeError, not a KeyError reported by failed ranks.
    with pytest.raises(RecipeError, match="needs sample key 'image'"):
        recipes.run("resnet2d", cfg, num_processes=2, local=True, timeout=60)


def test_partly_labelled_dataset_is_refused(tmp_path: Path) -> None:
    vol = np.zeros((2, 2, 2), dtype=np.uint8)
    samples: list[dict[str, Any]] = [{"volume": vol, "label": 1}, {"volume": vol}] * 2
    data = _write(tmp_path / "partial", samples)
    with pytest.raises(RecipeError, match="has 2 of 4 records with 'label'"):
        recipes.preflight("resnet3d", RecipeConfig(data=data))


def test_window_without_recorded_prep_window_is_refused(ct_data: str) -> None:
    with pytest.raises(RecipeError, match="needs uint8 volumes with a recorded window"):
        recipes.preflight("resnet3d", RecipeConfig(data=ct_data, window=(100.0, 100.0)))


def test_train_cli_names_the_missing_key(ct_data: str, capsys: pytest.CaptureFixture) -> None:
    from gpuspark.cli.main import main

    assert main(["train", "resnet2d", "--data", ct_data, "--local"]) == 1
    out = capsys.readouterr()
    assert "needs sample key 'image'" in out.out + out.err


# -- the runner with a recipe it has never heard of ------------------------------------------


def test_runner_trains_a_newly_registered_recipe(
    toy: Recipe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.distributed as dist

    rng = np.random.default_rng(0)
    xs = rng.normal(size=(16, 8)).astype(np.float32)
    samples = [{"signal": x, "label": int(x[0] > 0)} for x in xs]
    data = _write(tmp_path / "toy", samples)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0"}
    env.update(WORLD_SIZE="1", LOCAL_RANK="0", GPUSPARK_BACKEND="gloo")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cfg = RecipeConfig(data=data, epochs=2, batch_size=4, augment=False, out=str(tmp_path / "o"))
    try:
        summary = recipes.train("toy-linear", cfg)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert summary.recipe == "toy-linear" and len(summary.history) == 2
    assert set(summary.best) >= {"epoch", "val_acc", "val_samples"}
    assert (tmp_path / "o" / "best.pt").exists() and (tmp_path / "o" / "history.json").exists()


def test_paths_are_made_absolute_on_the_driver(tmp_path: Path, monkeypatch: Any) -> None:
    """`train --data data/img-shards` failed on Spark: ranks start in a worker's directory."""
    from gpuspark.train.recipes.driver import resolve_paths

    monkeypatch.chdir(tmp_path)
    cfg = resolve_paths(RecipeConfig(data="data/ds", checkpoint_dir="ckpt", out="~/x"))
    assert cfg.data == str(tmp_path / "data" / "ds")
    assert cfg.checkpoint_dir == str(tmp_path / "ckpt")
    assert cfg.out == os.path.expanduser("~/x")
    assert resolve_paths(RecipeConfig(data="s3://bucket/ds")).data == "s3://bucket/ds"


def test_unsplit_dataset_names_the_options(tmp_path: Path) -> None:
    """A dataset without splits: the error names --train-split all / --val-split none."""
    from gpuspark.train.recipes.driver import preflight

    ds = tmp_path / "ds"
    with ShardWriter(ds) as w:
        for i in range(4):
            w.write({"image": np.zeros((4, 4, 3), np.uint8), "label": i % 2})
    with pytest.raises(RecipeError, match=r"no split 'train' for --train-split \(train_split\)"):
        preflight("resnet2d", RecipeConfig(data=str(ds), num_classes=2))
    with pytest.raises(RecipeError, match=r"no split 'train'.*--train-split all"):
        preflight("resnet2d", RecipeConfig(data=str(ds), num_classes=2))
    with pytest.raises(RecipeError, match=r"no split 'val' for --val-split \(val_split\).*none"):
        preflight("resnet2d", RecipeConfig(data=str(ds), num_classes=2, train_split=None))
    assert (
        preflight(
            "resnet2d", RecipeConfig(data=str(ds), num_classes=2, train_split=None, val_split=None)
        ).name
        == "resnet2d"
    )


@pytest.mark.slow  # a real 1-rank run (~10 s)
def test_a_run_without_a_validation_split_still_leaves_a_servable_best_pt(tmp_path: Path) -> None:
    """``--val-split none`` used to leave no ``best.pt`` (it is written when a validation
    score improves), so ``predict --model RUN`` had nothing to serve: the final model is
    exported instead, with no score."""
    import torch

    from gpuspark.train import recipes

    ds = tmp_path / "ds"
    with ShardWriter(ds) as w:
        for i in range(4):
            w.write({"image": np.zeros((8, 8, 3), np.uint8), "label": i % 2})
    cfg = recipes.RecipeConfig(
        data=str(ds), num_classes=2, train_split=None, val_split=None, epochs=1,
        batch_size=2, threads=1, out=str(tmp_path / "run"),
    )  # fmt: skip
    recipes.run("resnet2d", cfg, num_processes=1, local=True, timeout=120)
    payload = torch.load(tmp_path / "run" / "best.pt", map_location="cpu", weights_only=True)
    assert payload["recipe"] == "resnet2d" and payload["score"] is None and payload["model"]


def test_volumes_of_several_shapes_are_refused_before_any_rank(tmp_path: Path) -> None:
    """``prep dicom`` without ``--shape`` keeps each series' own shape; ``train resnet3d``
    then failed in every rank's collate with a traceback. The schema says the shape varies:
    one line before any rank, naming ``--shape`` and ``--batch-size 1``."""
    from gpuspark.train.recipes.driver import preflight

    ds = tmp_path / "ds"
    with ShardWriter(ds) as w:
        for i, depth in enumerate((4, 5, 4, 6)):
            w.write({"volume": np.zeros((1, depth, 8, 8), np.float32), "label": i % 2})
    cfg = {"data": str(ds), "train_split": None, "val_split": None}
    with pytest.raises(RecipeError, match=r"several shapes.*--shape Z,Y,X.*--batch-size 1"):
        preflight("resnet3d", RecipeConfig(**cfg, batch_size=2))
    assert preflight("resnet3d", RecipeConfig(**cfg, batch_size=1)).name == "resnet3d"
