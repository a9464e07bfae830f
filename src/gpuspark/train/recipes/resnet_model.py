"""The ``resnet3d`` and ``resnet2d`` recipes' network: a ResNet of MONAI's layout.

:func:`resnet` builds the same modules, in the same order and with the same initialisation,
as ``monai.networks.nets.resnet{10,18,34,50}(spatial_dims=..., n_input_channels=...,
num_classes=..., widen_factor=..., conv1_t_stride=...)`` (MONAI 1.3 to 1.6: shortcut ``B``,
a biased 1x1 downsampling convolution, batch norm, in-place ReLU). Its state dict has MONAI's
keys and shapes, so a checkpoint moves either way, and under the same torch seed both start
from the same weights. It is built here rather than imported because ``import monai`` loads
every MONAI subpackage (about 5 s per process before the first step, in each rank).

Imports torch at module level: import it where a network is built, not at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["LAYERS", "ResNet", "ResNetBlock", "ResNetBottleneck", "resnet"]

LAYERS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    10: ("basic", (1, 1, 1, 1)),
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
}
"""Depth -> (block kind, blocks per stage), as MONAI's ``resnet{depth}``."""

_INPLANES = (64, 128, 256, 512)

_CONV: dict[int, type[nn.Module]] = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_NORM: dict[int, type[nn.Module]] = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}
_MAXPOOL: dict[int, type[nn.Module]] = {1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}
_AVGPOOL: dict[int, type[nn.Module]] = {
    1: nn.AdaptiveAvgPool1d,
    2: nn.AdaptiveAvgPool2d,
    3: nn.AdaptiveAvgPool3d,
}


def _conv(
    dims: int, cin: int, cout: int, kernel: int, stride: int = 1, bias: bool = False
) -> nn.Module:
    """A ``dims``-D convolution with ``kernel // 2`` padding."""
    return _CONV[dims](cin, cout, kernel_size=kernel, stride=stride, padding=kernel // 2, bias=bias)


class ResNetBlock(nn.Module):
    """Basic block: two 3x3 convolutions (the first with ``stride``) and the shortcut."""

    expansion = 1

    def __init__(
        self,
        in_planes: int,
        planes: int,
        dims: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.conv1 = _conv(dims, in_planes, planes, 3, stride)
        self.bn1 = _NORM[dims](planes)
        self.act = nn.ReLU(inplace=True)
        self.conv2 = _conv(dims, planes, planes, 3)
        self.bn2 = _NORM[dims](planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``act(bn2(conv2(act(bn1(conv1(x))))) + shortcut(x))``."""
        out = self.act(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x if self.downsample is None else self.downsample(x)
        return self.act(out)


class ResNetBottleneck(nn.Module):
    """Bottleneck block: 1x1 down, 3x3 (with ``stride``), 1x1 up by 4, and the shortcut."""

    expansion = 4

    def __init__(
        self,
        in_planes: int,
        planes: int,
        dims: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.conv1 = _conv(dims, in_planes, planes, 1)
        self.bn1 = _NORM[dims](planes)
        self.conv2 = _conv(dims, planes, planes, 3, stride)
        self.bn2 = _NORM[dims](planes)
        self.conv3 = _conv(dims, planes, planes * self.expansion, 1)
        self.bn3 = _NORM[dims](planes * self.expansion)
        self.act = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The three convolutions, each normalised, plus the shortcut."""
        out = self.act(self.bn1(self.conv1(x)))
        out = self.act(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += x if self.downsample is None else self.downsample(x)
        return self.act(out)


_BLOCKS: dict[str, type[ResNetBlock | ResNetBottleneck]] = {
    "basic": ResNetBlock,
    "bottleneck": ResNetBottleneck,
}


class ResNet(nn.Module):
    """Stem (a 7-wide convolution with ``conv1_t_stride``, norm, ReLU, 3x3 max pooling), four
    stages of ``layers`` blocks (stride 2 from the second), global average pooling, a linear
    head. Modules are named as MONAI's ``ResNet``: ``conv1 bn1 act maxpool layer1..4 avgpool
    fc``, each block's ``downsample`` a ``Sequential(conv, norm)``."""

    def __init__(
        self,
        block: str,
        layers: Sequence[int],
        spatial_dims: int = 3,
        n_input_channels: int = 3,
        num_classes: int = 400,
        widen_factor: float = 1.0,
        conv1_t_stride: int = 1,
    ) -> None:
        super().__init__()
        kind, dims = _BLOCKS[block], spatial_dims
        planes = [int(p * widen_factor) for p in _INPLANES]
        self.in_planes = planes[0]
        self.conv1 = _conv(dims, n_input_channels, planes[0], 7, conv1_t_stride)
        self.bn1 = _NORM[dims](planes[0])
        self.act = nn.ReLU(inplace=True)
        self.maxpool = _MAXPOOL[dims](kernel_size=3, stride=2, padding=1)
        self.layer1 = self._stage(kind, planes[0], layers[0], dims, 1)
        self.layer2 = self._stage(kind, planes[1], layers[1], dims, 2)
        self.layer3 = self._stage(kind, planes[2], layers[2], dims, 2)
        self.layer4 = self._stage(kind, planes[3], layers[3], dims, 2)
        self.avgpool: nn.Module = _AVGPOOL[dims](1)
        self.fc = nn.Linear(planes[3] * kind.expansion, num_classes)
        self._init_weights()

    def _stage(
        self,
        kind: type[ResNetBlock | ResNetBottleneck],
        planes: int,
        blocks: int,
        dims: int,
        stride: int,
    ) -> nn.Sequential:
        """``blocks`` blocks; the first changes the stride and width (built after its
        shortcut, as MONAI does, so that the random initialisation draws in its order)."""
        out_planes = planes * kind.expansion
        downsample = None
        if stride != 1 or self.in_planes != out_planes:
            downsample = nn.Sequential(
                _conv(dims, self.in_planes, out_planes, 1, stride, bias=True),
                _NORM[dims](out_planes),
            )
        stage = [kind(self.in_planes, planes, dims, stride, downsample)]
        self.in_planes = out_planes
        stage += [kind(out_planes, planes, dims) for _ in range(1, blocks)]
        return nn.Sequential(*stage)

    def _init_weights(self) -> None:
        """Kaiming-normal convolutions (fan out), unit norms, zero linear bias."""
        for m in self.modules():
            if isinstance(m, nn.modules.conv._ConvNd):  # all of them ``dims``-D
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.modules.batchnorm._BatchNorm):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, channels, *spatial]`` -> ``[n, num_classes]`` logits."""
        x = self.maxpool(self.act(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).view(x.size(0), -1))


def resnet(
    depth: int,
    spatial_dims: int,
    n_input_channels: int,
    num_classes: int,
    widen_factor: float = 1.0,
    conv1_t_stride: int = 1,
) -> ResNet:
    """ResNet ``depth`` (10, 18, 34 or 50; see :data:`LAYERS`), as MONAI's ``resnet{depth}``."""
    if depth not in LAYERS:
        raise ValueError(f"ResNet depth {depth} is not one of {sorted(LAYERS)}")
    block, layers = LAYERS[depth]
    return ResNet(
        block,
        layers,
        spatial_dims=spatial_dims,
        n_input_channels=n_input_channels,
        num_classes=num_classes,
        widen_factor=widen_factor,
        conv1_t_stride=conv1_t_stride,
    )
