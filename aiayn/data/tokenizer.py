"""Subword tokenization: a :class:`Vocab` is the source and the target tokenizer of a model — one joint
SentencePiece model shared by both sides (paper §5.1, the default), or one per side.

A side's tokenizer is a SentencePiece model (:class:`Tokenizer`: trained here, or an existing ``.model``
file) or a Hugging Face ``tokenizers`` file (:class:`HFTokenizer`: ``tokenizer.json``, e.g. the WordPiece
vocabularies of BERT models). Whatever its own numbering, aiayn sees the special ids of ``config``
(pad 0, bos 1, eos 2, unk 3) followed by the tokenizer's other pieces in its order: a tokenizer made
elsewhere is renumbered (special pieces it lacks are added), one trained here needs no renumbering.

Models trained here have byte fallback on, so any character — CJK, emoji, characters never seen in
training — survives a round trip as UTF-8 byte pieces instead of collapsing to <unk>. Normalization is
``identity`` and whitespace is kept as written, so ``decode(encode(line)) == line`` for ordinary text.

A directory (data dir or run dir) holds its vocabulary as the tokenizer files (with the piece table of a
SentencePiece model numbered by one beside it: ``spm.src.pieces.json``) plus ``vocab.json`` naming the file of
each side (:meth:`Vocab.save`, :meth:`Vocab.load`); a directory with only
``spm.model`` is a joint SentencePiece vocabulary (how aiayn wrote them before ``vocab.json``).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm

from ..config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

log = logging.getLogger(__name__)


_SPECIALS = ("pad", "bos", "eos", "unk")                # in the order of PAD_ID, BOS_ID, EOS_ID, UNK_ID
_OURS = (PAD_ID, BOS_ID, EOS_ID, UNK_ID)
# batches up to this many lines are tokenized one line at a time: SentencePiece's batch call costs ~80 us whatever
# its size (its thread pool), a line ~10 us encoded and ~3 us decoded (a request's few lines: 36 against 143 us)
SMALL = 32


def _encode(sp: spm.SentencePieceProcessor, lines: list[str], out_type: type, num_threads: int) -> list[list[Any]]:
    """SentencePiece's pieces (``out_type`` str) or ids (int) of each line: a few lines one at a time (:data:`SMALL`)."""
    if len(lines) <= SMALL:
        return [sp.Encode(line, out_type=out_type) for line in lines]
    return sp.Encode(lines, out_type=out_type, num_threads=num_threads)


class _Renumbering:
    """aiayn ids <-> a tokenizer's own ids. ``natives``: the tokenizer's (pad, bos, eos, unk) ids, None where
    it has no such piece; ``size``: its piece count. Identity (no arrays) when the ids already agree."""

    def __init__(self, natives: Sequence[int | None], size: int) -> None:
        self.identity = tuple(natives) == _OURS
        self.missing = [name for name, n in zip(_SPECIALS, natives, strict=True) if n is None]
        if self.identity:
            self.size = size
            return
        specials = [n for n in natives if n is not None]
        if len(set(specials)) != len(specials):
            named = dict(zip(_SPECIALS, natives, strict=True))
            raise ValueError(f"the tokenizer uses one id for two special pieces: {named}")
        rest = np.setdiff1d(np.arange(size), np.array(specials, dtype=np.int64))
        # ours -> native (-1: a special piece the tokenizer lacks), native -> ours
        self.to_native = np.concatenate([np.array([-1 if n is None else n for n in natives]), rest]).astype(np.int64)
        self.to_ours = np.empty(size, dtype=np.int64)
        self.to_ours[rest] = np.arange(len(_OURS), len(_OURS) + len(rest))
        for ours, n in zip(_OURS, natives, strict=True):
            if n is not None:
                self.to_ours[n] = ours
        self.size = len(self.to_native)

    def ours(self, ids: list[list[int]]) -> list[list[int]]:
        if self.identity:
            return ids
        return [self.to_ours[np.asarray(s, dtype=np.int64)].tolist() for s in ids]

    def native(self, ids: Sequence[Sequence[int]], drop: tuple[int, ...] = (PAD_ID, BOS_ID, EOS_ID)) -> list[list[int]]:
        """Native ids of aiayn ids, without the ``drop`` ids (and without special pieces the tokenizer lacks).
        Identity: the ids as they are (a model trained here makes pad/bos/eos control pieces, which SentencePiece's
        decoder skips itself: no per-token work on the decoding path)."""
        if self.identity:
            return ids  # type: ignore[return-value]
        out = []
        for s in ids:
            a = np.asarray([i for i in s if i not in drop], dtype=np.int64)
            n = self.to_native[a] if len(a) else a
            out.append(n[n >= 0].tolist())
        return out

    def piece(self, i: int, native_piece: Callable[[int], str | None]) -> str:
        """The piece of aiayn id ``i``, by the tokenizer's own ``native_piece`` (a special it lacks: ``<pad>`` ...)."""
        n = i if self.identity else int(self.to_native[i])
        return f"<{_SPECIALS[i]}>" if n < 0 else str(native_piece(n))


