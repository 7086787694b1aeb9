"""Data: parallel text -> a prepared data directory -> token-bucketed batches (paper §5.1).

A data directory (written by :func:`prepare`, atomically) holds:

    manifest.json          languages, counts, filters, vocabulary, input hashes, versions
    vocab.json, spm.model  the vocabulary: one joint SentencePiece model (source and target share it, the
                           default), or one tokenizer per side (spm.src.model / spm.tgt.model, tokenizer*.json)
    {split}.{lang}.bin     token ids of every sentence, concatenated (uint16 or uint32, no BOS/EOS)
    {split}.{lang}.idx.npy offsets into the .bin: sentence i is ids[offsets[i]:offsets[i+1]]
                           (with ``shard_size``, the training split is train-00000.{lang}.bin, ... instead)
    {valid,test}.{lang}    the raw text of the evaluation splits (references are scored raw)
    train.align.bin/.idx.npy  optional, written by `aiayn align` (align.py): each pair's word links, flat
                           (i0 j0 i1 j1 ..., uint16), for guided alignment (train.guided_alignment)

Training reads the binaries through numpy memmaps, so corpora larger than RAM work and nothing
is tokenized twice. Shape legend for batches: B sentences, S source length, T target length.
"""

from __future__ import annotations

import array
import gzip
import itertools
import json
import logging
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:          # (imported where batches are made: reading a data dir's records needs no PyTorch)
    pass

from ..config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Multilingual, Norms
from .tokenizer import AnyTokenizer, Vocab

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


class DataError(ValueError):
    """Bad input data: the message names the file, the line and what to do."""


# --- reading parallel text ---------------------------------------------------------------------------------


def read_lines(path: Path, errors: str = "strict", hasher: Any = None) -> Iterator[str]:
    """Lines of a UTF-8 text file (plain or .gz), without the newline.

    Lines are split on b"\\n" only: characters such as U+2028 or \\x0b inside a sentence never break
    the alignment of a parallel corpus (``str.splitlines`` would). Invalid UTF-8 raises
    :class:`DataError` with the file and line number, unless ``errors="replace"``.
    """
    opener = gzip.open if path.name.endswith(".gz") else open
    n = 0
    try:
        with opener(path, "rb") as f:
            for n, raw in enumerate(f, 1):  # noqa: B007 - n is used in the error messages below
                if hasher is not None:
                    hasher.update(raw)
                try:
                    line = raw.decode("utf-8", errors=errors)
                except UnicodeDecodeError as e:
                    bad = raw[max(0, e.start - 12) : e.end + 12]
                    raise DataError(f"{path}:{n}: invalid UTF-8 at byte {e.start} ({bad!r}); fix the file or "
                                    "re-run with --encoding-errors replace") from None
                if n == 1 and line.startswith("\ufeff"):
                    line = line[1:]
                if n == 1 and not raw.endswith(b"\n") and b"\r" in raw.rstrip(b"\r"):
                    raise DataError(f"{path}: the whole file is one line with CR characters in it: it uses old Mac "
                                    "line ends (CR only); convert them to LF (e.g. tr '\\r' '\\n')")
                yield line.rstrip("\n").rstrip("\r")
    except (OSError, EOFError, zlib.error) as e:
        if isinstance(e, FileNotFoundError):
            raise DataError(f"{path}: file not found") from None
        raise DataError(f"{path}: cannot read after line {n}: {e}") from None


@dataclass(frozen=True)
class Source:
    """Where one split's sentence pairs come from: two line-aligned files, or one two-column TSV."""

    src_path: Path
    tgt_path: Path | None = None  # None: src_path is a TSV with source<TAB>target

    def files(self) -> list[Path]:
        return [self.src_path] + ([self.tgt_path] if self.tgt_path else [])


def find_source(prefix: str | Path, src: str, tgt: str) -> Source:
    """``PREFIX.<src>`` / ``PREFIX.<tgt>`` (plain or .gz), or a ``.tsv``/``.tsv.gz`` file."""
    p = Path(prefix)
    if p.name.endswith((".tsv", ".tsv.gz")):
        if not p.is_file():
            raise DataError(f"{p}: file not found")
        return Source(p)
    found = []
    for lang in (src, tgt):
        candidates = [p.parent / f"{p.name}.{lang}", p.parent / f"{p.name}.{lang}.gz"]
        hit = next((c for c in candidates if c.is_file()), None)
        if hit is None:
            raise DataError(f"no file {candidates[0]} or {candidates[1]} (expected line-aligned PREFIX.{src} and "
                            f"PREFIX.{tgt}, plain or .gz, or a PREFIX.tsv)")
        found.append(hit)
    return Source(found[0], found[1])


