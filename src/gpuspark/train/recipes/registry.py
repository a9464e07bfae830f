"""The recipe registry: a recipe is a :class:`Recipe` value registered under its name.

Everything that differs between recipes (sample keys, decoder, network, class count,
metrics) is a field of the value, so the shared code in :mod:`.runner` never looks at a
recipe's name. A recipe module ends with ``register_recipe(Recipe(...))``, as torchtitan's
``register_train_spec`` does.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuspark.errors import RecipeError, did_you_mean

if TYPE_CHECKING:
    import numpy as np

    from gpuspark.data.format import Manifest
    from gpuspark.train.recipes.config import RecipeConfig

__all__ = [
    "Decoder",
    "Recipe",
    "check_dataset",
    "get_recipe",
    "model_config",
    "recipe_names",
    "register_recipe",
    "unregister_recipe",
]

Decoder = Callable[[dict[str, Any]], "tuple[np.ndarray, int]"]
"""A shard sample -> ``(float32 model input without the batch axis, integer label)``."""


@dataclass(frozen=True)
class Recipe:
    """A ready training recipe: what it reads, what it builds, how it is scored."""

    name: str
    """Registry key, the ``RECIPE`` of ``gpuspark train RECIPE``."""
    description: str
    """One line for listings and help."""
    keys: tuple[str, ...]
    """Sample keys every record of the dataset must have (checked before any rank starts)."""
    build_model: Callable[[RecipeConfig, int], Any]
    """``(config, num_classes) -> torch.nn.Module``."""
    decoder: Callable[[RecipeConfig, Manifest], Decoder]
    """``(config, manifest) -> decoder``; raises :class:`RecipeError` for options the
    dataset cannot serve (called on the driver too, before the ranks start)."""
    num_classes: Callable[[RecipeConfig, Manifest], int]
    """``(config, manifest) -> classes`` of the network's output."""
    metrics: Callable[[np.ndarray, np.ndarray], dict[str, float | None]]
    """``(softmax probabilities [N, C], labels [N]) -> scores`` by name (``{"acc": ...}``);
    validation reports them as ``val_<name>``, the test split under their own names."""
    best_by: tuple[str, ...]
    """Metric names, most preferred first: the best epoch has the highest value of the first
    one that is not ``None`` (e.g. AUC, else accuracy when a split has one class)."""
    shape_options: tuple[str, ...] = ()
    """:class:`RecipeConfig` fields that shape the network (``depth``, ``width``, ...): a
    checkpoint records them with the recipe name and class count, and a resume with other
    values is refused up front."""
    dataset: Callable[[RecipeConfig, str | None, bool], Any] | None = None
    """``(config, split, training) -> dataset`` with ``.loader(batch_size, num_workers=...)``,
    ``.manifest`` and the resume API of :class:`~gpuspark.data.load.ShardDataset`, whose
    batches are ``(x, y)`` tensors (e.g. a :class:`~gpuspark.data.load.TableDataset`).
    ``training=False``: the split read whole by one process, in order, without padding.
    ``None``: a ``ShardDataset`` of the recipe's decoder (then :attr:`decoder` only checks
    the dataset on the driver and the ranks)."""
    loss: Callable[[RecipeConfig, Manifest], Callable[[Any, Any], Any]] | None = None
    """``(config, manifest) -> loss_fn(logits, targets)`` (e.g. class-weighted);
    ``None``: ``torch.nn.functional.cross_entropy``."""
    augments: bool = True
    """Whether ``config.augment`` applies the shared image augmentation
    (:func:`~gpuspark.train.recipes.common.augment`) to this recipe's batches."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """:class:`RecipeConfig` values this recipe suits better than the shared defaults (e.g.
    ``{"batch_size": 512}`` for tables); the CLI uses them for options not given."""
    sample_shape: tuple[int, ...] = ()
    """A typical model input without the batch axis (``(1, 64, 64, 64)`` for CT volumes),
    which the planner counts FLOPs on when it is not told one; ``()``: none."""
    evaluate: (
        Callable[[Any, Any, RecipeConfig, Any], tuple[dict[str, float | None], int]] | None
    ) = None
    """``(network, dataset, config, device) -> (scores, samples)`` of one split, replacing
    the softmax + :attr:`metrics` path for recipes that are not classifiers (masked-LM loss
    and accuracy); called in eval mode under no-grad and autocast. ``None``: that path."""
    input_kind: str = ""
    """What the loader decodes for this recipe (``"volume"``, ``"jpeg"``, ``"table"``): the
    planner's decode-rate row."""
    options: type | None = None
    """The dataclass of this recipe's own model options (``resnet3d``: depth, stem stride,
    pooling, window), built with :func:`~gpuspark.train.recipes.config.option` and checked
    in its ``__post_init__``; ``None``: none. Its fields are :class:`RecipeConfig` options
    (``cfg.model.of(name)``, or ``cfg.depth`` flat) and, with ``cli`` help, ``gpuspark
    train`` flags. A name must not repeat one of another recipe or of the shared groups
    (options several recipes read belong in :class:`~.config.ModelConfig`)."""
    extras: tuple[tuple[str, str], ...] = ()
    """``(module, extra)`` pairs the recipe's model or decoder imports, checked on the driver
    before any rank starts (:func:`gpuspark._util.extras.check_extras`)."""

    def __post_init__(self) -> None:
        if not self.name or not self.keys or not self.best_by:
            raise RecipeError(
                f"recipe {self.name!r} needs a name, sample keys and best_by metrics, got: "
                f"keys={self.keys}, best_by={self.best_by}"
            )

    def score(self, metrics: dict[str, float | None]) -> float:
        """The value that ranks epochs: the first of ``best_by`` present in ``metrics``."""
        for name in self.best_by:
            value = metrics.get(name)
            if value is not None:
                return float(value)
        return float("-inf")