class Tokenizer:
    """Text <-> aiayn subword ids with a SentencePiece model. Thread-parallel batch encoding and decoding.

    A model trained by :meth:`train` has aiayn's special ids; any other SentencePiece model (say, one shipped
    with a pretrained system) is renumbered, with a pad piece added when it has none.

    ``table``: a JSON file ``{piece: id}`` that numbers the pieces instead of the SentencePiece model (Marian's
    ``vocab.json``: one id table shared by a source and a target SentencePiece model, pieces it lacks read as
    <unk>). A line starting with a language code such as ``>>fra<<`` keeps it as one piece, as Marian's."""

    kind = "sentencepiece"

    def __init__(self, model: str | Path | bytes, num_threads: int | None = None,
                 table: str | Path | None = None) -> None:
        self.sp = spm.SentencePieceProcessor()
        try:
            if isinstance(model, bytes):
                self.sp.LoadFromSerializedProto(model)
            else:
                self.sp.Load(str(model))
        except (OSError, RuntimeError) as e:
            raise ValueError(f"{model if not isinstance(model, bytes) else 'the model'}: not a SentencePiece model "
                             f"({str(e).strip() or type(e).__name__})") from None
        self.num_threads = num_threads or os.cpu_count() or 1
        self.table_file = Path(table) if table is not None else None
        self.table: _PieceTable | None = None
        if self.table_file is not None:
            self.table = _PieceTable(self.table_file)
            self.ids = _Renumbering(self.table.natives, self.table.size)
            return
        natives = [i if i >= 0 else None for i in (self.sp.pad_id(), self.sp.bos_id(), self.sp.eos_id(),
                                                   self.sp.unk_id())]
        self.ids = _Renumbering(natives, int(self.sp.GetPieceSize()))

    @property
    def vocab_size(self) -> int:
        return self.ids.size

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Subword ids of each line, without BOS/EOS."""
        if self.table is not None:
            return self.ids.ours(self.table.encode(self.sp, lines, self.num_threads))
        return self.ids.ours(_encode(self.sp, lines, int, self.num_threads))

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text of each id sequence; special ids (pad, bos, eos) are dropped."""
        if self.table is not None:
            return self.table.decode(self.sp, self.ids.native(ids))
        if len(ids) <= SMALL:
            return [self.sp.Decode(x) for x in self.ids.native(ids)]
        return self.sp.Decode(self.ids.native(ids), num_threads=self.num_threads)

    def piece(self, i: int) -> str:
        """The piece of aiayn id ``i``."""
        return self.ids.piece(i, self.sp.IdToPiece if self.table is None else self.table.piece)

    def pieces(self, line: str) -> list[str]:
        return self.sp.EncodeAsPieces(line)

    def piece_id(self, piece: str) -> int | None:
        """The aiayn id of a whole piece (a language tag), None if the vocabulary has no such piece."""
        if self.table is not None:
            found = self.table.ids.get(piece)
        else:
            native = int(self.sp.PieceToId(piece))
            found = native if native != self.sp.unk_id() and self.sp.IdToPiece(native) == piece else None
        return None if found is None else self.ids.ours([[found]])[0][0]

    @staticmethod
    def train(
        sentences: Iterable[str],
        out_path: str | Path,
        vocab_size: int,
        model_type: str = "bpe",
        character_coverage: float | None = None,
        normalization: str = "identity",
        sample_size: int = 2_000_000,
        num_threads: int | None = None,
        seed: int = 1,
        symbols: tuple[str, ...] = (),
    ) -> Tokenizer:
        """Train a joint model on ``sentences`` (source and target lines together); write ``out_path``.
        ``symbols``: strings kept whole, one piece each wherever they occur (a multilingual model's language tags,
        multilingual.py), given the ids after the special ones.

        ``character_coverage`` defaults to 1.0 for alphabetic text and 0.9995 when the sample has more
        than 1,000 distinct characters (CJK); rarer characters are then spelled as byte pieces.
        SentencePiece keeps a reservoir sample of ``sample_size`` sentences, so memory does not grow
        with the corpus.
        """
        if model_type not in ("bpe", "unigram"):
            raise ValueError(f"model_type={model_type!r}: expected 'bpe' or 'unigram'")
        lines, character_coverage = _with_coverage(sentences, character_coverage)
        model = io.BytesIO()
        more: dict[str, Any] = {"user_defined_symbols": list(symbols)} if symbols else {}
        try:
            spm.SentencePieceTrainer.Train(
                sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size, model_type=model_type,
                character_coverage=character_coverage, byte_fallback=True, normalization_rule_name=normalization,
                remove_extra_whitespaces=False, split_digits=True, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                unk_id=UNK_ID, input_sentence_size=sample_size, shuffle_input_sentence=True,
                num_threads=num_threads or os.cpu_count() or 1, max_sentence_length=16384,
                minloglevel=2, **more,
            )
        except RuntimeError as e:
            raise _training_error(str(e), vocab_size) from None
        Path(out_path).write_bytes(model.getvalue())
        tok = Tokenizer(out_path)
        assert tok.ids.identity
        log.info("trained %s vocabulary of %d pieces (character coverage %s)", model_type, tok.vocab_size,
                 character_coverage)
        return tok