def read_pairs(source: Source, errors: str = "strict", hasher: Any = None) -> Iterator[tuple[str, str]]:
    """Sentence pairs of a :class:`Source`, checking that both sides have the same number of lines."""
    if source.tgt_path is None:
        for n, line in enumerate(read_lines(source.src_path, errors, hasher), 1):
            cols = line.split("\t")
            if len(cols) != 2:
                raise DataError(f"{source.src_path}:{n}: expected 2 tab-separated columns (source, target), "
                                f"found {len(cols)}")
            yield cols[0], cols[1]
        return
    end = object()
    a = read_lines(source.src_path, errors, hasher)
    b = read_lines(source.tgt_path, errors, hasher)
    n = 0
    for n, (x, y) in enumerate(itertools.zip_longest(a, b, fillvalue=end), 1):  # noqa: B007
        if x is end or y is end:
            na = n - 1 + (x is not end) + sum(1 for _ in a)
            nb = n - 1 + (y is not end) + sum(1 for _ in b)
            raise DataError(f"line counts differ: {source.src_path} has {na} lines, {source.tgt_path} has {nb}")
        yield x, y  # type: ignore[misc]
    if n == 0:
        raise DataError(f"{' and '.join(map(str, source.files()))}: empty (no sentence pairs)")


# --- preparing a data directory ------------------------------------------------------------------------------


NEWER: dict[str, Any] = {"vocab": "joint", "src_vocab_size": 0, "tgt_vocab_size": 0, "tokenizers": (),
                          "shard_size": 0, "symbols": ()}


class BinWriter:
    """Appends sentences of ids to ``{split}.{lang}.bin`` and records offsets."""

    def __init__(self, stem: Path, dtype: np.dtype) -> None:
        self.path, self.dtype = stem, dtype
        self.f = open(f"{stem}.bin", "wb")  # noqa: SIM115 - closed in finish()
        self.lengths = array.array("I")         # 4 bytes a sentence: 20 MB for 5M sentences

    def add(self, sentences: list[list[int]]) -> None:
        lengths = [len(s) for s in sentences]
        flat = np.fromiter(itertools.chain.from_iterable(sentences), dtype=self.dtype, count=sum(lengths))
        flat.tofile(self.f)
        self.lengths.extend(lengths)

    def finish(self) -> int:
        self.f.close()
        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(self.lengths, dtype=np.uint32), out=offsets[1:])
        np.save(f"{self.path}.idx.npy", offsets)
        return int(offsets[-1])


# --- reading a data directory ----------------------------------------------------------------------------------


class TokenArray:
    """Sentences of token ids stored as flat memmaps (one per shard) plus offsets. Only the lengths (4 bytes a
    sentence) are held in memory; the ids stay on disk and are paged in as batches touch them."""

    def __init__(self, stem: Path | list[Path], dtype: str) -> None:
        stems = stem if isinstance(stem, list) else [stem]
        self.offsets = [np.load(f"{s}.idx.npy", mmap_mode="r") for s in stems]
        self.ids = [np.memmap(f"{s}.bin", dtype=dtype, mode="r", shape=(int(o[-1]),)) if int(o[-1])
                    else np.zeros(0, dtype) for s, o in zip(stems, self.offsets, strict=True)]
        self.lengths = np.concatenate([np.diff(o).astype(np.int32) for o in self.offsets]) if stems else \
            np.zeros(0, np.int32)
        self.starts = np.cumsum([0] + [len(o) - 1 for o in self.offsets])    # first sentence of each shard

    def __len__(self) -> int:
        return len(self.lengths)

    def equal_rows(self, other: TokenArray, n: int) -> int:
        """How many of the first ``n`` sentences are the same in ``other`` (the other side of the same split, in the
        same shards): compared all at once, not sentence by sentence."""
        equal = 0
        for k, (o, p) in enumerate(zip(self.offsets, other.offsets, strict=True)):
            m = max(0, min(n - int(self.starts[k]), len(o) - 1))
            if m == 0:
                continue
            a, b = np.asarray(o[: m + 1], np.int64), np.asarray(p[: m + 1], np.int64)
            same = np.flatnonzero(np.diff(a) == np.diff(b))         # only sentences of one length can be equal
            lens = (a[same + 1] - a[same])
            rel = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
            eq = self.ids[k][np.repeat(a[same], lens) + rel] == other.ids[k][np.repeat(b[same], lens) + rel]
            differ = np.zeros(len(same), bool)
            np.logical_or.at(differ, np.repeat(np.arange(len(same)), lens), ~eq)
            equal += int((~differ).sum())
        return equal

    def __getitem__(self, i: int) -> np.ndarray:
        k = int(np.searchsorted(self.starts, i, side="right")) - 1 if len(self.ids) > 1 else 0
        j = int(i) - int(self.starts[k])
        o = self.offsets[k]
        return self.ids[k][int(o[j]) : int(o[j + 1])]