_REGISTRY: dict[str, Recipe] = {}
BUILTIN_MODULES = (
    "gpuspark.train.recipes.bert",
    "gpuspark.train.recipes.resnet2d",
    "gpuspark.train.recipes.resnet3d",
    "gpuspark.train.recipes.tabular",
)
"""The modules of the built-in recipes, each ending with ``register_recipe(...)``: imported
on the first look-up, as they import torch (``import gpuspark.train.recipes`` does not)."""
_LOADED: list[bool] = []


def _load_builtins() -> None:
    """Register the built-in recipes once (a module's own ``register_recipe`` call comes
    back here while it loads: the flag is set first)."""
    if _LOADED:
        return
    _LOADED.append(True)
    for module in BUILTIN_MODULES:
        importlib.import_module(module)


def register_recipe(recipe: Recipe, *, replace: bool = False) -> Recipe:
    """Make ``recipe`` available under ``recipe.name``; returns it.

    A name is registered once: registering it again raises unless ``replace=True``.
    """
    _load_builtins()
    if recipe.name in _REGISTRY and not replace:
        raise RecipeError(
            f"recipe {recipe.name!r} is already registered",
            remedy="pick another name, or pass replace=True to replace it",
        )
    _REGISTRY[recipe.name] = recipe
    return recipe


def unregister_recipe(name: str) -> Recipe:
    """Remove the recipe ``name`` from the registry and return it."""
    recipe = get_recipe(name)
    del _REGISTRY[name]
    return recipe


def get_recipe(name: str) -> Recipe:
    """The recipe registered as ``name``; an unknown name raises with the choices."""
    _load_builtins()
    recipe = _REGISTRY.get(name)
    if recipe is None:
        names = recipe_names()
        raise RecipeError(
            f"recipe {name!r} is unknown{did_you_mean(name, names)}",
            remedy="use one of: " + ", ".join(names),
        )
    return recipe


def recipe_names() -> tuple[str, ...]:
    """Names of the registered recipes, sorted."""
    _load_builtins()
    return tuple(sorted(_REGISTRY))


def model_config(recipe: Recipe, cfg: RecipeConfig, num_classes: int) -> dict[str, Any]:
    """What shapes the network of a run: recipe name, ``recipe.shape_options`` of ``cfg``
    and the class count (recorded in checkpoints, compared on resume)."""
    out: dict[str, Any] = {"recipe": recipe.name}
    out.update({name: getattr(cfg, name) for name in recipe.shape_options})
    out["num_classes"] = int(num_classes)
    return out


def check_dataset(recipe: Recipe, manifest: Manifest, dataset: str) -> None:
    """Raise :class:`RecipeError` unless every record of ``dataset`` has ``recipe.keys``.

    ``manifest`` is the dataset's (its schema counts the records having each key). The
    message names the first missing key, the dataset, its keys and the recipes that fit it.
    """
    total = manifest.total_records
    counts = _key_counts(manifest)
    for key in recipe.keys:
        count = counts.get(key, 0)
        if count >= total:
            continue
        has = "no" if count == 0 else f"{count} of {total} records with"
        fits = [r.name for r in _REGISTRY.values() if _has_keys(manifest, r.keys)]
        raise RecipeError(
            f"recipe {recipe.name!r} needs sample key {key!r}; dataset {dataset} has {has} "
            f"{key!r} (its keys: {', '.join(sorted(counts)) or 'none'})",
            remedy=(
                f"train a recipe that fits this dataset: {', '.join(fits)}"
                if fits
                else f"prepare data with the keys {', '.join(recipe.keys)} (gpuspark prep)"
            ),
        )


def _key_counts(manifest: Manifest) -> dict[str, int]:
    """Records having each sample key; a table dataset's keys are its columns (every block
    holds every column, see :mod:`gpuspark.data.format.table`)."""
    table = manifest.extra.get("table")
    if isinstance(table, dict):
        return {str(c["name"]): manifest.total_records for c in table.get("columns", [])}
    return {k: int((v or {}).get("count", 0)) for k, v in manifest.schema.items()}


def _has_keys(manifest: Manifest, keys: tuple[str, ...]) -> bool:
    counts, total = _key_counts(manifest), manifest.total_records
    return all(counts.get(k, 0) >= total for k in keys)