class _PieceTable:
    """A ``{piece: id}`` JSON file numbering a SentencePiece model's pieces (Marian's ``vocab.json``)."""

    def __init__(self, path: Path) -> None:
        try:
            table = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{path}: not a readable piece table ({e})") from None
        if not (isinstance(table, dict) and table and all(isinstance(v, int) and v >= 0 for v in table.values())):
            raise ValueError(f"{path}: expected a JSON object mapping each piece to a non-negative integer id")
        self.ids: dict[str, int] = table
        self.size = max(table.values()) + 1
        self.natives = [next((table[n] for n in _HF_NAMES[name] if n in table), None) for name in _SPECIALS]
        if self.natives[3] is None:
            raise ValueError(f"{path}: the piece table has no <unk> piece (what pieces it lacks are read as)")
        self.unk: int = self.natives[3]
        self.pieces: list[str | None] = [None] * self.size
        for p, i in table.items():
            if self.pieces[i] is not None:
                raise ValueError(f"{path}: id {i} is given to two pieces, {self.pieces[i]!r} and {p!r}")
            self.pieces[i] = p

    def piece(self, i: int) -> str | None:
        return self.pieces[i] if 0 <= i < self.size else None

    def encode(self, sp: spm.SentencePieceProcessor, lines: list[str], num_threads: int) -> list[list[int]]:
        """Table ids of each line's pieces, a leading ``>>code<<`` kept whole (as MarianTokenizer does)."""
        codes, texts = [], []
        for line in lines:
            end = line.find("<<") if line.startswith(">>") else -1
            codes.append([line[: end + 2]] if end != -1 else [])
            texts.append(line[end + 2 :] if end != -1 else line)
        pieces = _encode(sp, texts, str, num_threads)
        return [[self.ids.get(p, self.unk) for p in c + ps] for c, ps in zip(codes, pieces, strict=True)]

    def decode(self, sp: spm.SentencePieceProcessor, ids: list[list[int]]) -> list[str]:
        """Text of table ids, as MarianTokenizer makes it: the pieces joined by the SentencePiece model, word marks
        left by pieces it does not have turned into spaces, the ends stripped (an id without a piece is skipped)."""
        return [sp.DecodePieces([p for i in s if (p := self.piece(i)) is not None]).replace("\u2581", " ").strip()
                for s in ids]


