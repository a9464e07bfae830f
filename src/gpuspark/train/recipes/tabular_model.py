"""The ``tabular`` recipe's network: normalised numeric features with missing indicators and
categorical embeddings, concatenated into an MLP.

Imports torch at module level: import it where a network is built, not at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["TabularNet", "embedding_dim"]


def embedding_dim(vocab: int) -> int:
    """Embedding width of a categorical column with ``vocab`` kept values:
    ``min(16, (vocab + 1) // 2 + 1)``."""
    return min(16, (vocab + 1) // 2 + 1)


class TabularNet(nn.Module):
    """MLP over ``[numeric columns | categorical codes]`` rows (float32 ``[n, n_num + n_cat]``).

    Numeric columns are standardised with ``mean``/``std`` (buffers: saved with the model);
    a NaN becomes 0 after standardising and sets that column's missing indicator. Each
    categorical code (0 = missing or not kept, ``i + 1`` = ``vocab[i]``) goes through its own
    embedding of ``vocab + 1`` rows. The concatenation feeds ``layers`` blocks of Linear,
    ReLU and dropout, then a Linear to ``num_classes`` logits.
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        vocab_sizes: Sequence[int],
        num_classes: int,
        *,
        hidden: int = 128,
        layers: int = 2,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if len(mean) != len(std):
            raise ValueError(f"{len(mean)} means but {len(std)} standard deviations")
        self.n_num = len(mean)
        self.vocab_sizes = [int(v) for v in vocab_sizes]
        self.register_buffer("mean", torch.tensor(list(mean), dtype=torch.float32))
        self.register_buffer("std", torch.tensor(list(std), dtype=torch.float32))
        self.embeddings = nn.ModuleList(
            nn.Embedding(v + 1, embedding_dim(v)) for v in self.vocab_sizes
        )
        width = 2 * self.n_num + sum(embedding_dim(v) for v in self.vocab_sizes)
        blocks: list[nn.Module] = []
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        blocks.append(nn.Linear(width, num_classes))
        self.mlp = nn.Sequential(*blocks)

    @property
    def n_cat(self) -> int:
        """Categorical columns."""
        return len(self.vocab_sizes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP's input: standardised numbers, missing indicators, embeddings."""
        if x.shape[1] != self.n_num + self.n_cat:
            raise ValueError(
                f"expected {self.n_num} numeric + {self.n_cat} categorical columns, "
                f"got {x.shape[1]}"
            )
        num = x[:, : self.n_num].float()
        missing = torch.isnan(num)
        z = torch.where(missing, torch.zeros_like(num), (num - self.mean) / self.std)
        parts = [z, missing.to(z.dtype)]
        codes = x[:, self.n_num :].round().long()
        for i, emb in enumerate(self.embeddings):
            parts.append(emb(codes[:, i].clamp(0, self.vocab_sizes[i])).to(z.dtype))
        return torch.cat(parts, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[n, num_classes]``."""
        return self.mlp(self.features(x))
