"""``tabular``: an MLP with categorical embeddings on the tabular datasets of
``gpuspark prep parquet`` (the risk-scoring workload).

Reads table datasets (:mod:`gpuspark.data.format.table`) whose manifest has ``extra["tabular"]``:
block columns ``x`` (float32 numeric features, NaN = missing), ``c`` (int32 categorical codes,
when there are categoricals) and ``label``. Batches come from
:class:`gpuspark.data.load.TableDataset` as ``(x, y)``: the categorical codes appended to
``x`` as floats (exact below 2**24), which :class:`~.tabular_model.TabularNet` splits back.
Normalisation uses the manifest's statistics (train split), the loss is weighted by inverse
class frequency, and validation reports ROC AUC, PR AUC (average precision) and accuracy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuspark.data import format as fmt
from gpuspark.data.load import TableDataset, World
from gpuspark.errors import RecipeError
from gpuspark.train.recipes.common import accuracy, pr_auc, roc_auc
from gpuspark.train.recipes.config import RecipeConfig
from gpuspark.train.recipes.options import TabularOptions
from gpuspark.train.recipes.registry import Decoder, Recipe, register_recipe

if TYPE_CHECKING:
    from gpuspark.data.format import Manifest

__all__ = [
    "TABULAR",
    "ClassWeightedLoss",
    "TabularOptions",
    "TabularSpec",
    "build_tabular",
    "class_weights",
    "tabular_batch",
    "tabular_dataset",
    "tabular_metrics",
    "tabular_spec",
]

PREP_HINT = "prepare it with `gpuspark prep parquet SRC DST --label COL` (a tabular dataset)"


@dataclass(frozen=True)
class TabularSpec:
    """What the recipe needs from ``manifest.extra["tabular"]``."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    """Per numeric column; 1.0 where the statistics give none or zero."""
    vocab_sizes: tuple[int, ...]
    """Kept values per categorical column (its embedding has one more row: code 0)."""
    classes: int
    label_counts: tuple[int, ...]
    """Rows per class in the statistics split (empty when the manifest has none)."""


def tabular_spec(manifest: Manifest, dataset: str = "the dataset") -> TabularSpec:
    """The :class:`TabularSpec` of ``manifest``; :class:`RecipeError` when it is not a
    tabular dataset (no ``extra["tabular"]``) or its statistics are incomplete."""
    tab = manifest.extra.get("tabular")
    if not isinstance(tab, Mapping) or not isinstance(manifest.extra.get("table"), Mapping):
        raise RecipeError(
            f"{dataset} is not a tabular dataset (its manifest has no extra['tabular'])",
            remedy=PREP_HINT,
        )
    try:
        stats = tab.get("stats") or {}
        numeric = tuple(str(n) for n in tab.get("numeric", []))
        categorical = tuple(str(n) for n in tab.get("categorical", []))
        num_stats = [stats["numeric"][n] for n in numeric]
        cat_stats = [stats["categorical"][n] for n in categorical]
        classes = int(tab["classes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RecipeError(
            f"{dataset}: extra['tabular'] lacks {exc} (statistics or class count)",
            remedy="rewrite it with `gpuspark prep parquet`",
        ) from exc
    return TabularSpec(
        numeric=numeric,
        categorical=categorical,
        mean=tuple(float(s.get("mean") or 0.0) for s in num_stats),
        std=tuple(float(s.get("std") or 0.0) or 1.0 for s in num_stats),
        vocab_sizes=tuple(len(s.get("vocab") or []) for s in cat_stats),
        classes=classes,
        label_counts=tuple(int(c) for c in tab.get("label_counts") or []),
    )


def _check_width(manifest: Manifest, key: str, expected: int, dataset: str) -> None:
    shape = (manifest.schema.get(key) or {}).get("shape")
    if expected and shape and len(shape) == 2 and shape[1] not in (None, expected):
        raise RecipeError(
            f"{dataset}: block column {key!r} has {shape[1]} values per row but the manifest "
            f"names {expected} features",
            remedy="rewrite it with `gpuspark prep parquet`",
        )


def tabular_check(cfg: RecipeConfig, manifest: Manifest) -> Decoder:
    """The driver's and each rank's check of the dataset (batches come from
    :func:`tabular_dataset`, so the returned decoder is never called on a sample)."""
    spec = tabular_spec(manifest, cfg.dataset.data)
    _check_width(manifest, "x", len(spec.numeric), cfg.dataset.data)
    if spec.categorical:
        _check_width(manifest, "c", len(spec.categorical), cfg.dataset.data)
        count = int((manifest.schema.get("c") or {}).get("count", 0))
        if count < manifest.total_records:
            raise RecipeError(
                f"{cfg.dataset.data}: categoricals {', '.join(spec.categorical)} but block column "
                f"'c' is missing from {manifest.total_records - count} records",
                remedy="rewrite it with `gpuspark prep parquet`",
            )
    if spec.classes < 2:
        raise RecipeError(
            f"{cfg.dataset.data} has {spec.classes} label class(es); training needs at least 2",
            remedy="check the label column given to `gpuspark prep parquet --label`",
        )
    return _no_sample_decoding


def _no_sample_decoding(_sample: dict[str, Any]) -> tuple[np.ndarray, int]:
    raise RecipeError(
        "the tabular recipe reads blocks of rows (TableDataset), not single samples",
        remedy="read the dataset with gpuspark.train.recipes.tabular_dataset",
    )


def tabular_classes(cfg: RecipeConfig, manifest: Manifest) -> int:
    """``extra["tabular"]["classes"]`` (``cfg.model.num_classes`` when given, never fewer)."""
    classes = tabular_spec(manifest, cfg.dataset.data).classes
    if cfg.model.num_classes is not None and cfg.model.num_classes < classes:
        raise RecipeError(
            f"num_classes {cfg.model.num_classes} is below the {classes} classes of "
            f"{cfg.dataset.data}",
            remedy=f"leave num_classes unset or give at least {classes}",
        )
    return cfg.model.num_classes or classes


# -- data --------------------------------------------------------------------------------------


def tabular_batch(batch: Mapping[str, Any]) -> tuple[Any, Any]:
    """A table batch (``x`` float32 [n, n_num], ``c`` int32 [n, n_cat] if any, ``label``)
    -> ``(float32 tensor [n, n_num + n_cat], int64 tensor [n])``."""
    import torch

    y = np.asarray(batch["label"], dtype=np.int64)
    n = len(y)
    parts = [_matrix(batch.get("x"), n)]
    if batch.get("c") is not None:
        parts.append(_matrix(batch["c"], n))
    x = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y)


def _matrix(values: Any, n: int) -> np.ndarray:
    """Rows of a fixed-width array column as float32 [n, d] (0 columns when absent)."""
    if values is None:
        return np.zeros((n, 0), dtype=np.float32)
    arr = np.asarray(values)
    if arr.dtype == object:  # ragged storage (width 0): stack the rows
        arr = np.stack([np.asarray(r) for r in arr]) if n else arr
        if arr.ndim != 2:
            arr = np.zeros((n, 0), dtype=np.float32)
    return arr.reshape(n, -1).astype(np.float32, copy=False)


def tabular_dataset(cfg: RecipeConfig, split: str | None, training: bool) -> Any:
    """A :class:`~gpuspark.data.load.TableDataset` of ``split`` giving ``(x, y)`` batches:
    this rank's shuffled share when ``training``, else the whole split in order (one
    process, no padding rows)."""

    spec = tabular_spec(fmt.load_manifest(cfg.dataset.data), cfg.dataset.data)
    columns = ["x", "label"] + (["c"] if spec.categorical else [])
    if training:
        return TableDataset(
            cfg.dataset.data,
            columns=columns,
            split=split,
            seed=cfg.dataset.seed,
            transform=tabular_batch,
        )
    return TableDataset(
        cfg.dataset.data,
        columns=columns,
        split=split,
        shuffle=False,
        drop_last=False,
        transform=tabular_batch,
        world=World(),
    )


# -- model, loss, scores -----------------------------------------------------------------------


def build_tabular(cfg: RecipeConfig, num_classes: int) -> Any:
    """:class:`~.tabular_model.TabularNet` sized and normalised by ``cfg.data``'s manifest."""
    from gpuspark.train.recipes.tabular_model import TabularNet

    opts = cfg.model.of("tabular")

    spec = tabular_spec(fmt.load_manifest(cfg.dataset.data), cfg.dataset.data)
    return TabularNet(
        spec.mean,
        spec.std,
        spec.vocab_sizes,
        num_classes,
        hidden=opts.hidden,
        layers=opts.layers,
        dropout=cfg.model.dropout,
    )


