"""The text job's pure parts: WordPiece tokenizer (train, load, check), line sampling and
the packing of a document's tokens into fixed-length sequences.

Packing rule (one rule for every source): a *document* (a ``.txt`` file, or the text of one
Parquet row) is tokenised whole, without special tokens; its tokens are cut in order into
pieces of ``seq_len - 2``; each piece becomes ``[CLS] piece [SEP]`` and the last, shorter one
is padded with ``[PAD]`` to ``seq_len``. No sequence mixes two documents, so a split made by
a hash of the document id never puts text of one document in two splits.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gpuspark._util.extras import require
from gpuspark.errors import PrepError

__all__ = [
    "SPECIAL_TOKENS",
    "TOKENIZER_FILE",
    "check_tokenizer",
    "load_tokenizer_dir",
    "pack",
    "sample_lines",
    "special_ids",
    "train_wordpiece",
]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""Special tokens of a trained tokenizer, ids 0-4 in this order."""
TOKENIZER_FILE = "tokenizer.json"
"""The tokenizer's name in ``manifest.extra["files"]`` (committed with the shards)."""
MIN_VOCAB = 100


def train_wordpiece(lines: Iterable[str], vocab_size: int) -> str:
    """A BERT-style WordPiece tokenizer (lower-cased, accents stripped, punctuation split)
    trained on ``lines``; returned as its JSON text (``tokenizers`` format)."""
    tk = require("tokenizers", "text", "training a WordPiece tokenizer")
    Tokenizer, decoders, models = tk.Tokenizer, tk.decoders, tk.models
    normalizers, pre_tokenizers, trainers = tk.normalizers, tk.pre_tokenizers, tk.trainers

    if vocab_size < MIN_VOCAB:
        raise PrepError(f"vocab_size must be at least {MIN_VOCAB}, got {vocab_size}")
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False
    )
    tok.train_from_iterator(lines, trainer)
    return str(tok.to_str())


def load_tokenizer_dir(path: str | os.PathLike[str]) -> str:
    """The JSON text of a saved tokenizer: ``path/tokenizer.json`` (or ``path`` itself)."""
    p = Path(path).expanduser()
    file = p / TOKENIZER_FILE if p.is_dir() else p
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PrepError(
            f"tokenizer {file} cannot be read: {exc}",
            remedy="pass a folder holding tokenizer.json (from `tokenizers` or a prep text "
            "dataset), or leave --tokenizer out to train one",
        ) from exc
    check_tokenizer(text, str(file))
    return text


def check_tokenizer(text: str, where: str = "tokenizer") -> dict[str, int]:
    """Parse tokenizer JSON and return its special token ids; a tokenizer that does not
    parse or lacks one of :data:`SPECIAL_TOKENS` is refused."""
    Tokenizer = require("tokenizers", "text", "reading a tokenizer").Tokenizer

    try:
        tok = Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises its own Exception type
        raise PrepError(
            f"{where} is not a tokenizers JSON file: {str(exc)[:200]}",
            remedy="save it with tokenizers' Tokenizer.save(...)",
        ) from exc
    return special_ids(tok, where)


def special_ids(tok: Any, where: str = "tokenizer") -> dict[str, int]:
    """``{"pad": id, "unk": id, "cls": id, "sep": id, "mask": id}`` of a ``Tokenizer``."""
    out: dict[str, int] = {}
    for token in SPECIAL_TOKENS:
        tid = tok.token_to_id(token)
        if tid is None:
            raise PrepError(
                f"{where} has no {token} token (needs {', '.join(SPECIAL_TOKENS)})",
                remedy="train it with these special tokens, or leave --tokenizer out",
            )
        out[token.strip("[]").lower()] = int(tid)
    return out


def sample_lines(text: str, k: int) -> list[str]:
    """Up to ``k`` non-blank lines of ``text``, evenly spaced (deterministic)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) <= k:
        return lines
    step = len(lines) / k
    return [lines[int(i * step)] for i in range(k)]


def pack(
    ids: list[int], seq_len: int, cls: int, sep: int, pad: int
) -> Iterator[tuple[np.ndarray, int]]:
    """``(input_ids int32 [seq_len], length)`` pieces of one document's ``ids`` (see the
    module docstring); ``length`` counts ``[CLS]`` and ``[SEP]``, not the padding."""
    body = seq_len - 2
    for start in range(0, len(ids), body):
        piece = ids[start : start + body]
        row = np.full(seq_len, pad, dtype=np.int32)
        row[0] = cls
        row[1 : 1 + len(piece)] = piece
        row[1 + len(piece)] = sep
        yield row, len(piece) + 2
