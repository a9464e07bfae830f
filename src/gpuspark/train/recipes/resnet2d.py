"""``resnet2d``: ResNet-50 of MONAI's layout (``spatial_dims=2``, RGB) on image-folder shards
(:mod:`gpuspark.train.recipes.resnet_model`).

Reads the shards of ``gpuspark prep images`` (keys ``image`` and ``label``); the class count
comes from the manifest's label map unless given; scored by top-1 accuracy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from gpuspark.data.load import ImageDecode
from gpuspark.errors import RecipeError
from gpuspark.train.recipes.common import accuracy
from gpuspark.train.recipes.config import RecipeConfig
from gpuspark.train.recipes.registry import Decoder, Recipe, register_recipe

if TYPE_CHECKING:
    from gpuspark.data.format import Manifest

__all__ = ["RESNET2D", "decode_image"]


def decode_image(sample: dict[str, Any]) -> tuple[np.ndarray, int]:
    """Image shard sample -> ``(float32 [C, H, W] in [0, 1], label)`` (JPEG/PNG decoded)."""

    img = np.asarray(ImageDecode()(sample)["image"])
    if img.ndim == 2:
        img = img[:, :, None]
    chw = np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32) / 255.0
    return chw, int(sample["label"])


def image_decoder(_cfg: RecipeConfig, _manifest: Manifest) -> Decoder:
    """:func:`decode_image`: no option changes it."""
    return decode_image


def build_resnet2d(cfg: RecipeConfig, num_classes: int) -> Any:
    """ResNet-50 (MONAI's ``resnet50`` layout) on RGB images (``cfg.depth`` does not apply)."""
    from gpuspark.train.recipes.resnet_model import resnet

    return resnet(
        50,
        spatial_dims=2,
        n_input_channels=3,
        num_classes=num_classes,
        widen_factor=cfg.model.width,
    )


def label_map_classes(cfg: RecipeConfig, manifest: Manifest) -> int:
    """``cfg.model.num_classes``, else the size of the manifest's label map."""
    if cfg.model.num_classes:
        return cfg.model.num_classes
    label_map = manifest.extra.get("label_map") or {}
    if not label_map:
        raise RecipeError(
            f"{cfg.dataset.data} has no label map to count classes from", remedy="pass num_classes"
        )
    return len(label_map)


def top1_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, float | None]:
    """Top-1 accuracy."""
    return {"top1": accuracy(probs, labels)}


RESNET2D = register_recipe(
    Recipe(
        name="resnet2d",
        description="ResNet-50 (MONAI layout) on image-folder shards (gpuspark prep images); top-1",
        keys=("image", "label"),
        build_model=build_resnet2d,
        decoder=image_decoder,
        num_classes=label_map_classes,
        metrics=top1_metrics,
        best_by=("top1",),
        shape_options=("width",),
        sample_shape=(3, 224, 224),
        input_kind="jpeg",
        extras=(("PIL", "images"),),
    )
)