class DataDir:
    """A prepared data directory, and the one owner of its layout (see the top of this module): :func:`prepare`
    writes through these paths, training and evaluation read through them.

    ``DataDir(path)`` reads and checks the manifest at once; ``DataDir(path, new=True)`` is the layout of a
    directory being written (nothing is read)."""

    def __init__(self, path: str | Path, *, new: bool = False) -> None:
        self.path = Path(path)
        self.manifest_file = self.path / "manifest.json"
        self.manifest: dict[str, Any] = {}
        if new:
            return
        if not self.manifest_file.is_file():
            raise DataError(f"{self.path} is not a prepared data directory (no manifest.json); run `aiayn prepare`")
        self.manifest = json.loads(self.manifest_file.read_text())
        if self.manifest.get("format") != FORMAT_VERSION:
            raise DataError(f"{self.manifest_file}: format {self.manifest.get('format')} is not supported (expected "
                            f"{FORMAT_VERSION}); re-run `aiayn prepare --force`")

    # -- what the manifest says (the only reader of its fields; ``manifest`` is the record as written) ------------

    @property
    def src(self) -> str:
        return str(self.manifest["src"])

    @property
    def tgt(self) -> str:
        return str(self.manifest["tgt"])

    @property
    def hash(self) -> str:
        """The digest of the inputs and options this directory was prepared from (same digest: same data)."""
        return str(self.manifest["hash"])

    @property
    def multilingual(self) -> Multilingual | None:
        """config.Multilingual of a data dir of many directions; None for one pair."""
        return Multilingual.from_dict(self.manifest["multilingual"]) if "multilingual" in self.manifest else None

    def pairs(self, split: str) -> int:
        """Sentence pairs in ``split`` (after the training split's filters)."""
        return int(self.manifest["splits"][split]["pairs"])

    # -- the layout ------------------------------------------------------------------------------------------------

    def stem(self, split: str, lang: str, shard: int | None = None) -> Path:
        """Where one side of a split's token ids lie: STEM.bin (the ids) and STEM.idx.npy (the offsets)."""
        return self.path / (f"{split}-{shard:05d}.{lang}" if shard is not None else f"{split}.{lang}")

    def raw_file(self, split: str, lang: str) -> Path:
        """The raw text of one side of an evaluation split (references are scored raw)."""
        return self.path / f"{split}.{lang}"

    def alignment_stem(self, split: str) -> Path:
        """Where a split's word alignments lie (``aiayn align``): STEM.bin and STEM.idx.npy."""
        return self.path / f"{split}.align"

    def write_alignments(self, split: str, links: list[list[int]], info: dict[str, Any]) -> None:
        """Store a split's word links (each pair's i0 j0 i1 j1 ...) and say so in the manifest."""
        if len(links) != self.pairs(split):
            raise DataError(f"{self.path}: {len(links)} alignments for the {self.pairs(split)} {split} pairs")
        if max((max(x) for x in links if x), default=0) > np.iinfo(np.uint16).max:
            raise DataError(f"{self.path}: a {split} pair has more than 65535 words; it cannot be aligned")
        writer = BinWriter(self.alignment_stem(split), np.dtype(np.uint16))
        writer.add(links)
        writer.finish()
        self.write_manifest({**self.manifest, "alignments": {**self.manifest.get("alignments", {}), split: info}})

    def alignments(self, split: str) -> TokenArray | None:
        """A split's word links (:meth:`write_alignments`), or None if it has not been aligned."""
        if split not in self.manifest.get("alignments", {}):
            return None
        return TokenArray(self.alignment_stem(split), "uint16")

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.manifest = manifest
        tmp = self.manifest_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        tmp.replace(self.manifest_file)             # never a half-written manifest

    # -- reading ----------------------------------------------------------------------------------------------------

    @property
    def vocab_sizes(self) -> tuple[int, int]:
        """(source, target) vocabulary sizes."""
        v = self.manifest["vocab"]
        return int(v.get("src_size", v["size"])), int(v.get("tgt_size", v["size"]))

    @property
    def special_ids(self) -> dict[str, int]:
        """pad_id, bos_id, eos_id, unk_id as the tokenizer was trained with them (config.PAD_ID ...)."""
        v = self.manifest["vocab"]
        return {k: int(v.get(k, default)) for k, default in
                (("pad_id", PAD_ID), ("bos_id", BOS_ID), ("eos_id", EOS_ID), ("unk_id", UNK_ID))}

    def vocab(self) -> Vocab:
        """The source and target tokenizers."""
        return Vocab.load(self.path)

    def has_split(self, split: str) -> bool:
        return split in self.manifest["splits"]

    def split(self, split: str) -> tuple[TokenArray, TokenArray]:
        if not self.has_split(split):
            raise DataError(f"{self.path} has no {split!r} split (has: {', '.join(self.manifest['splits'])})")
        dtype, shards = self.manifest["dtype"], self.manifest["splits"][split].get("shards")
        sides = []
        for lang in (self.src, self.tgt):
            stems = [self.stem(split, lang, k) for k in range(len(shards))] if shards else self.stem(split, lang)
            sides.append(TokenArray(stems, dtype))
        return sides[0], sides[1]

    def norms(self) -> Norms:
        """What the training split shows of its sentences (:class:`Norms`; none without one)."""
        if not self.has_split("train"):
            return Norms()
        src, tgt = self.split("train")
        ls, lt = src.lengths, tgt.lengths
        longer = ls >= Norms.MIN_TOKENS
        ratio = (lt[longer] / ls[longer]) if longer.any() else None
        n = min(len(src), Norms.SAMPLE)
        copies = src.equal_rows(tgt, n) / max(n, 1) if self.vocab().shared_ids else 0.0
        return Norms(int(ls.max(initial=0)),
                     None if ratio is None else (round(float(np.quantile(ratio, 0.001)), 3),
                                                 round(float(np.quantile(ratio, 0.999)), 3)),
                     round(float(copies), 4), None if ratio is None else round(float(np.quantile(ratio, 0.05)), 3),
                     count_starters(src, self.vocab().src))


    def raw(self, split: str, side: str) -> Path:
        """The raw text file of an evaluation split (``side`` is 'src' or 'tgt')."""
        return self.raw_file(split, self.src if side == "src" else self.tgt)

    def raw_lines(self, split: str, side: str) -> list[str]:
        """The lines of :meth:`raw`."""
        return list(read_lines(self.raw(split, side)))


