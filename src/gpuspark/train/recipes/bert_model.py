"""The ``bert`` recipe's network: a pure-torch BERT-style masked-language-model encoder.

Token + position embeddings and LayerNorm, ``layers`` post-norm encoder layers
(:class:`BertLayer`, GELU, 4x feed-forward), and an MLM head (dense, GELU, LayerNorm) whose
output projection is tied to the token embedding. :class:`BertLayer` is the FSDP wrap unit:
its name ends in ``Layer``, which is what :func:`gpuspark.train.fsdp.block_modules` shards on
its own by default.

Imports torch at module level: import it where a network is built, not at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["BERT_SIZES", "BertLayer", "BertMLM", "BertSize"]


@dataclass(frozen=True)
class BertSize:
    """The shape of one size of the encoder."""

    layers: int
    hidden: int
    heads: int

    @property
    def ffn(self) -> int:
        """Feed-forward width (4 x hidden, as BERT)."""
        return 4 * self.hidden


BERT_SIZES: dict[str, BertSize] = {
    "tiny": BertSize(layers=2, hidden=64, heads=2),
    "small": BertSize(layers=4, hidden=256, heads=4),
    "base": BertSize(layers=12, hidden=768, heads=12),
    "large": BertSize(layers=24, hidden=1024, heads=16),
}
"""``--size``: ``base`` and ``large`` have the shapes of BERT-base and BERT-large."""


class BertLayer(nn.TransformerEncoderLayer):
    """One post-norm encoder layer (self-attention, GELU feed-forward); the FSDP unit."""


class BertMLM(nn.Module):
    """Masked-LM encoder: ``input_ids [B, L]`` (int) -> logits ``[B, L, vocab_size]``.

    Positions holding ``pad_id`` are masked out of attention.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        size: BertSize,
        *,
        pad_id: int = 0,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.pad_id = pad_id
        h = size.hidden
        self.tok_emb = nn.Embedding(vocab_size, h, padding_idx=pad_id)
        self.pos_emb = nn.Embedding(max_len, h)
        self.emb_norm = nn.LayerNorm(h, eps=1e-12)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            BertLayer(
                h,
                size.heads,
                dim_feedforward=size.ffn,
                dropout=dropout,
                activation="gelu",
                batch_first=True,
                norm_first=False,
                layer_norm_eps=1e-12,
            )
            for _ in range(size.layers)
        )
        self.head_dense = nn.Linear(h, h)
        self.head_norm = nn.LayerNorm(h, eps=1e-12)
        self.head_bias = nn.Parameter(torch.zeros(vocab_size))
        self.apply(_init_weights)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits over the vocabulary at every position."""
        ids = input_ids.long()
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.emb_norm(self.tok_emb(ids) + self.pos_emb(pos)))
        pad = ids == self.pad_id
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=pad)
        x = self.head_norm(F.gelu(self.head_dense(x)))
        # tied to the embedding; the bias added out of place: FSDP2 warns on a view output
        return F.linear(x, self.tok_emb.weight) + self.head_bias


def _init_weights(m: nn.Module) -> None:
    """BERT's initialisation: normal(0, 0.02) weights, zero biases."""
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)
    if isinstance(m, nn.Embedding) and m.padding_idx is not None:
        with torch.no_grad():
            m.weight[m.padding_idx].zero_()
