"""``resnet3d``: ResNet 10/18/34/50 of MONAI's layout (``spatial_dims=3``, one channel) on CT
volumes (:mod:`gpuspark.train.recipes.resnet_model`).

Reads the volume shards of ``gpuspark prep dicom`` (keys ``volume`` and ``label``, label 1 =
lesion); scored by ROC AUC (accuracy when a split holds one class only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuspark.errors import RecipeError
from gpuspark.train.recipes.common import accuracy, roc_auc
from gpuspark.train.recipes.config import RecipeConfig
from gpuspark.train.recipes.options import ResNet3dOptions
from gpuspark.train.recipes.registry import Decoder, Recipe, register_recipe

if TYPE_CHECKING:
    from gpuspark.data.format import Manifest

__all__ = ["RESNET3D", "ResNet3dOptions", "VolumeDecode", "decode_volume"]


def decode_volume(sample: dict[str, Any]) -> tuple[np.ndarray, int]:
    """CT shard sample -> ``(float32 [1, z, y, x] in [0, 1], label)``."""
    vol = np.asarray(sample["volume"])
    scale = 255.0 if vol.dtype == np.uint8 else 1.0
    return (vol.astype(np.float32) / scale)[None], int(sample["label"])


@dataclass(frozen=True)
class VolumeDecode:
    """CT shard sample -> ``(float32 [1, z, y, x], label)`` re-windowed to ``(level, width)``.

    uint8 volumes hold a window ``stored`` = (level, width) in HU (from the manifest); they are
    mapped back to HU and windowed again, e.g. (100, 100) to make +60 HU lesions over soft
    tissue stand out. Without ``window`` this is :func:`decode_volume`.
    """

    stored: tuple[float, float] | None = None
    window: tuple[float, float] | None = None

    def __call__(self, sample: dict[str, Any]) -> tuple[np.ndarray, int]:
        x, y = decode_volume(sample)
        if self.window is None or self.stored is None:
            return x, y
        (sl, sw), (level, width) = self.stored, self.window
        hu = x * sw + (sl - sw / 2)
        return np.clip((hu - (level - width / 2)) / width, 0.0, 1.0).astype(np.float32), y


def volume_decoder(cfg: RecipeConfig, manifest: Manifest) -> Decoder:
    """:func:`decode_volume`, or a :class:`VolumeDecode` to ``cfg.window``.

    A re-window needs uint8 volumes whose prep window is recorded in the manifest.
    """
    _check_one_shape(cfg, manifest)
    window = cfg.model.of("resnet3d").window
    if window is None:
        return decode_volume
    prep = manifest.extra.get("prep") or {}
    stored = prep.get("window") or {}
    if prep.get("dtype") != "uint8" or "level" not in stored:
        raise RecipeError(
            f"window={window} needs uint8 volumes with a recorded window; {cfg.dataset.data} has "
            f"dtype {prep.get('dtype')!r}, window {stored or None}",
            remedy="prep with the default --dtype uint8, or drop the window option",
        )
    return VolumeDecode(
        stored=(float(stored["level"]), float(stored["width"])),
        window=(float(window[0]), float(window[1])),
    )


def _check_one_shape(cfg: RecipeConfig, manifest: Manifest) -> None:
    """A batch needs volumes of one shape: a dataset whose schema says the volume's shape
    varies (``prep dicom`` without ``--shape`` keeps each series' own) is refused before any
    rank, not met as a collate error in every rank."""
    volume = (manifest.schema or {}).get("volume") or {}
    shape = volume.get("shape", [])
    if cfg.optim.batch_size > 1 and (shape is None or None in shape):
        raise RecipeError(
            f"{cfg.dataset.data} holds volumes of several shapes ({shape or 'varying'}: prep "
            f"dicom without --shape keeps each series' own), and a batch of "
            f"{cfg.optim.batch_size} needs one",
            remedy="prep it again with --shape Z,Y,X (e.g. --shape 64,64,64), or train with "
            "--batch-size 1",
        )


def build_resnet3d(cfg: RecipeConfig, num_classes: int) -> Any:
    """ResNet ``cfg.depth`` (MONAI's ``resnet{depth}`` layout) on one-channel volumes,
    optionally with max pooling."""
    import torch

    from gpuspark.train.recipes.resnet_model import resnet

    opts = cfg.model.of("resnet3d")
    net = resnet(
        opts.depth,
        spatial_dims=3,
        n_input_channels=1,
        num_classes=num_classes,
        widen_factor=cfg.model.width,
        conv1_t_stride=opts.stem_stride,
    )
    if opts.pool == "max":
        # A small focal finding (a lesion of a few dozen voxels) is diluted by global
        # average pooling; global max pooling keeps the strongest local response.
        net.avgpool = torch.nn.AdaptiveMaxPool3d(1)
    return net


def binary_classes(_cfg: RecipeConfig, _manifest: Manifest) -> int:
    """Two classes: no lesion, lesion."""
    return 2


def binary_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, float | None]:
    """Accuracy and the ROC AUC of the positive class."""
    return {"acc": accuracy(probs, labels), "auc": roc_auc(probs[:, 1], labels)}


RESNET3D = register_recipe(
    Recipe(
        name="resnet3d",
        description="3D ResNet (MONAI layout) on CT volume shards (gpuspark prep dicom); AUC",
        keys=("volume", "label"),
        build_model=build_resnet3d,
        decoder=volume_decoder,
        num_classes=binary_classes,
        metrics=binary_metrics,
        best_by=("auc", "acc"),
        shape_options=("depth", "width", "stem_stride", "pool"),
        sample_shape=(1, 64, 64, 64),
        input_kind="volume",
        options=ResNet3dOptions,
    )
)