def summary(data: DataDir) -> list[str]:
    """What was prepared, in words: each split's counts and filters, the vocabulary, the time it took."""
    m, src, tgt = data.manifest, data.src, data.tgt
    lines = []
    for split, s in m["splits"].items():
        dropped = ", ".join(f"{k} {v}" for k, v in s["dropped"].items() if v) or "none"
        lines.append(f"{split:5s} {s['pairs']:8d} pairs ({s['pairs_in']} in; dropped: {dropped})  "
                     f"{s['src_tokens']} {src} / {s['tgt_tokens']} {tgt} tokens")
    v = m["vocab"]
    if v.get("joint", True):
        lines.append(f"vocabulary: {v['size']} pieces ({v.get('made', v['model_type'])}), shared by {src} and {tgt}")
    else:
        lines.append(f"vocabularies: {src} {v['src_size']} pieces, {tgt} {v['tgt_size']} pieces ({v['made']})")
    if (multi := data.multilingual) is not None:
        lines.append(multi.describe())
    return [*lines, f"data dir: {data.path} (prepared in {m['seconds']:.1f} s)"]


def count_starters(src: TokenArray, tokenizer: AnyTokenizer) -> tuple[tuple[str, float], ...]:
    """A training source's starters (config.Norms): words of one piece, capitalized, that start at least
    Norms.OPENER_MIN sentences and whose uses start one at least Norms.STARTER_SHARE of the time, with that share."""
    size = tokenizer.vocab_size
    first, total = np.zeros(size, np.int64), np.zeros(size, np.int64)
    for ids, offsets in zip(src.ids, src.offsets, strict=True):
        starts = np.asarray(offsets[:-1])[np.diff(offsets) > 0]
        first += np.bincount(np.asarray(ids[starts], np.int64), minlength=size)[:size]
        total += np.bincount(np.asarray(ids, np.int64), minlength=size)[:size]
    words = []
    for i in np.nonzero((first >= Norms.OPENER_MIN) & (first >= Norms.STARTER_SHARE * total))[0]:
        piece = tokenizer.piece(int(i)) or ""
        word = piece[1:] if piece.startswith("\u2581") else ""
        if word.isalpha() and word[0].isupper():
            words.append((word, round(float(first[i] / total[i]), 3)))
    return tuple(sorted(words))


# --- batches ---------------------------------------------------------------------------------------------------


