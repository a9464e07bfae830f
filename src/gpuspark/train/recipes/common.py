"""Building blocks the recipes share: augmentation and scores."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["accuracy", "augment", "roc_auc"]


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
    """ROC AUC (Mann-Whitney U, ties count half); ``None`` if only one class is present."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(bool)
    pos, neg = s[y], s[~y]
    if len(pos) == 0 or len(neg) == 0:
        return None
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))
