"""The ResNet recipes' network against MONAI's (real MONAI, installed with the dev extra).

Same keys and shapes (a checkpoint moves either way), the same initial weights under one
seed, the same outputs from the same weights, for every depth and option the recipes use.
"""

from __future__ import annotations

import pytest

CASES = [  # depth, spatial_dims, channels, widen_factor, conv1_t_stride
    (10, 3, 1, 0.25, 1),
    (18, 3, 1, 0.125, 2),
    (34, 3, 1, 0.125, 1),
    (50, 3, 1, 0.125, 2),
    (50, 2, 3, 0.25, 1),
    (18, 2, 3, 0.5, 1),
]


def _pair(depth: int, dims: int, channels: int, width: float, stride: int):
    import torch
    from monai.networks import nets

    from gpuspark.train.recipes.resnet_model import resnet

    kwargs = dict(spatial_dims=dims, n_input_channels=channels, num_classes=3, widen_factor=width)
    torch.manual_seed(7)
    theirs = getattr(nets, f"resnet{depth}")(conv1_t_stride=stride, **kwargs)
    torch.manual_seed(7)
    ours = resnet(depth, conv1_t_stride=stride, **kwargs)
    return ours, theirs


@pytest.mark.parametrize(("depth", "dims", "channels", "width", "stride"), CASES)
def test_same_state_dict_and_initial_weights_as_monai(depth, dims, channels, width, stride) -> None:
    import torch

    ours, theirs = _pair(depth, dims, channels, width, stride)
    a, b = ours.state_dict(), theirs.state_dict()
    assert list(a) == list(b)
    for key in a:
        assert a[key].shape == b[key].shape, key
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize(("depth", "dims", "channels", "width", "stride"), CASES[::2])
def test_same_outputs_as_monai_from_one_checkpoint(depth, dims, channels, width, stride) -> None:
    import torch

    ours, theirs = _pair(depth, dims, channels, width, stride)
    torch.manual_seed(1)
    for p in theirs.parameters():  # weights unlike the initial ones, BN statistics too
        p.data.normal_(0, 0.1)
    theirs.train()(torch.rand(2, channels, *([24] * dims)))  # moves the running statistics
    ours.load_state_dict(theirs.state_dict())  # strict: every key, no extra
    x = torch.rand(2, channels, *([24] * dims))
    for mode in ("eval", "train"):
        getattr(ours, mode)(), getattr(theirs, mode)()
        with torch.no_grad():
            torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)
    theirs.load_state_dict(ours.state_dict())  # and back


def test_an_unknown_depth_is_refused() -> None:
    from gpuspark.train.recipes.resnet_model import resnet

    with pytest.raises(ValueError, match="ResNet depth 20 is not one of"):
        resnet(20, spatial_dims=3, n_input_channels=1, num_classes=2)
