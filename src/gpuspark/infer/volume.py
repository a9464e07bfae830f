"""A checkpoint of a recipe trained on ``gpuspark prep dicom`` volumes (``resnet3d``) as batch
prediction needs it (:class:`VolumeModel`), read from the ``best.pt`` alone.

``gpuspark train`` records the training dataset's ``manifest.extra`` in ``best.pt``
(``payload["dataset"]``, :func:`gpuspark.train.recipes.rank.dataset_lineage`); for a DICOM
dataset its ``prep`` entry holds every option of the prep job (spacing, shape, window, output
dtype, minimum slices). :func:`load_volume_model` turns that entry back into the
:class:`~gpuspark.data.sources.DicomOptions` the prep job ran with, so new studies go through
the same :func:`~gpuspark.data.sources.prep_series` with the same options, then through the
recipe's own decoder (built from the recorded config and the same manifest entries, e.g.
``resnet3d``'s re-window), with nothing retyped by the user.

Before any Spark job the network is rebuilt on PyTorch's ``meta`` device (no memory, no
compute) from the recipe registry and the recorded config: its parameters must have the
shapes of the saved weights, and it must take the decoder's output for the recorded volume
shape and give one output per class. A mismatch is one line naming it.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuspark.data.format import Manifest
from gpuspark.data.sources import DicomOptions, Window
from gpuspark.errors import CheckpointError, GpusparkError, RecipeError
from gpuspark.infer.model import (
    SERVED_RECIPES,
    CheckpointFile,
    lineage_extra,
    read_checkpoint,
    read_payload,
    recipe_input,
    volume_recipes,
)
from gpuspark.storage import Location
from gpuspark.train.recipes.config import GROUPS, RecipeConfig
from gpuspark.train.recipes.registry import Decoder, Recipe, get_recipe

__all__ = [
    "VolumeModel",
    "build_volume_network",
    "dicom_options",
    "load_volume_model",
    "recipe_config",
]

_RETRAIN = "train it again with this gpuspark (`gpuspark train resnet3d ... --checkpoint-dir DIR`)"


@dataclass(frozen=True)
class VolumeModel:
    """A checked checkpoint of a volume recipe and the preprocessing of its training data."""

    path: str
    mtime_ns: int
    recipe: str
    classes: int
    """Outputs of the network: ``prob_0`` ... ``prob_<classes - 1>``."""
    options: DicomOptions
    """The prep job's options, from the training dataset's manifest (``extra["prep"]``)."""
    decode: Decoder
    """The recipe's decoder (stored volume -> model input), as training built it."""
    input_shape: tuple[int, ...] | None
    """The model input of one volume (``(1, z, y, x)``); ``None`` when the prep job had no
    fixed shape (then each volume has its own)."""
    prep: dict[str, Any]
    """The manifest's ``prep`` entry as recorded."""
    dataset: str | None
    """The training dataset (lineage)."""
    label_names: dict[str, Any]
    """The training labels' names by class index (``extra["label_map"]``), if recorded."""
    epoch: int | None
    scores: dict[str, Any]
    data: bytes = field(default=b"", repr=False)
    """The file's bytes, as read and checked (what the tasks build the network from)."""

    @property
    def key(self) -> tuple[str, int]:
        """The path and modification time: the key of the per-worker model cache."""
        return self.path, self.mtime_ns


