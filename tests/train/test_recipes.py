"""Recipes: model shapes, augmentation, AUC, config errors, metrics dict and exporters."""

from __future__ import annotations

import numpy as np
import pytest

from gpuspark.train import metrics as mx
from gpuspark.train import recipes


def test_roc_auc_matches_pairwise_definition() -> None:
    rng = np.random.default_rng(0)
    scores = rng.random(40).round(1)  # ties on purpose
    labels = rng.random(40) > 0.5
    pos, neg = scores[labels], scores[~labels]
    brute = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert recipes.roc_auc(scores, labels) == pytest.approx(brute)
    assert recipes.roc_auc([0.1, 0.9], [0, 1]) == 1.0
    assert recipes.roc_auc([0.9, 0.1], [0, 1]) == 0.0
    assert recipes.roc_auc([0.3, 0.4], [1, 1]) is None


def test_resnet3d_model_takes_one_channel_volumes() -> None:
    import torch

    cfg = recipes.RecipeConfig(data="-", depth=10, width=0.25)
    net = recipes.build_model("resnet3d", cfg, 2)
    out = net(torch.zeros(2, 1, 16, 16, 16))
    assert out.shape == (2, 2)
    assert type(net).__module__ == "gpuspark.train.recipes.resnet_model"
    assert len(net.layer1) == 1  # ResNet-10: one basic block per stage


def test_resnet2d_is_a_resnet50() -> None:
    import torch

    cfg = recipes.RecipeConfig(data="-", width=0.125)
    net = recipes.build_model("resnet2d", cfg, 5)
    assert net(torch.zeros(1, 3, 32, 32)).shape == (1, 5)
    assert len(net.layer3) == 6  # ResNet-50: 3-4-6-3 bottleneck blocks


def test_augment_flips_and_shifts_but_keeps_shape() -> None:
    import torch

    torch.manual_seed(0)
    x = torch.arange(2 * 1 * 4 * 4 * 4, dtype=torch.float32).reshape(2, 1, 4, 4, 4)
    y = torch.tensor([0, 1])
    xa, ya = recipes.augment(x, y)
    assert xa.shape == x.shape and torch.equal(ya, y)
    # Each sample is its input flipped on some axes plus a constant shift within +-0.05.
    for i in range(2):
        diffs = []
        for fz in (0, 1):
            for fy in (0, 1):
                for fx in (0, 1):
                    dims = [d for d, f in zip((1, 2, 3), (fz, fy, fx), strict=True) if f]
                    cand = x[i].flip(dims) if dims else x[i]
                    d = xa[i] - cand
                    if torch.allclose(d, d.flatten()[0].expand_as(d), atol=1e-5):
                        diffs.append(float(d.flatten()[0]))
        assert diffs and all(abs(d) <= 0.05 for d in diffs)


def test_decode_volume_scales_uint8_and_adds_channel() -> None:
    vol = np.full((4, 5, 6), 255, dtype=np.uint8)
    x, y = recipes.decode_volume({"volume": vol, "label": 1})
    assert x.shape == (1, 4, 5, 6) and x.dtype == np.float32 and float(x.max()) == 1.0 and y == 1


def test_bad_recipe_and_options_are_clear_errors() -> None:
    with pytest.raises(recipes.RecipeError, match="did you mean 'resnet3d'"):
        recipes.check_recipe("resnet3")
    with pytest.raises(recipes.RecipeError, match="depth must be one of"):
        recipes.RecipeConfig(data="-", depth=20)
    with pytest.raises(recipes.RecipeError, match="epochs must be >= 1"):
        recipes.RecipeConfig(data="-", epochs=0)


def test_epoch_metrics_fractions_and_exporter_hook() -> None:
    got: list[dict] = []
    mx.clear_exporters()

    def bad(_m: dict) -> None:
        raise RuntimeError("exporter down")

    mx.register_exporter(bad)
    mx.register_exporter(got.append)
    m = mx.epoch_metrics(
        epoch=0, steps=10, samples=80, seconds=4.0, loss=0.5, lr=1e-3, data_wait_s=1.0,
        compute_s=2.0, comm_exposed_s=0.5, optimizer_s=0.25, bytes_raw=1000, bytes_sent=100,
        comm_steps=10, val_auc=0.9,
    )  # fmt: skip
    mx.emit(m)
    mx.clear_exporters()
    assert got == [m]
    assert m["samples_per_s"] == 20.0
    assert m["fractions"] == {
        "data_wait": 0.25, "compute": 0.5, "comm_exposed": 0.125, "optimizer": 0.0625,
        "other": 0.0625,
    }  # fmt: skip
    assert m["bytes_sent_per_step"] == 10 and m["compression_ratio"] == 10.0
    assert "val_auc 0.900" in mx.format_epoch(m)


def test_train_cli_rejects_unknown_recipe(capsys: pytest.CaptureFixture) -> None:
    from gpuspark.cli.main import main

    assert main(["train", "resnet3x", "--data", "nowhere"]) == 1
    captured = capsys.readouterr()
    assert "did you mean 'resnet3d'" in captured.out + captured.err
