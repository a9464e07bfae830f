"""``prep_text`` / ``gpuspark prep text``: tokenizer and packing without Spark, driver checks;
one Spark test preps a subset of the pydoc corpus (plus an undecodable and a blank file) and
checks the shards, the committed tokenizer and every sequence; one reads a Parquet column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuspark.data import format as fmt
from gpuspark.data.prep import PrepError, load_dataset_tokenizer, prep_text
from gpuspark.data.prep.text_tokens import (
    SPECIAL_TOKENS,
    check_tokenizer,
    pack,
    sample_lines,
    train_wordpiece,
)
from gpuspark.demo import pydoc_text


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pydoc") / "corpus"
    res = pydoc_text(root, limit=12)
    assert res.files == 12 and res.words > 1000
    return root


# --------------------------------------------------------------------------- no Spark


def test_pack_wraps_pieces_and_pads_the_last() -> None:
    pieces = list(pack(list(range(10, 23)), 8, cls=2, sep=3, pad=0))
    assert [length for _, length in pieces] == [8, 8, 3]
    rows = np.stack([r for r, _ in pieces])
    assert rows.dtype == np.int32 and rows.shape == (3, 8)
    assert rows[:, 0].tolist() == [2, 2, 2]
    assert rows[0].tolist() == [2, 10, 11, 12, 13, 14, 15, 3]
    assert rows[2].tolist() == [2, 22, 3, 0, 0, 0, 0, 0]
    assert list(pack([], 8, 2, 3, 0)) == []


def test_sample_lines_evenly_spaced() -> None:
    text = "\n".join(f"line {i}" for i in range(100)) + "\n\n  \n"
    assert sample_lines(text, 4) == ["line 0", "line 25", "line 50", "line 75"]
    assert len(sample_lines(text, 1000)) == 100


def test_tokenizer_trained_round_trips(corpus: Path) -> None:
    from tokenizers import Tokenizer

    lines = [ln for f in sorted(corpus.glob("*.txt")) for ln in f.read_text().splitlines()]
    tok = Tokenizer.from_str(train_wordpiece(lines, 500))
    assert check_tokenizer(tok.to_str()) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert [tok.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS)
    text = "the assert statement is a convenient way to insert debugging assertions"
    enc = tok.encode(text, add_special_tokens=False)
    assert tok.decode(enc.ids) == text
    assert tok.get_vocab_size() <= 500


def test_options_refused_before_spark(corpus: Path, tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"seq_len": 4}, "seq_len must be at least 8"),
        ({"vocab_size": 10}, "vocab_size must be at least 100"),
        ({"id": "k"}, "id applies to a Parquet source"),
        ({"tokenizer": tmp_path / "none"}, "cannot be read"),
        ({"split": (0.5, 0.2)}, "summing to 1"),
    ]
    for kwargs, message in cases:
        with pytest.raises(PrepError, match=message):
            prep_text(corpus, tmp_path / "ds", **kwargs)
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    with pytest.raises(PrepError, match="pass --column COL"):
        prep_text(tmp_path / "t.parquet", tmp_path / "ds")
    bad = tmp_path / "tok"
    bad.mkdir()
    (bad / "tokenizer.json").write_text("{}")
    with pytest.raises(PrepError, match="not a tokenizers JSON"):
        prep_text(corpus, tmp_path / "ds", tokenizer=bad)


def test_cli_split_forms() -> None:
    # text's split is the one prep syntax (gpuspark.cli._common.parse_split), plus "none"
    from gpuspark.cli._common import parse_split

    assert parse_split("val=0.05", allow_none=True) == pytest.approx((0.95, 0.05))
    assert parse_split("val=0.1,test=0.1", allow_none=True) == pytest.approx((0.8, 0.1, 0.1))
    assert parse_split("train=0.9,val=0.1", allow_none=True) == (0.9, 0.1)
    assert parse_split("0.9,0.1", allow_none=True) == (0.9, 0.1)  # deprecated form
    assert parse_split("none", allow_none=True) is None


# --------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_prep_text_pydoc_subset(
    spark: Any, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for f in corpus.glob("*.txt"):
        (src / f.name).write_bytes(f.read_bytes())
    (src / "zz-latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (src / "zz-blank.txt").write_text("  \n\n")
    (src / "notes.md").write_text("not a .txt file: ignored")
    res = prep_text(src, tmp_path / "ds", vocab_size=400, seq_len=32, split=(0.7, 0.3), spark=spark)
    assert (res.inputs, res.files_in_rows, res.quarantined) == (14, 12, 2)
    assert set(res.by_reason) == {"not UTF-8 text", "empty file"}
    assert sum(res.splits.values()) == res.rows and set(res.splits) == {"train", "val"}
    assert fmt.verify_dataset(res.dataset) == []
    manifest = fmt.load_manifest(res.dataset)
    text = manifest.extra["text"]
    assert text["seq_len"] == 32 and text["vocab_size"] <= 400
    assert text["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert text["sequences"] == res.rows and text["documents"] == 12
    tok = load_dataset_tokenizer(res.dataset)
    # every record: [CLS] ... [SEP] then padding, seq_len long; documents in one split only
    docs: dict[str, set[str]] = {}
    pieces: dict[str, list[tuple[int, np.ndarray]]] = {}
    tokens = 0
    for split in manifest.splits:
        for rec in _records(res.dataset, split):
            ids, n = np.asarray(rec["input_ids"]), int(rec["length"])
            doc = rec["doc"] if isinstance(rec["doc"], str) else rec["doc"].decode()
            assert ids.shape == (32,) and ids.dtype == np.int32
            assert ids[0] == 2 and ids[n - 1] == 3 and (ids[n:] == 0).all()
            assert 2 not in ids[1 : n - 1] and 3 not in ids[1 : n - 1] and 0 not in ids[:n]
            tokens += n - 2
            docs.setdefault(doc, set()).add(split)
            pieces.setdefault(doc, []).append((int(rec["piece"]), ids[1 : n - 1]))
    assert tokens == text["tokens"]
    assert all(len(s) == 1 for s in docs.values())
    # round trip: a document's pieces in order decode to the tokenised source text
    name = sorted(pieces)[0]
    ids = np.concatenate([p for _, p in sorted(pieces[name], key=lambda t: t[0])])
    source = (src / name).read_text()
    assert ids.tolist() == tok.encode(source, add_special_tokens=False).ids
    assert tok.decode(ids.tolist())[:40] == tok.decode(tok.encode(source[:200]).ids)[:40]


@pytest.mark.spark
@pytest.mark.slow
def test_prep_text_parquet_column(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpuspark.demo.pydoc_text import pydoc_text as write_topics

    root = write_topics(tmp_path / "c", limit=6).path
    texts = [p.read_text() for p in sorted(Path(root).glob("*.txt"))] + [None, "   "]
    pq.write_table(pa.table({"body": texts, "n": list(range(8))}), tmp_path / "t.parquet")
    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    lines = [ln for t in texts if t for ln in t.splitlines()]
    (tok_dir / "tokenizer.json").write_text(train_wordpiece(lines, 300))
    with pytest.raises(PrepError, match="no column 'text'"):
        prep_text(tmp_path / "t.parquet", tmp_path / "x", column="text", spark=spark)
    res = prep_text(
        tmp_path / "t.parquet",
        tmp_path / "ds",
        column="body",
        tokenizer=tok_dir,
        seq_len=64,
        split=None,
        spark=spark,
    )
    assert (res.inputs, res.files_in_rows, res.quarantined) == (8, 6, 2)
    extra = fmt.load_manifest(res.dataset).extra["text"]
    assert extra["tokenizer"] == "given" and extra["vocab_size"] <= 300
    assert load_dataset_tokenizer(res.dataset).to_str() == (tok_dir / "tokenizer.json").read_text()
    quarantine = pq.read_table(res.quarantine_path).to_pylist()
    assert sorted(r["reason"] for r in quarantine) == ["empty text: null or blank"] * 2


def _records(root: str, split: str | None) -> Any:
    from gpuspark.data.load import ShardDataset, World

    return ShardDataset(
        root, decode="raw", split=split, shuffle=False, drop_last=False, world=World()
    )
