"""Options of a recipe run: :class:`RecipeConfig`, the composition of one dataclass per
concern (:class:`DataConfig`, :class:`OptimConfig`, :class:`ParallelConfig`,
:class:`ModelConfig`, :class:`CheckpointConfig`), plus each recipe's own model options (a
dataclass declared on the recipe, :attr:`~gpuspark.train.recipes.registry.Recipe.options`).

Every leaf field has one name across the groups (``epochs``, ``depth``, ...): the keyword of
flat construction (``RecipeConfig(data=..., epochs=2, depth=10)``), the attribute read
``cfg.epochs``, and, where its metadata carries ``cli`` help, the ``gpuspark train`` flag
(``--epochs``; see :func:`option`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuspark.errors import RecipeError
from gpuspark.train.recipes.options import BERT_SIZE_NAMES, BUILTIN_OPTIONS, RESNET_DEPTHS, option
from gpuspark.train.recipes.registry import get_recipe, recipe_names

__all__ = [
    "BERT_SIZE_NAMES",
    "GROUPS",
    "RESNET_DEPTHS",
    "CheckpointConfig",
    "DataConfig",
    "ModelConfig",
    "OptimConfig",
    "ParallelConfig",
    "RecipeConfig",
    "check_dropout",
    "flag_fields",
    "leaf_fields",
    "option",
]


def check_dropout(value: float) -> None:
    """Refuse a dropout outside [0, 1)."""
    if not 0 <= value < 1:
        raise RecipeError(f"dropout must be in [0, 1), got: {value}")


def _at_least_one(obj: Any, *names: str) -> None:
    for name in names:
        if getattr(obj, name) < 1:
            raise RecipeError(f"{name} must be >= 1, got: {getattr(obj, name)}")


DEFAULT_CACHE_DIR = "~/.gpuspark/cache/shards"
"""The node cache's folder when none is given, on each node (``~`` is the rank's home)."""


@dataclass
class DataConfig:
    """What each rank reads of the dataset, and how."""

    data: str = option(cli="Dataset written by `gpuspark prep`.", decls=("--data",), path=True)
    """Dataset directory (or URL) written by ``gpuspark prep``."""
    train_split: str | None = option(
        "train", cli="Split to train on; 'all': every record (no splits).", none_word="all"
    )
    """The split to train on; ``None``: every record (a dataset without splits)."""
    val_split: str | None = option(
        "val", cli="Split scored after each epoch; 'none': no validation.", none_word="none"
    )
    """The split scored after each epoch; ``None``: no validation."""
    test_split: str | None = option(
        None, cli="Split scored once at the end with the best model (e.g. test)."
    )
    """Evaluate the best model on this split at the end (rank 0); ``None``: skip."""
    num_workers: int = 0
    """Loader worker processes per rank."""
    cache: bool = option(
        True,
        cli="Copy the shards of a dataset at a URL to a node-local cache, fetched once for "
        "every rank of the node and every epoch (--no-cache: read them from the store each "
        "time).",
    )
    """Node cache of a remote dataset's shards (:class:`~gpuspark.data.load.ShardCache`)."""
    cache_dir: str | None = option(
        None,
        cli=f"The node-local cache folder [default: {DEFAULT_CACHE_DIR}].",
        path=True,
    )
    """Where the node cache lies (each node's own disk); ``None``: :data:`DEFAULT_CACHE_DIR`."""
    cache_gb: float | None = option(
        None, cli="Cap of the node cache in GB; the least recently used shards go first."
    )
    """The cache's cap in GB (``None``: no cap)."""
    augment: bool = True
    """Apply the shared image augmentation (recipes with ``Recipe.augments``)."""
    seed: int = 0
    """Seed of the shuffle, the initial weights and the augmentation."""

    def __post_init__(self) -> None:
        if self.cache_gb is not None and not self.cache_gb > 0:
            raise RecipeError(f"cache_gb must be > 0 (GB), got: {self.cache_gb}")