def load_volume_model(model: str | os.PathLike[str] | CheckpointFile) -> VolumeModel:
    """Read and check the ``best.pt`` of a volume recipe that ``model`` names (see the module
    docstring); raises a one-line :class:`CheckpointError` or :class:`RecipeError`."""
    ckpt = read_checkpoint(model)
    path, payload = ckpt.path, ckpt.payload
    recipe = _volume_recipe(path, ckpt.recipe)
    if ckpt.format != "checkpoint":
        raise CheckpointError(
            f"model {path} is a {ckpt.format} file; predict dicom serves best.pt checkpoints",
            remedy="pass the best.pt of the `gpuspark train resnet3d` run",
        )
    extra, dataset = lineage_extra(path, payload)
    prep = extra.get("prep")
    options = dicom_options(prep, path)
    cfg = recipe_config(payload.get("config"), path)
    manifest = Manifest(extra=dict(extra))
    classes = int(recipe.num_classes(cfg, manifest))
    decode = recipe.decoder(cfg, manifest)  # a RecipeError names an option the data cannot serve
    input_shape = _input_shape(decode, options)
    _check_network(path, recipe, cfg, classes, payload["model"], input_shape, options)
    return VolumeModel(
        path=str(path),
        mtime_ns=ckpt.mtime_ns,
        recipe=recipe.name,
        classes=classes,
        options=options,
        decode=decode,
        input_shape=input_shape,
        prep=dict(prep or {}),
        dataset=dataset,
        label_names=dict(extra.get("label_map") or {}),
        epoch=payload.get("epoch"),
        scores=dict(payload.get("scores") or {}),
        data=ckpt.data,
    )


def _volume_recipe(path: Location, name: str) -> Recipe:
    """The registered recipe ``name``, refused unless it reads DICOM volumes."""
    if recipe_input(name) == "volume":
        return get_recipe(name)
    served = ", ".join(volume_recipes())
    remedy = "pass the best.pt of a `gpuspark train resnet3d` run"
    if name in SERVED_RECIPES:
        raise RecipeError(
            f"model {path} is a {name!r} checkpoint, which scores tables, not DICOM studies; "
            f"predict dicom serves checkpoints of {served}",
            remedy=f"score tables with `gpuspark predict TABLE --model {shlex.quote(str(path))}`"
            f", or {remedy}",
        )
    raise RecipeError(
        f"model {path} is a {name!r} checkpoint, not trained on DICOM volumes; predict dicom "
        f"serves checkpoints of {served}",
        remedy=remedy,
    )