def _with_coverage(sentences: Iterable[str], coverage: float | None) -> tuple[Iterator[str], float]:
    """The non-empty sentences, and the character coverage: as given, or 1.0 for alphabetic text and 0.9995 when
    the first 20,000 sentences hold more than 1,000 distinct characters (CJK), read ahead to decide."""
    lines = (line for line in sentences if line)
    if coverage is not None:
        return lines, coverage
    head = list(itertools.islice(lines, 20_000))
    alphabet = set().union(*head)
    return itertools.chain(head, lines), 0.9995 if len(alphabet) > 1000 else 1.0


def _training_error(msg: str, vocab_size: int) -> ValueError:
    """SentencePiece's training errors in terms of aiayn's options."""
    limit = re.search(r"value <= (\d+)", msg)
    if "Vocabulary size too high" in msg:
        most = f"at most {limit.group(1)} pieces can be learned from it" if limit else msg.strip()
        return ValueError(f"--vocab-size {vocab_size} is too large for this corpus: {most}; choose a smaller "
                          "--vocab-size")
    small = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg)
    if small:
        return ValueError(f"--vocab-size {vocab_size} is too small: the characters and 256 byte pieces alone need "
                          f"{small.group(2)}; raise --vocab-size or lower --character-coverage")
    return ValueError(f"SentencePiece training failed: {msg.strip()}")


# Names under which tokenizers made elsewhere spell their special pieces (BERT, RoBERTa/BART, T5, GPT styles).
_HF_NAMES = {
    "pad": ("<pad>", "[PAD]", "<|pad|>"),
    "bos": ("<s>", "[CLS]", "<bos>", "<|startoftext|>", "<|begin_of_text|>"),
    "eos": ("</s>", "[SEP]", "<eos>", "<|endoftext|>", "<|end_of_text|>"),
    "unk": ("<unk>", "[UNK]", "<|unk|>"),
}


class HFTokenizer:
    """Text <-> aiayn ids with a Hugging Face ``tokenizers`` file (``tokenizer.json``; the optional
    ``tokenizers`` package). Special pieces are found by their usual names ([PAD]/[CLS]/[SEP]/[UNK] as in BERT,
    <pad>/<s>/</s>/<unk>, ...): BOS and EOS are BERT's [CLS] and [SEP], as in the seeds' zh-en system."""

    kind = "tokenizers"

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer as _Tok
        except ImportError:
            raise ValueError("tokenizer.json files need the tokenizers package: pip install 'aiayn[hf]'") from None
        try:
            self.tok = _Tok.from_file(str(path))
        except Exception as e:  # noqa: BLE001 - tokenizers raises its own Exception types
            raise ValueError(f"{path}: not a Hugging Face tokenizer.json ({str(e).strip()[:200]})") from None
        vocab = self.tok.get_vocab(with_added_tokens=True)
        natives = [next((vocab[n] for n in _HF_NAMES[name] if n in vocab), None) for name in _SPECIALS]
        self.ids = _Renumbering(natives, max(vocab.values()) + 1 if vocab else 0)

    @property
    def vocab_size(self) -> int:
        return self.ids.size

    def encode(self, lines: list[str]) -> list[list[int]]:
        return self.ids.ours([e.ids for e in self.tok.encode_batch(list(lines), add_special_tokens=False)])

    def decode(self, ids: list[list[int]]) -> list[str]:
        return self.tok.decode_batch(self.ids.native(ids), skip_special_tokens=True)

    def piece(self, i: int) -> str:
        return self.ids.piece(i, self.tok.id_to_token)

    def pieces(self, line: str) -> list[str]:
        return list(self.tok.encode(line, add_special_tokens=False).tokens)

    def piece_id(self, piece: str) -> int | None:
        """The aiayn id of a whole piece (a language tag), None if the vocabulary has no such piece."""
        native = self.tok.token_to_id(piece)
        return None if native is None else self.ids.ours([[native]])[0][0]


AnyTokenizer = Tokenizer | HFTokenizer


def table_of(model: str | Path) -> Path:
    """Where a SentencePiece model's piece table is kept, when it has one: ``X.model`` -> ``X.pieces.json``."""
    m = Path(model)
    return m.with_name(f"{m.stem}.pieces.json")


