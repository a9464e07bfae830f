"""Options of a recipe run (:class:`RecipeConfig`) and the training-window parser."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuspark.errors import RecipeError
from gpuspark.train.fsdp import check_strategy

__all__ = ["BERT_SIZE_NAMES", "RESNET_DEPTHS", "RecipeConfig"]

RESNET_DEPTHS = (10, 18, 34, 50)
"""The MONAI ResNet depths a recipe can build."""
BERT_SIZE_NAMES = ("tiny", "small", "base", "large")
"""``bert`` sizes (shapes in :data:`gpuspark.train.recipes.bert_model.BERT_SIZES`)."""


@dataclass
class RecipeConfig:
    """Options of a recipe run; all ranks get the same copy.

    Options a recipe does not use are ignored by it (``depth`` by ``resnet2d``, ``window``
    by recipes on images); which recipe reads what is said under each field.
    """

    data: str
    """Dataset directory (or URL) written by ``gpuspark prep``."""
    epochs: int = 10
    batch_size: int = 8
    """Per-rank batch size."""
    lr: float = 1e-3
    weight_decay: float = 1e-4
    strategy: str = "ddp"
    """Data parallelism: ``"ddp"`` (replicas), ``"fsdp"`` (every rank holds a shard of the
    parameters, gradients and optimizer state) or ``"hsdp"`` (sharded within a node,
    replicated across nodes); see :func:`gpuspark.train.prepare`."""
    compression: str | None = None
    """DDP gradient compression (``fp16``, ``bf16``, ``powersgd``); refused with fsdp/hsdp."""
    powersgd_rank: int = 2
    powersgd_start_iter: int = 10
    amp: str | None = None
    depth: int = 18
    """ResNet depth for ``resnet3d`` (10, 18, 34, 50); ``resnet2d`` is ResNet-50."""
    width: float = 1.0
    """MONAI ``widen_factor``: channel width multiplier (0.25 = 16/32/64/128 channels)."""
    augment: bool = True
    seed: int = 0
    num_workers: int = 0
    threads: int | None = None
    """torch intra-op threads per rank (``None``: torch's default)."""
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = False
    """Continue the run in ``checkpoint_dir`` from its newest checkpoint."""
    overwrite: bool = False
    """Start a new run in a ``checkpoint_dir``/``out`` that holds an earlier one: its
    checkpoints, ``best.pt`` and ``history.json`` are removed first, other files stay.
    Without it (and without ``resume``) a directory that holds anything is refused."""
    out: str | None = None
    """Where ``best.pt`` and ``history.json`` go (default: ``checkpoint_dir``)."""
    train_split: str | None = "train"
    """The split to train on; ``None``: every record (a dataset without splits)."""
    val_split: str | None = "val"
    """The split scored after each epoch; ``None``: no validation."""
    test_split: str | None = None
    """Evaluate the best model on this split at the end (rank 0); ``None``: skip."""
    num_classes: int | None = None
    """Classes of ``resnet2d`` (default: from the manifest's label map)."""
    window: tuple[float, float] | None = None
    """``resnet3d``: re-window uint8 CT volumes to (level, width) HU (``None``: as stored)."""
    pool: str = "avg"
    """``resnet3d`` global pooling: ``"avg"`` (MONAI's) or ``"max"`` (small focal findings)."""
    stem_stride: int = 1
    """``resnet3d`` stride of the first 7^3 convolution (MONAI ``conv1_t_stride``); 2 cuts
    the compute of the stem, the most expensive layer at full resolution, about 8x."""
    hidden: int = 128
    """``tabular``: hidden units of each MLP layer."""
    layers: int = 2
    """``tabular``: hidden layers of the MLP (ReLU, dropout after each)."""
    dropout: float = 0.1
    """``tabular``: dropout after each hidden layer."""
    class_weights: bool = True
    """``tabular``: weight the loss by inverse class frequency (the manifest's label counts,
    normalised to mean 1), for imbalanced labels such as 2% defaults."""
    size: str = "tiny"
    """``bert``: encoder size, one of :data:`BERT_SIZE_NAMES`."""
    mask_prob: float = 0.15
    """``bert``: share of the non-special tokens masked in each sequence."""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.depth not in RESNET_DEPTHS:
            raise RecipeError(f"depth must be one of {RESNET_DEPTHS}, got: {self.depth}")
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise RecipeError(f"{name} must be >= 1, got: {getattr(self, name)}")
        if self.pool not in ("avg", "max"):
            raise RecipeError(f"pool must be 'avg' or 'max', got: {self.pool!r}")
        for name in ("hidden", "layers"):
            if getattr(self, name) < 1:
                raise RecipeError(f"{name} must be >= 1, got: {getattr(self, name)}")
        if not 0 <= self.dropout < 1:
            raise RecipeError(f"dropout must be in [0, 1), got: {self.dropout}")
        if self.resume and self.overwrite:
            raise RecipeError(
                "resume and overwrite contradict each other: resume continues the run in the "
                "checkpoint directory, overwrite replaces it",
                remedy="pass one of --resume and --overwrite",
            )
        if self.lr <= 0:
            raise RecipeError(f"lr must be > 0, got: {self.lr}")
        if self.size not in BERT_SIZE_NAMES:
            raise RecipeError(f"size must be one of {BERT_SIZE_NAMES}, got: {self.size!r}")
        if not 0 < self.mask_prob < 1:
            raise RecipeError(f"mask_prob must be in (0, 1), got: {self.mask_prob}")

        check_strategy(self.strategy, self.compression)

    @property
    def out_dir(self) -> str | None:
        """Where ``best.pt`` and ``history.json`` go: ``out``, else ``checkpoint_dir``."""
        return self.out or self.checkpoint_dir