@dataclass
class OptimConfig:
    """The optimizer (AdamW, cosine schedule) and the length of the run."""

    epochs: int = option(
        10, cli="Passes over the training split [default: 10].", recipe_default=True
    )
    """Passes over the training split."""
    batch_size: int = option(
        8, cli="Batch size per rank [default: 8; tabular: 512].", recipe_default=True
    )
    """Per-rank batch size."""
    lr: float = option(
        1e-3, cli="AdamW learning rate, cosine schedule [default: 1e-3].", recipe_default=True
    )
    """AdamW learning rate (cosine schedule over ``epochs``)."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""

    def __post_init__(self) -> None:
        _at_least_one(self, "epochs", "batch_size")
        if self.lr <= 0:
            raise RecipeError(f"lr must be > 0, got: {self.lr}")


@dataclass
class ParallelConfig:
    """How the ranks share the work, and how each computes."""

    strategy: str = option(
        "ddp",
        cli="ddp (full replicas), fsdp (each rank holds a shard of the model state) or "
        "hsdp (sharded within a node, replicated across nodes).",
    )
    """Data parallelism: ``"ddp"`` (replicas), ``"fsdp"`` (every rank holds a shard of the
    parameters, gradients and optimizer state) or ``"hsdp"`` (sharded within a node,
    replicated across nodes); see :func:`gpuspark.train.prepare`."""
    compression: str | None = option(
        None,
        cli="Gradient compression (ddp only): fp16, bf16, powersgd or powersgd:R (R: its "
        "matrix rank, as in gpuspark plan).",
    )
    """DDP gradient compression (``fp16``, ``bf16``, ``powersgd``, or ``powersgd:R`` which
    sets :attr:`powersgd_rank` too, the syntax of ``gpuspark plan``); refused with
    fsdp/hsdp."""
    powersgd_rank: int = option(2, cli="PowerSGD matrix rank (or --compression powersgd:R).")
    """PowerSGD matrix rank."""
    powersgd_start_iter: int = 10
    """Steps of plain allreduce before PowerSGD starts."""
    amp: str | None = option(None, cli="Mixed precision: bf16 or fp16.")
    """Mixed precision: ``bf16`` or ``fp16`` (``None``: fp32)."""
    threads: int | None = option(None, cli="torch threads per rank.")
    """torch intra-op threads per rank (``None``: torch's default)."""

    def __post_init__(self) -> None:
        from gpuspark.train.fsdp import check_strategy  # see tests/test_layout.py

        if self.compression is not None and self.compression.startswith("powersgd:"):
            self.compression, self.powersgd_rank = "powersgd", _powersgd_rank(self.compression)
        check_strategy(self.strategy, self.compression)


def _powersgd_rank(text: str) -> int:
    """``powersgd:R`` -> R (a whole number >= 1), else one-line error naming the form."""
    rank = text.partition(":")[2]
    if not rank.isdigit() or int(rank) < 1:
        raise RecipeError(
            f"compression {text!r}: expected powersgd:R with R a whole number >= 1",
            remedy="e.g. --compression powersgd:4",
        )
    return int(rank)


@dataclass
class ModelConfig:
    """Model options more than one recipe reads; each recipe's own are in :attr:`options`."""

    width: float = option(1.0, cli="Channel width multiplier.")
    """``resnet3d``, ``resnet2d``: ``widen_factor`` (MONAI's name), the channel width multiplier
    (0.25 = 16/32/64/128 channels)."""
    dropout: float = option(0.1, cli="tabular, bert: dropout after each layer.")
    """``tabular``, ``bert``: dropout after each layer."""
    num_classes: int | None = None
    """Classes of ``resnet2d`` and ``tabular`` (default: from the manifest)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Recipe name -> its :attr:`~.Recipe.options` (missing: that dataclass's defaults)."""

    def __post_init__(self) -> None:
        check_dropout(self.dropout)

    def of(self, recipe: str) -> Any:
        """The model options of ``recipe`` (an instance of its ``Recipe.options``)."""
        found = self.options.get(recipe)
        if found is None:
            cls = get_recipe(recipe).options
            found = cls() if cls is not None else None
        return found


@dataclass
class CheckpointConfig:
    """Where a run saves, and whether it continues or replaces an earlier one."""

    checkpoint_dir: str | None = option(
        None, cli="Checkpoints (every epoch), best.pt, history.json.", path=True
    )
    """Checkpoints (every epoch), ``best.pt`` and ``history.json`` (unless ``out``)."""
    checkpoint_every: int = option(0, cli="Also every N steps (0: off).")
    """Also checkpoint every N steps (0: off)."""
    resume: bool = option(False, cli="Continue from the newest checkpoint.")
    """Continue the run in ``checkpoint_dir`` from its newest checkpoint."""
    overwrite: bool = option(
        False,
        cli="Start a new run in a --checkpoint-dir that holds an earlier one (its "
        "checkpoints, best.pt and history.json are removed; other files stay).",
        decls=("--overwrite",),
    )
    """Start a new run in a ``checkpoint_dir``/``out`` that holds an earlier one: its
    checkpoints, ``best.pt`` and ``history.json`` are removed first, other files stay.
    Without it (and without ``resume``) a directory that holds anything is refused."""
    out: str | None = None
    """Where ``best.pt`` and ``history.json`` go (default: ``checkpoint_dir``)."""

    def __post_init__(self) -> None:
        if self.resume and self.overwrite:
            raise RecipeError(
                "resume and overwrite contradict each other: resume continues the run in the "
                "checkpoint directory, overwrite replaces it",
                remedy="pass one of --resume and --overwrite",
            )

    @property
    def out_dir(self) -> str | None:
        """Where ``best.pt`` and ``history.json`` go: ``out``, else ``checkpoint_dir``."""
        return self.out or self.checkpoint_dir


GROUPS: dict[str, type] = {
    "dataset": DataConfig,
    "optim": OptimConfig,
    "parallel": ParallelConfig,
    "model": ModelConfig,
    "checkpoint": CheckpointConfig,
}
""":class:`RecipeConfig` attribute -> its group, in flag order."""


def flag_fields() -> dict[str, tuple[str, dataclasses.Field[Any]]]:
    """:func:`leaf_fields` of the groups and the built-in recipes' options
    (:data:`~.options.BUILTIN_OPTIONS`), without importing a recipe: what ``gpuspark train``
    makes its flags of (the fields whose metadata has ``cli`` help)."""
    return leaf_fields(BUILTIN_OPTIONS)


def leaf_fields(
    recipe_options: Mapping[str, type] | None = None,
) -> dict[str, tuple[str, dataclasses.Field[Any]]]:
    """Every leaf option by name -> ``(owner, field)``, in flag order: the owner is a
    :data:`GROUPS` attribute, or ``"recipe:<name>"`` for a recipe's own model options
    (after the shared model options), of ``recipe_options`` (name -> dataclass; default:
    every registered recipe's). A name declared twice raises."""
    if recipe_options is None:
        recipe_options = {n: c for n in recipe_names() if (c := get_recipe(n).options)}
    owners: list[tuple[str, type]] = []
    for attr, cls in GROUPS.items():
        owners.append((attr, cls))
        if attr == "model":
            owners += [(f"recipe:{n}", c) for n, c in sorted(recipe_options.items())]
    out: dict[str, tuple[str, dataclasses.Field[Any]]] = {}
    for owner, cls in owners:
        for f in dataclasses.fields(cls):
            if owner == "model" and f.name == "options":
                continue
            if f.name in out:
                raise RecipeError(
                    f"option {f.name!r} of {owner} is also declared by {out[f.name][0]}",
                    remedy="give the recipe option another name",
                )
            out[f.name] = (owner, f)
    return out


@dataclass(init=False)
class RecipeConfig:
    """Options of a recipe run; all ranks get the same copy.

    Built nested (``RecipeConfig(dataset=DataConfig(data=...), optim=OptimConfig(...))``) or
    flat (``RecipeConfig(data=..., epochs=2, depth=10)``: each name goes to its group, or
    to every recipe whose model options declare it); both may be mixed, flat names last.
    ``cfg.epochs`` reads a leaf by name. Options a recipe does not use are ignored by it.
    """

    dataset: DataConfig
    optim: OptimConfig
    parallel: ParallelConfig
    model: ModelConfig
    checkpoint: CheckpointConfig
    extra: dict[str, Any]
    """Free-form values for custom recipes."""

    def __init__(
        self,
        *,
        dataset: DataConfig | None = None,
        optim: OptimConfig | None = None,
        parallel: ParallelConfig | None = None,
        model: ModelConfig | None = None,
        checkpoint: CheckpointConfig | None = None,
        extra: dict[str, Any] | None = None,
        **flat: Any,
    ) -> None:
        given: dict[str, Any] = {"dataset": dataset, "optim": optim, "parallel": parallel}
        given.update(model=model, checkpoint=checkpoint)
        leaves = leaf_fields()
        unknown = sorted(set(flat) - set(leaves))
        if unknown:
            raise TypeError(f"RecipeConfig got unexpected keyword arguments: {unknown}")
        by_owner: dict[str, dict[str, Any]] = {}
        for name, value in flat.items():
            by_owner.setdefault(leaves[name][0], {})[name] = value
        for attr, cls in GROUPS.items():
            values = by_owner.get(attr, {})
            group = given[attr]
            setattr(self, attr, cls(**values) if group is None else _replace(group, values))
        self.model = _with_recipe_options(self.model, by_owner)
        self.extra = dict(extra or {})

    def __getattr__(self, name: str) -> Any:
        # Only for names that are no attribute: a leaf option read flat (``cfg.epochs``).
        if name.startswith("_") or "model" not in self.__dict__:
            raise AttributeError(name)
        owner = leaf_fields().get(name, (None,))[0]
        if owner is None:
            raise AttributeError(f"'RecipeConfig' object has no attribute {name!r}")
        if owner.startswith("recipe:"):
            return getattr(self.model.of(owner[len("recipe:") :]), name)
        return getattr(getattr(self, owner), name)

    @property
    def out_dir(self) -> str | None:
        """Where ``best.pt`` and ``history.json`` go: ``out``, else ``checkpoint_dir``."""
        return self.checkpoint.out_dir


def _replace(group: Any, values: dict[str, Any]) -> Any:
    return dataclasses.replace(group, **values) if values else group


def _with_recipe_options(model: ModelConfig, by_owner: dict[str, dict[str, Any]]) -> ModelConfig:
    """``model`` with every registered recipe's options, flat values applied."""
    options = dict(model.options)
    for name in recipe_names():
        cls = get_recipe(name).options
        if cls is None:
            continue
        values = by_owner.get(f"recipe:{name}", {})
        current = options.get(name)
        options[name] = cls(**values) if current is None else _replace(current, values)
    return dataclasses.replace(model, options=options)
