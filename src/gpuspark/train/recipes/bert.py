"""``bert``: a BERT-style masked-language-model encoder on the token datasets of
``gpuspark prep text``.

Records hold ``input_ids`` (int32 ``[seq_len]``, ``[CLS] ... [SEP]`` then ``[PAD]``), the
document id ``doc`` and the ``piece`` index; ``manifest.extra["text"]`` gives the vocabulary
size, ``seq_len`` and the special token ids. The network is :class:`~.bert_model.BertMLM`
(sizes in :data:`~.bert_model.BERT_SIZES`, ``--size``); with ``--strategy fsdp`` each
:class:`~.bert_model.BertLayer` is sharded on its own.

Dynamic masking happens in the loader, per sequence (:func:`mask_tokens`): 15% of the tokens
that are not special (at least one) are chosen; 80% of them become ``[MASK]``, 10% a random
regular token, 10% stay as they are; the labels are the original ids there and -100
elsewhere. The random stream of a sequence is seeded from ``(seed, epoch, document, piece)``,
so the masks do not depend on batch size, ranks or DataLoader workers, change every epoch,
and a resumed run sees exactly the masks it would have seen. Evaluation always uses epoch 0's
masks, so validation scores are comparable across epochs.

Loss: cross entropy on the masked positions. Scores: ``mlm_loss`` and ``mlm_acc`` (masked
accuracy) of the validation split; the best epoch has the highest ``mlm_acc``.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuspark.data import format as fmt
from gpuspark.data.load import ShardDataset, World
from gpuspark.errors import RecipeError
from gpuspark.train.recipes.config import BERT_SIZE_NAMES, RecipeConfig
from gpuspark.train.recipes.options import BertOptions
from gpuspark.train.recipes.registry import Decoder, Recipe, register_recipe

if TYPE_CHECKING:
    from gpuspark.data.format import Manifest

__all__ = [
    "BERT",
    "IGNORE_INDEX",
    "BertOptions",
    "TextSpec",
    "bert_dataset",
    "build_bert",
    "mask_tokens",
    "mlm_loss",
    "mlm_scores",
    "text_spec",
]

IGNORE_INDEX = -100
"""Label of the positions that are not predicted (cross entropy's ``ignore_index``)."""
PREP_HINT = "prepare it with `gpuspark prep text SRC DST` (a token dataset)"


class TextSpec:
    """What the recipe needs from ``manifest.extra["text"]``."""

    def __init__(self, vocab_size: int, seq_len: int, special_ids: Mapping[str, int]) -> None:
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.special_ids = {k: int(v) for k, v in special_ids.items()}

    @property
    def special(self) -> tuple[int, ...]:
        """Ids never chosen for masking (and never drawn as random replacements)."""
        return tuple(sorted(self.special_ids.values()))

    @property
    def first_regular(self) -> int:
        """Random replacements are drawn from ``[first_regular, vocab_size)``."""
        return max(self.special) + 1


def text_spec(manifest: Manifest, dataset: str = "the dataset") -> TextSpec:
    """The :class:`TextSpec` of ``manifest``; :class:`RecipeError` when it is not a token
    dataset of ``gpuspark prep text``."""
    text = manifest.extra.get("text")
    if not isinstance(text, Mapping):
        raise RecipeError(
            f"{dataset} is not a token dataset (its manifest has no extra['text'])",
            remedy=PREP_HINT,
        )
    try:
        ids = text["special_ids"]
        spec = TextSpec(text["vocab_size"], text["seq_len"], ids)
        missing = {"pad", "mask"} - set(spec.special_ids)
    except (KeyError, TypeError, ValueError) as exc:
        raise RecipeError(
            f"{dataset}: extra['text'] lacks {exc}", remedy="rewrite it with `gpuspark prep text`"
        ) from exc
    if missing:
        raise RecipeError(
            f"{dataset}: no special id for {', '.join(sorted(missing))}",
            remedy="rewrite it with `gpuspark prep text`",
        )
    return spec


# -- masking ---------------------------------------------------------------------------------


def mask_tokens(
    ids: np.ndarray,
    rng: np.random.Generator,
    spec: TextSpec,
    prob: float = 0.15,
) -> tuple[np.ndarray, np.ndarray]:
    """``(inputs, labels)`` (int64 ``[L]``) of one sequence: see the module docstring."""
    ids = np.asarray(ids).astype(np.int64)
    inputs = ids.copy()
    labels = np.full(ids.shape, IGNORE_INDEX, dtype=np.int64)
    candidates = np.flatnonzero(~np.isin(ids, spec.special))
    if len(candidates) == 0:
        return inputs, labels
    k = max(1, round(prob * len(candidates)))
    chosen = np.sort(rng.choice(candidates, size=k, replace=False))
    labels[chosen] = ids[chosen]
    u = rng.random(k)
    inputs[chosen[u < 0.8]] = spec.special_ids["mask"]
    swap = chosen[(u >= 0.8) & (u < 0.9)]
    inputs[swap] = rng.integers(spec.first_regular, spec.vocab_size, size=len(swap))
    return inputs, labels


def sequence_rng(seed: int, epoch: int, doc: Any, piece: int) -> np.random.Generator:
    """The masking stream of one sequence: seeded from ``(seed, epoch, document, piece)``."""
    name = doc.tobytes() if isinstance(doc, np.ndarray) else doc
    key = name if isinstance(name, bytes) else str(name).encode()
    return np.random.default_rng([int(seed), int(epoch), zlib.crc32(key), int(piece)])


def _masked_dataset_class() -> type:

    class MaskedTextDataset(ShardDataset):
        """A :class:`~gpuspark.data.load.ShardDataset` yielding ``(inputs, labels)`` with
        this epoch's masks (the epoch is the dataset's, as the loader sets it), or always
        ``mask_epoch``'s masks when that is set (evaluation: a dataset read again each epoch
        rolls its own epoch over, and its scores must stay comparable)."""

        def __init__(
            self, path: str, spec: TextSpec, prob: float, mask_epoch: int | None = None, **kw: Any
        ) -> None:
            self.spec, self.prob, self.mask_epoch = spec, prob, mask_epoch
            super().__init__(path, decode="raw", **kw)

        def prepare(self, sample: dict[str, Any]) -> Any:
            piece = int(np.asarray(sample["piece"]).reshape(-1)[0])
            epoch = self.epoch if self.mask_epoch is None else self.mask_epoch
            rng = sequence_rng(self.seed, epoch, sample["doc"], piece)
            return mask_tokens(sample["input_ids"], rng, self.spec, self.prob)

    return MaskedTextDataset


def bert_dataset(cfg: RecipeConfig, split: str | None, training: bool) -> Any:
    """The masked sequences of ``split``: this rank's shuffled share when ``training``,
    else the whole split in order with epoch 0's masks (one process, no padding)."""

    spec = text_spec(fmt.load_manifest(cfg.dataset.data), cfg.dataset.data)
    cls = _masked_dataset_class()
    mask_prob = cfg.model.of("bert").mask_prob
    if training:
        return cls(cfg.dataset.data, spec, mask_prob, split=split, seed=cfg.dataset.seed)
    return cls(
        cfg.dataset.data,
        spec,
        mask_prob,
        mask_epoch=0,
        split=split,
        seed=cfg.dataset.seed,
        shuffle=False,
        drop_last=False,
        world=World(),
    )


# -- checks, model, loss, scores -------------------------------------------------------------


def bert_check(cfg: RecipeConfig, manifest: Manifest) -> Decoder:
    """The driver's and each rank's check of the dataset (batches come from
    :func:`bert_dataset`, so the returned decoder is never called)."""
    spec = text_spec(manifest, cfg.dataset.data)
    shape = (manifest.schema.get("input_ids") or {}).get("shape")
    if shape and shape[-1] not in (None, spec.seq_len):
        raise RecipeError(
            f"{cfg.dataset.data}: input_ids have {shape[-1]} tokens but extra['text'] says seq_len "
            f"{spec.seq_len}",
            remedy="rewrite it with `gpuspark prep text`",
        )
    return _no_sample_decoding


def _no_sample_decoding(_sample: dict[str, Any]) -> tuple[np.ndarray, int]:
    raise RecipeError(
        "the bert recipe reads masked sequences (bert_dataset), not labelled samples",
        remedy="read the dataset with gpuspark.train.recipes.bert_dataset",
    )


def bert_vocab(cfg: RecipeConfig, manifest: Manifest) -> int:
    """The vocabulary size: the network's output classes."""
    return text_spec(manifest, cfg.dataset.data).vocab_size


def build_bert(cfg: RecipeConfig, vocab_size: int) -> Any:
    """:class:`~.bert_model.BertMLM` of ``cfg.size`` for ``cfg.dataset.data``'s tokenizer."""
    from gpuspark.train.recipes.bert_model import BERT_SIZES, BertMLM

    spec = text_spec(fmt.load_manifest(cfg.dataset.data), cfg.dataset.data)
    return BertMLM(
        vocab_size,
        spec.seq_len,
        BERT_SIZES[cfg.model.of("bert").size],
        pad_id=spec.special_ids["pad"],
        dropout=cfg.model.dropout,
    )


def mlm_loss(logits: Any, labels: Any) -> Any:
    """Cross entropy over the masked positions (labels != -100), in fp32."""
    import torch

    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
    )