def dicom_options(prep: Any, path: Location | str) -> DicomOptions:
    """The :class:`DicomOptions` of a ``prep dicom`` job from the ``prep`` entry its manifest
    recorded (written by :func:`gpuspark.data.prep.prep_dicom`): the window as recorded
    (name, level, width; ``level`` None: raw HU), spacing and shape ``(z, y, x)``, the output
    dtype and the minimum slices."""
    if not isinstance(prep, Mapping) or prep.get("kind") != "dicom":
        kind = prep.get("kind") if isinstance(prep, Mapping) else None
        raise CheckpointError(
            f"model {path}: its training dataset was not made by `gpuspark prep dicom` "
            f"(recorded prep kind: {kind!r}), so its DICOM preprocessing is unknown",
            remedy=f"pass a checkpoint trained on a `gpuspark prep dicom` dataset, or {_RETRAIN}",
        )
    try:
        if prep.get("axes", "zyx") != "zyx":
            raise ValueError(f"axes {prep['axes']!r}, expected 'zyx'")
        w = prep["window"]
        window = Window(str(w["name"]), _float(w["level"]), _float(w["width"]))
        return DicomOptions(
            spacing=_triple(prep.get("spacing"), float),
            shape=_triple(prep.get("shape"), int),
            window=window,
            dtype="uint8" if window.raw else str(prep["dtype"]),
            min_slices=int(prep.get("min_slices", DicomOptions.min_slices)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(
            f"model {path}: the DICOM preprocessing its training dataset recorded cannot be "
            f"read ({type(exc).__name__}: {exc})",
            remedy=_RETRAIN,
        ) from None


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _triple(value: Any, kind: type) -> Any:
    return None if value is None else tuple(kind(v) for v in value)


def recipe_config(config: Any, path: Location | str) -> RecipeConfig:
    """The :class:`RecipeConfig` a ``best.pt`` recorded (``asdict`` of the run's config):
    each group's known fields, and the model options of every recipe this process knows."""
    if not isinstance(config, Mapping):
        raise CheckpointError(f"model {path} records no config", remedy=_RETRAIN)
    try:
        groups: dict[str, Any] = {}
        for attr, cls in GROUPS.items():
            values = _known(cls, config.get(attr) or {})
            if attr == "model":
                values["options"] = _recipe_options(values.get("options") or {})
            groups[attr] = cls(**values)
        return RecipeConfig(**groups, extra=dict(config.get("extra") or {}))
    except (GpusparkError, TypeError, ValueError) as exc:
        text = exc.message if isinstance(exc, GpusparkError) else str(exc)
        raise CheckpointError(
            f"model {path}: its recorded config cannot be read ({text})", remedy=_RETRAIN
        ) from None


def _known(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def _recipe_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Recipe name -> its options dataclass, for the recipes registered here."""
    out: dict[str, Any] = {}
    for name, values in options.items():
        try:
            cls = get_recipe(name).options
        except RecipeError:  # a recipe of another process: its options do not matter here
            continue
        if cls is not None and isinstance(values, Mapping):
            out[name] = cls(**_known(cls, values))
    return out


def _input_shape(decode: Decoder, options: DicomOptions) -> tuple[int, ...] | None:
    """The decoder's output for a volume of the recorded shape and dtype (what one volume
    gives the network), or None without a fixed shape."""
    import numpy as np

    if options.shape is None:
        return None
    volume = np.zeros(options.shape, dtype=np.dtype(options.out_dtype))
    x, _ = decode({"volume": volume, "label": 0})
    return tuple(int(n) for n in np.shape(x))


def _check_network(
    path: Location,
    recipe: Recipe,
    cfg: RecipeConfig,
    classes: int,
    state: Mapping[str, Any],
    input_shape: tuple[int, ...] | None,
    options: DicomOptions,
) -> None:
    """The recipe's network, built on the ``meta`` device from the recorded config: its
    parameters have the saved weights' shapes, and it takes ``input_shape``."""
    import torch

    with torch.device("meta"):
        net = recipe.build_model(cfg, classes).eval()
    want = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in state.items() if hasattr(v, "shape")}
    problems = _state_problems(want, have)
    if problems:
        raise CheckpointError(
            f"model {path}: its weights do not fit the {recipe.name} network of its recorded "
            f"config ({problems})",
            remedy=_RETRAIN,
        )
    if input_shape is None:
        return
    try:
        with torch.no_grad():
            out = net(torch.zeros((1, *input_shape), device="meta"))
        if tuple(out.shape) != (1, classes):
            raise ValueError(f"output shape {list(out.shape)}, expected [1, {classes}]")
    except (RuntimeError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise RecipeError(
            f"model {path} does not take the volumes its training dataset's preprocessing "
            f"makes (shape {list(options.shape or ())}, model input {list(input_shape)}): {first}",
            remedy="pass the checkpoint trained on that dataset, or retrain the model on "
            "volumes of the shape it takes",
        ) from None


def _state_problems(want: dict[str, tuple[int, ...]], have: dict[str, tuple[int, ...]]) -> str:
    missing = sorted(set(want) - set(have))
    unexpected = sorted(set(have) - set(want))
    shapes = [k for k in want if k in have and want[k] != have[k]]
    out = []
    if missing:
        out.append(f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if unexpected:
        out.append(f"unexpected {', '.join(unexpected[:3])}{' ...' if len(unexpected) > 3 else ''}")
    if shapes:
        k = shapes[0]
        out.append(f"{k}: {list(have[k])} saved, {list(want[k])} built")
    return "; ".join(out)


def build_volume_network(data: bytes, path: str) -> Any:
    """The network of the ``best.pt`` bytes ``data`` (read from ``path``), in eval mode on
    the CPU: the recipe's network of the recorded config, with the saved weights."""
    payload = read_payload(Path(path), data)
    recipe = get_recipe(str(payload["recipe"]))
    cfg = recipe_config(payload.get("config"), path)
    extra, _ = lineage_extra(Path(path), payload)
    net = recipe.build_model(cfg, recipe.num_classes(cfg, Manifest(extra=dict(extra))))
    net.load_state_dict(payload["model"])
    return net.eval()