def class_weights(label_counts: Any, classes: int) -> np.ndarray:
    """Inverse class frequencies normalised to mean 1 (float32 [classes]); a class without
    rows gets the largest weight of the others; all ones without counts."""
    counts = np.zeros(classes, dtype=np.float64)
    given = np.asarray(list(label_counts)[:classes], dtype=np.float64)
    counts[: len(given)] = given
    if not (counts > 0).any():
        return np.ones(classes, dtype=np.float32)
    inv = np.where(counts > 0, 1.0 / np.maximum(counts, 1.0), 0.0)
    inv[counts <= 0] = inv.max()
    return (inv / inv.mean()).astype(np.float32)


class ClassWeightedLoss:
    """Cross entropy with per-class weights (moved to the logits' device on first use)."""

    def __init__(self, weights: Any) -> None:
        self.weights = np.asarray(weights, dtype=np.float32)
        self._tensor: Any = None

    def __call__(self, logits: Any, targets: Any) -> Any:
        import torch

        if self._tensor is None or self._tensor.device != logits.device:
            self._tensor = torch.as_tensor(self.weights, device=logits.device)
        return torch.nn.functional.cross_entropy(
            logits.float(), targets, weight=self._tensor.float()
        )


def tabular_loss(cfg: RecipeConfig, manifest: Manifest) -> Any:
    """Class-weighted cross entropy (``cfg.class_weights``), else plain cross entropy."""
    spec = tabular_spec(manifest, cfg.dataset.data)
    classes = tabular_classes(cfg, manifest)
    if not cfg.model.of("tabular").class_weights:
        return ClassWeightedLoss(np.ones(classes, dtype=np.float32))
    return ClassWeightedLoss(class_weights(spec.label_counts, classes))