def _mlm_loss_fn(_cfg: RecipeConfig, _manifest: Manifest) -> Any:
    return mlm_loss


def mlm_scores(
    net: Any, dataset: Any, cfg: RecipeConfig, device: Any
) -> tuple[dict[str, float | None], int]:
    """``({"mlm_loss", "mlm_acc"}, sequences)`` of ``net`` on ``dataset`` (the caller sets
    eval mode, no-grad and autocast)."""
    import torch

    loss, correct, masked, seqs = 0.0, 0, 0, 0
    for x, y in dataset.loader(cfg.optim.batch_size, pin_memory=False):
        logits = net(x.to(device)).float()
        y = y.to(device)
        keep = y != IGNORE_INDEX
        picked, target = logits[keep], y[keep]
        loss += float(torch.nn.functional.cross_entropy(picked, target, reduction="sum"))
        correct += int((picked.argmax(-1) == target).sum())
        masked += int(keep.sum())
        seqs += int(x.shape[0])
    if masked == 0:
        return {"mlm_loss": None, "mlm_acc": None}, seqs
    return {"mlm_loss": loss / masked, "mlm_acc": correct / masked}, seqs


def _no_probs(_probs: np.ndarray, _labels: np.ndarray) -> dict[str, float | None]:
    raise RecipeError("the bert recipe scores with mlm_scores, not class probabilities")


def size_names() -> Sequence[str]:
    """The ``--size`` choices."""
    return BERT_SIZE_NAMES


BERT = register_recipe(
    Recipe(
        name="bert",
        description="BERT-style masked-LM encoder on token shards (gpuspark prep text); "
        "masked-LM loss and accuracy",
        keys=("input_ids", "doc", "piece"),
        build_model=build_bert,
        decoder=bert_check,
        num_classes=bert_vocab,
        metrics=_no_probs,
        best_by=("mlm_acc",),
        shape_options=("size",),
        dataset=bert_dataset,
        loss=_mlm_loss_fn,
        augments=False,
        evaluate=mlm_scores,
        options=BertOptions,
        defaults={"batch_size": 32, "lr": 5e-4, "epochs": 10},
    )
)
