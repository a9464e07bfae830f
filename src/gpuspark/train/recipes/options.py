"""The built-in recipes' own model options, one dataclass per recipe, each declared on its
recipe (``Recipe.options``) and beside the others here, away from the recipe modules: this
module imports neither torch nor numpy, so ``gpuspark train`` makes its flags from these
fields (:func:`~gpuspark.train.recipes.config.flag_fields`) without loading a network.

A new recipe with options declares its dataclass here and adds it to :data:`BUILTIN_OPTIONS`
(a test holds that table to the registry), or, outside gpuspark, anywhere: its options are
then :class:`~gpuspark.train.recipes.config.RecipeConfig` options but no ``train`` flags.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuspark.data.checks import check_window_pair
from gpuspark.errors import RecipeError

__all__ = [
    "BERT_SIZE_NAMES",
    "BUILTIN_OPTIONS",
    "RESNET_DEPTHS",
    "BertOptions",
    "ResNet3dOptions",
    "TabularOptions",
    "option",
    "window_pair",
]

RESNET_DEPTHS = (10, 18, 34, 50)
"""The ResNet depths a recipe can build (:data:`~gpuspark.train.recipes.resnet_model.LAYERS`)."""
BERT_SIZE_NAMES = ("tiny", "small", "base", "large")
"""``bert`` sizes (shapes in :data:`gpuspark.train.recipes.bert_model.BERT_SIZES`)."""


def option(
    default: Any = dataclasses.MISSING,
    *,
    cli: str | None = None,
    decls: tuple[str, ...] = (),
    recipe_default: bool = False,
    none_word: str | None = None,
    path: bool = False,
    parse: Callable[[str], Any] | None = None,
) -> Any:
    """A config field with what ``gpuspark train`` needs to make a flag of it.

    ``cli``: the flag's help (``None``: the field is no flag). ``decls``: the flag's names
    when not ``--<name>`` (``--<name>/--no-<name>`` for booleans). ``recipe_default``: the
    flag defaults to the recipe's :attr:`~.Recipe.defaults`, then to ``default`` (its help
    says which). ``none_word``: the flag's word for ``None`` (``--val-split none``).
    ``path``: the flag takes a path. ``parse``: the flag takes text, made the field's value
    by this function (a :class:`ValueError` saying the expected form is a usage error).
    """
    meta: dict[str, Any] = {"cli": cli, "decls": decls, "recipe_default": recipe_default}
    meta.update(none_word=none_word, path=path, parse=parse)
    return field(default=default, metadata=meta)


WINDOW_FORM = "LEVEL,WIDTH in HU with WIDTH > 0, e.g. 100,100"


def window_pair(text: str) -> tuple[float, float]:
    """``"LEVEL,WIDTH"`` -> ``(level, width)`` in HU; :class:`ValueError` naming the form."""
    try:
        return check_window_pair(tuple(float(x) for x in text.split(",")))
    except ValueError:
        raise ValueError(f"expected {WINDOW_FORM}") from None


@dataclass
class ResNet3dOptions:
    """The model options of ``resnet3d`` (``width`` is shared: :class:`ModelConfig`)."""

    depth: int = option(18, cli="resnet3d depth: 10, 18, 34 or 50.")
    """ResNet depth, one of :data:`RESNET_DEPTHS`."""
    stem_stride: int = option(1, cli="resnet3d first-conv stride (1 or 2).")
    """Stride of the first 7^3 convolution (``conv1_t_stride``); 2 cuts the compute of
    the stem, the most expensive layer at full resolution, about 8x."""
    window: tuple[float, float] | None = option(
        None, cli="resnet3d re-window LEVEL,WIDTH in HU (e.g. 100,100).", parse=window_pair
    )
    """Re-window uint8 CT volumes to (level, width) HU (``None``: as stored)."""
    pool: str = "avg"
    """Global pooling: ``"avg"`` (MONAI's default) or ``"max"`` (small focal findings)."""

    def __post_init__(self) -> None:
        if self.depth not in RESNET_DEPTHS:
            raise RecipeError(f"depth must be one of {RESNET_DEPTHS}, got: {self.depth}")
        if self.pool not in ("avg", "max"):
            raise RecipeError(f"pool must be 'avg' or 'max', got: {self.pool!r}")
        if self.window is not None:
            self.window = check_window_pair(self.window)


@dataclass
class TabularOptions:
    """The model options of ``tabular`` (``dropout`` is shared: :class:`ModelConfig`)."""

    hidden: int = option(128, cli="tabular: hidden units per MLP layer.")
    """Hidden units of each MLP layer."""
    layers: int = option(2, cli="tabular: hidden layers of the MLP.")
    """Hidden layers of the MLP (ReLU, dropout after each)."""
    class_weights: bool = option(True, cli="tabular: weight the loss by inverse class frequency.")
    """Weight the loss by inverse class frequency (the manifest's label counts, normalised
    to mean 1), for imbalanced labels such as 2% defaults."""

    def __post_init__(self) -> None:
        for name in ("hidden", "layers"):
            if getattr(self, name) < 1:
                raise RecipeError(f"{name} must be >= 1, got: {getattr(self, name)}")


@dataclass
class BertOptions:
    """The model options of ``bert`` (``dropout`` is shared: :class:`ModelConfig`)."""

    size: str = option("tiny", cli="bert: encoder size tiny, small, base or large.")
    """Encoder size, one of :data:`BERT_SIZE_NAMES`."""
    mask_prob: float = 0.15
    """Share of the non-special tokens masked in each sequence."""

    def __post_init__(self) -> None:
        if self.size not in BERT_SIZE_NAMES:
            raise RecipeError(f"size must be one of {BERT_SIZE_NAMES}, got: {self.size!r}")
        if not 0 < self.mask_prob < 1:
            raise RecipeError(f"mask_prob must be in (0, 1), got: {self.mask_prob}")


BUILTIN_OPTIONS: dict[str, type] = {
    "bert": BertOptions,
    "resnet3d": ResNet3dOptions,
    "tabular": TabularOptions,
}
"""Built-in recipe name -> its options dataclass (the recipe's ``Recipe.options``)."""