def load_tokenizer(path: str | Path) -> AnyTokenizer:
    """A SentencePiece ``.model`` file (numbered by the piece table beside it, if any: :func:`table_of`), or a
    ``tokenizer.json`` (or a directory holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such tokenizer file")
    if p.suffix == ".json":
        return HFTokenizer(p)
    return Tokenizer(p, table=table_of(p) if table_of(p).is_file() else None)


VOCAB_FILE = "vocab.json"


def stored_name(side: str | None, kind: str = "sentencepiece") -> str:
    """The name a directory gives a tokenizer file: ``spm.model`` (joint SentencePiece), ``spm.src.model`` /
    ``spm.tgt.model`` (one per side, ``side`` "src" or "tgt"), ``tokenizer[.src|.tgt].json`` (tokenizers files)."""
    stem, suffix = ("tokenizer", ".json") if kind == "tokenizers" else ("spm", ".model")
    return f"{stem}{suffix}" if side is None else f"{stem}.{side}{suffix}"


@dataclass
class Vocab:
    """The source and target tokenizers of a model, and the files they came from (the same one when joint)."""

    src: AnyTokenizer
    tgt: AnyTokenizer
    src_file: Path
    tgt_file: Path

    @property
    def joint(self) -> bool:
        """One tokenizer shared by both sides."""
        return self.src_file == self.tgt_file

    @property
    def shared_ids(self) -> bool:
        """Both sides number their pieces alike (what tie='all' needs): one joint tokenizer, or two SentencePiece
        models numbered by the same piece table (Marian's)."""
        if self.joint:
            return True
        tables = [getattr(t, "table", None) for t in (self.src, self.tgt)]
        return all(tables) and tables[0].pieces == tables[1].pieces  # type: ignore[union-attr]

    @classmethod
    def from_files(cls, src_file: str | Path, tgt_file: str | Path | None = None) -> Vocab:
        """One file for both sides (joint), or one per side."""
        s = Path(src_file)
        t = Path(tgt_file) if tgt_file is not None else s
        if s.resolve() == t.resolve():
            tok = load_tokenizer(s)
            return cls(tok, tok, s, s)
        return cls(load_tokenizer(s), load_tokenizer(t), s, t)

    @classmethod
    def load(cls, directory: str | Path) -> Vocab:
        """The vocabulary a data dir or run dir holds (``vocab.json``, or only ``spm.model``: joint)."""
        d = Path(directory)
        spec = d / VOCAB_FILE
        if not spec.is_file():
            return cls.from_files(d / stored_name(None))
        try:
            names = json.loads(spec.read_text(encoding="utf-8"))
            src, tgt = str(names["src"]), str(names["tgt"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{spec}: not a valid vocabulary description ({e}); expected "
                             '{"src": FILE, "tgt": FILE}') from None
        if "/" in src + tgt or "\\" in src + tgt:
            raise ValueError(f"{spec}: tokenizer files must be plain names inside {d}")
        return cls.from_files(d / src, d / tgt)

    def save(self, directory: str | Path) -> None:
        """Copy the tokenizer files into ``directory`` under standard names, and write ``vocab.json``."""
        d = Path(directory)
        names = {}
        for side, f, tok in (("src", self.src_file, self.src), ("tgt", self.tgt_file, self.tgt)):
            names[side] = stored_name(None if self.joint else side, tok.kind)
            target = d / names[side]
            if f.resolve() != target.resolve():
                shutil.copyfile(f, target)
            table = getattr(tok, "table_file", None)
            if table is not None and table.resolve() != table_of(target).resolve():
                shutil.copyfile(table, table_of(target))
        (d / VOCAB_FILE).write_text(json.dumps(names, indent=2) + "\n")

    @staticmethod
    def stored_in(directory: str | Path) -> bool:
        """Whether ``directory`` holds a vocabulary (:meth:`load` would find one)."""
        d = Path(directory)
        return (d / VOCAB_FILE).is_file() or (d / stored_name(None)).is_file()

    def digest(self) -> str:
        """A hash of the tokenizer files and which side uses which: equal digests tokenize alike."""
        h = hashlib.sha256()
        for f, tok in ((self.src_file, self.src), (self.tgt_file, self.tgt)):
            h.update(hashlib.sha256(f.read_bytes()).digest())
            table = getattr(tok, "table_file", None)
            if table is not None:
                h.update(hashlib.sha256(table.read_bytes()).digest())
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        """For manifests: sizes, kinds, whether joint."""
        return {"joint": self.joint, "src_size": self.src.vocab_size, "tgt_size": self.tgt.vocab_size,
                "src_kind": self.src.kind, "tgt_kind": self.tgt.kind}