def tabular_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, float | None]:
    """``auc`` (ROC; binary: of class 1's probability, else the macro one-vs-rest mean;
    ``None`` with one class), ``pr_auc`` (average precision, likewise) and ``acc``."""
    labels = np.asarray(labels)
    if probs.shape[1] == 2:
        auc, ap = roc_auc(probs[:, 1], labels == 1), pr_auc(probs[:, 1], labels == 1)
    else:
        auc, ap = _one_vs_rest(probs, labels)
    return {"auc": auc, "pr_auc": ap, "acc": accuracy(probs, labels)}


def _one_vs_rest(probs: np.ndarray, labels: np.ndarray) -> tuple[float | None, float | None]:
    aucs, aps = [], []
    for k in range(probs.shape[1]):
        auc = roc_auc(probs[:, k], labels == k)
        if auc is not None:
            aucs.append(auc)
            aps.append(pr_auc(probs[:, k], labels == k) or 0.0)
    if not aucs:
        return None, None
    return float(np.mean(aucs)), float(np.mean(aps))


TABULAR = register_recipe(
    Recipe(
        name="tabular",
        description="MLP with categorical embeddings on tabular shards (gpuspark prep parquet); "
        "AUC, PR AUC, accuracy",
        keys=("x", "label"),
        build_model=build_tabular,
        decoder=tabular_check,
        num_classes=tabular_classes,
        metrics=tabular_metrics,
        best_by=("auc", "acc"),
        shape_options=("hidden", "layers"),
        input_kind="table",
        options=TabularOptions,
        dataset=tabular_dataset,
        loss=tabular_loss,
        augments=False,
        defaults={"batch_size": 512, "lr": 1e-3, "epochs": 10},
    )
)
