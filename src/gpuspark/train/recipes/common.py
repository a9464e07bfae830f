"""Building blocks the recipes share: augmentation and scores."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["accuracy", "augment", "pr_auc", "roc_auc"]


def augment(x: Any, y: Any) -> tuple[Any, Any]:
    """Random flip of each spatial axis per sample and a small intensity shift (+-0.05)."""
    import torch

    spatial = list(range(2, x.dim()))
    for axis in spatial:
        flip = torch.rand(x.shape[0], device=x.device) < 0.5
        if bool(flip.any()):
            x = torch.where(flip.view(-1, *[1] * (x.dim() - 1)), x.flip(axis), x)
    shift = (torch.rand(x.shape[0], *[1] * (x.dim() - 1), device=x.device) - 0.5) * 0.1
    return x + shift, y


def accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy of class probabilities ``[N, C]``; 0.0 for no samples."""
    return float((probs.argmax(1) == labels).mean()) if len(labels) else 0.0


def roc_auc(scores: Any, labels: Any) -> float | None:
    """ROC AUC (Mann-Whitney U from average ranks, ties count half); ``None`` if only one
    class is present. O(N log N): fine for millions of validation rows."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(bool)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]  # 1-based average rank of each score
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def pr_auc(scores: Any, labels: Any) -> float | None:
    """Average precision: the area under the precision-recall curve as the step sum
    ``sum((R_k - R_{k-1}) * P_k)`` over distinct score thresholds, highest first (a tie
    group enters at once); ``None`` without positives."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(bool)
    n_pos = int(y.sum())
    if n_pos == 0:
        return None
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s) != 0), len(s) - 1]  # end of each tie group
    tp = np.cumsum(y)[last]
    precision = tp / (last + 1.0)
    recall = tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))
