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
import dataclasses
import gzip
import hashlib
import itertools
import json
import logging
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:          # (imported where batches are made: reading a data dir's records needs no PyTorch)
    import torch

from .atomic import atomic_dir
from .config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Norms
from .tokenizer import AnyTokenizer, Tokenizer, Vocab, stored_name

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


@dataclass(frozen=True)
class PrepareOptions:
    src: str
    tgt: str
    vocab_size: int = 8000
    vocab: str = "joint"               # "joint": one SentencePiece model for both sides; "separate": one per side
    src_vocab_size: int = 0            # with vocab="separate" (0 = vocab_size)
    tgt_vocab_size: int = 0
    tokenizers: tuple[str, ...] = ()   # existing tokenizer files instead of training: one (joint) or two (src, tgt)
    model_type: str = "bpe"
    character_coverage: float | None = None
    encoding_errors: str = "strict"    # or "replace"
    max_len: int = 256                 # training pairs longer than this (tokens, either side) are dropped
    max_ratio: float = 3.0             # ... and pairs whose longer side has more than this x the tokens of the other
    min_len_for_ratio: int = 10        # the ratio filter ignores pairs whose longer side is shorter than this
    shard_size: int = 0                # training pairs per shard file (0: one file per language)


_NEWER: dict[str, Any] = {"vocab": "joint", "src_vocab_size": 0, "tgt_vocab_size": 0, "tokenizers": (),
                          "shard_size": 0}


def _filter_reason(ns: int, nt: int, o: PrepareOptions) -> str | None:
    if ns == 0 or nt == 0:
        return "empty"
    if max(ns, nt) > o.max_len:
        return "too_long"
    if max(ns, nt) >= o.min_len_for_ratio and max(ns, nt) > o.max_ratio * min(ns, nt):
        return "ratio"
    return None


def _versions() -> dict[str, str]:
    import sentencepiece
    import torch

    from . import __version__

    return {"aiayn": __version__, "sentencepiece": sentencepiece.__version__, "numpy": np.__version__,
            "torch": torch.__version__}


def _validate_and_hash(sources: dict[str, Source], opts: PrepareOptions) -> tuple[dict[str, Any], str]:
    """Read every input once: check encodings and line counts, count pairs, hash the bytes."""
    info: dict[str, Any] = {}
    # options left at their defaults are not hashed when they are newer than the data format, so data dirs
    # prepared before them are still recognised as the same preparation
    fields = {k: v for k, v in dataclasses.asdict(opts).items() if k not in _NEWER or v != _NEWER[k]}
    total = hashlib.sha256(json.dumps(fields, sort_keys=True).encode())
    for f in opts.tokenizers:
        total.update(Path(f).read_bytes())
    for split, source in sources.items():
        h = hashlib.sha256()
        n = sum(1 for _ in read_pairs(source, opts.encoding_errors, h))
        info[split] = {"files": [str(p) for p in source.files()], "sha256": h.hexdigest(), "pairs_in": n}
        total.update(split.encode() + h.digest())
    return info, total.hexdigest()


def _check_out_dir(out: Path, digest: str, force: bool) -> bool:
    """True when ``out`` already holds this exact preparation (reuse it)."""
    if not out.exists():
        return False
    manifest = DataDir(out, new=True).manifest_file
    if not out.is_dir() or (any(out.iterdir()) and not manifest.is_file()):
        raise DataError(f"{out} exists and is not an aiayn data directory; choose another --out "
                        "(nothing was deleted)")
    if not manifest.is_file():
        return False  # an empty directory
    if json.loads(manifest.read_text()).get("hash") == digest and not force:
        return True
    if not force:
        raise DataError(f"{out} holds data prepared from other inputs or options; pass --force to rebuild it "
                        "or choose another --out")
    return False


class _BinWriter:
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


def _make_vocab(train: Source, tmp: Path, opts: PrepareOptions) -> Vocab:
    """The tokenizers: the given files, or SentencePiece trained on the training split (joint or per side), written
    into ``tmp`` under the names the directory keeps them by."""
    if opts.tokenizers:
        if len(opts.tokenizers) > 2:
            raise DataError(f"{len(opts.tokenizers)} tokenizer files given: give one (shared) or two (source, target)")
        vocab = Vocab.from_files(*opts.tokenizers)
        for side, tok in (("source", vocab.src), ("target", vocab.tgt)):
            if tok.ids.missing:
                log.info("the %s tokenizer has no %s piece: added to its vocabulary", side, "/".join(tok.ids.missing))
        return vocab
    if opts.vocab == "joint":
        lines = (line for pair in read_pairs(train, opts.encoding_errors) for line in pair)
        Tokenizer.train(lines, tmp / stored_name(None), opts.vocab_size, opts.model_type, opts.character_coverage)
        return Vocab.from_files(tmp / stored_name(None))
    if opts.vocab != "separate":
        raise DataError(f"--vocab {opts.vocab!r}: expected 'joint' or 'separate'")
    for i, side in enumerate(("src", "tgt")):
        size = (opts.src_vocab_size if side == "src" else opts.tgt_vocab_size) or opts.vocab_size
        lines = (pair[i] for pair in read_pairs(train, opts.encoding_errors))
        try:
            Tokenizer.train(lines, tmp / stored_name(side), size, opts.model_type, opts.character_coverage)
        except ValueError as e:
            lang = opts.src if side == "src" else opts.tgt
            msg = str(e).replace("--vocab-size", f"--{side}-vocab-size")
            raise ValueError(f"the {lang} ({side}) vocabulary: {msg}") from None
    return Vocab.from_files(tmp / stored_name("src"), tmp / stored_name("tgt"))


def _encode_split(
    split: str, source: Source, vocab: Vocab, out: DataDir, opts: PrepareOptions, dtype: np.dtype, chunk: int
) -> dict[str, Any]:
    """Tokenize one split in chunks of ``chunk`` pairs into binaries (sharded for train with ``shard_size``);
    memory stays bounded whatever the corpus size."""
    shard_size = opts.shard_size if split == "train" else 0
    chunk = min(chunk, shard_size) if shard_size else chunk
    shards: list[dict[str, _BinWriter]] = []

    def open_shard() -> dict[str, _BinWriter]:
        shard = len(shards) if shard_size else None
        shards.append({lang: _BinWriter(out.stem(split, lang, shard), dtype) for lang in (opts.src, opts.tgt)})
        return shards[-1]

    writers = open_shard()
    raw = None
    if split != "train":
        raw = {lang: open(out.raw_file(split, lang), "w", encoding="utf-8") for lang in (opts.src, opts.tgt)}  # noqa: SIM115
    dropped = {"empty": 0, "too_long": 0, "ratio": 0}
    pairs = read_pairs(source, opts.encoding_errors)
    while block := list(itertools.islice(pairs, chunk)):
        src_lines, tgt_lines = (list(x) for x in zip(*block, strict=True))
        src_ids, tgt_ids = vocab.src.encode(src_lines), vocab.tgt.encode(tgt_lines)
        if split == "train":  # evaluation splits are never filtered: every line is translated and scored
            keep = [_filter_reason(len(s), len(t), opts) for s, t in zip(src_ids, tgt_ids, strict=True)]
            for reason in keep:
                if reason:
                    dropped[reason] += 1
            src_ids = [s for s, r in zip(src_ids, keep, strict=True) if r is None]
            tgt_ids = [t for t, r in zip(tgt_ids, keep, strict=True) if r is None]
        while src_ids:
            room = shard_size - len(writers[opts.src].lengths) if shard_size else len(src_ids)
            if room <= 0:
                writers = open_shard()
                continue
            writers[opts.src].add(src_ids[:room])
            writers[opts.tgt].add(tgt_ids[:room])
            src_ids, tgt_ids = src_ids[room:], tgt_ids[room:]
        if raw is not None:
            raw[opts.src].write("".join(line + "\n" for line in src_lines))
            raw[opts.tgt].write("".join(line + "\n" for line in tgt_lines))
    if raw is not None:
        for f in raw.values():
            f.close()
    counts = [len(w[opts.src].lengths) for w in shards]
    src_tokens = sum(w[opts.src].finish() for w in shards)
    tgt_tokens = sum(w[opts.tgt].finish() for w in shards)
    stats: dict[str, Any] = {"pairs": sum(counts), "dropped": dropped, "src_tokens": src_tokens,
                             "tgt_tokens": tgt_tokens}
    if shard_size:
        stats["shards"] = counts
    if stats["pairs"] == 0:
        raise DataError(f"{split}: no sentence pairs left after filtering ({dropped}); check the input or relax "
                        "--max-len / --max-ratio")
    return stats


def prepare(
    sources: dict[str, Source], out: str | Path, opts: PrepareOptions, force: bool = False, chunk: int = 50_000,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Build a data directory from parallel text; returns its path. Reuses an identical earlier build. ``extra``:
    more fields for the manifest (how the inputs were made: distill.py records its teacher there).

    Everything is written to a temporary sibling directory and renamed into place at the end
    (:func:`atomic.atomic_dir`), so a failure never leaves a half-written data directory.
    """
    out = Path(out)
    if "train" not in sources or "valid" not in sources:
        raise DataError("prepare needs a train and a valid split")
    t0 = time.perf_counter()
    inputs, digest = _validate_and_hash(sources, opts)
    if _check_out_dir(out, digest, force):
        log.info("%s already holds this data (same inputs and options): reusing it", out)
        return out
    with atomic_dir(out) as tmp:
        vocab = _make_vocab(sources["train"], tmp, opts)
        vocab.save(tmp)
        vocab = Vocab.load(tmp)
        dtype = np.dtype(np.uint16 if max(vocab.src.vocab_size, vocab.tgt.vocab_size) <= 2**16 else np.uint32)
        layout = DataDir(tmp, new=True)
        splits = {s: _encode_split(s, src, vocab, layout, opts, dtype, chunk) for s, src in sources.items()}
        for s in splits:
            splits[s].update(inputs[s])
        made = "given" if opts.tokenizers else f"trained ({opts.model_type})"
        manifest = {
            "format": FORMAT_VERSION, "src": opts.src, "tgt": opts.tgt, "hash": digest, "dtype": dtype.name,
            "vocab": {"size": vocab.tgt.vocab_size, **vocab.describe(), "made": made, "model_type": opts.model_type,
                      "pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID, "unk_id": UNK_ID},
            "options": dataclasses.asdict(opts), "splits": splits, "versions": _versions(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "seconds": round(time.perf_counter() - t0, 2),
            **(extra or {}),
        }
        layout.write_manifest(manifest)
    return out


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

    def pairs(self, split: str) -> int:
        """Sentence pairs in ``split`` (after the training split's filters)."""
        return int(self.manifest["splits"][split]["pairs"])

    def summary(self) -> list[str]:
        """What was prepared, in words: each split's counts and filters, the vocabulary, the time it took."""
        m, src, tgt = self.manifest, self.src, self.tgt
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
        return [*lines, f"data dir: {self.path} (prepared in {m['seconds']:.1f} s)"]

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
        writer = _BinWriter(self.alignment_stem(split), np.dtype(np.uint16))
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


@dataclass
class Batch:
    """Padded tensors of one batch; source ends with EOS, target input starts with BOS (teacher forcing)."""

    src: torch.Tensor       # (B, S)  x_1 .. x_n EOS, then padding
    tgt_in: torch.Tensor    # (B, T)  BOS y_1 .. y_m, then padding
    tgt_out: torch.Tensor   # (B, T)  y_1 .. y_m EOS, then padding
    indices: np.ndarray     # (B,) example numbers in the split
    n_src_tokens: int       # non-padding tokens
    n_tgt_tokens: int
    align: torch.Tensor | None = None   # (B, T, S) what the aligning heads should attend to (lexicon.GuidedTargets)

    def to(self, device: torch.device | str) -> Batch:
        import torch

        nb = torch.device(device).type == "cuda"
        return dataclasses.replace(self, src=self.src.to(device, non_blocking=nb),
                                   tgt_in=self.tgt_in.to(device, non_blocking=nb),
                                   tgt_out=self.tgt_out.to(device, non_blocking=nb),
                                   align=None if self.align is None else self.align.to(device, non_blocking=nb))


def collate(src: TokenArray, tgt: TokenArray, indices: np.ndarray,
            guide: Callable[..., torch.Tensor] | None = None,
            rows: tuple[list[np.ndarray], list[np.ndarray]] | None = None) -> Batch:
    """Build a :class:`Batch` from example numbers (``guide``: the guided-alignment targets, lexicon.GuidedTargets),
    or from ``rows`` made of them (:class:`Joiner`: sources and targets, ``indices`` then each row's first)."""
    import torch

    xs, ys = rows or ([src[i] for i in indices], [tgt[i] for i in indices])
    B = len(xs)
    ls, lt = np.array([len(x) for x in xs]) + 1, np.array([len(y) for y in ys]) + 1
    s = np.full((B, int(ls.max())), PAD_ID, dtype=np.int64)
    t_in = np.full((B, int(lt.max())), PAD_ID, dtype=np.int64)
    t_out = np.full_like(t_in, PAD_ID)
    for row, (x, y) in enumerate(zip(xs, ys, strict=True)):
        s[row, : len(x)] = x
        s[row, len(x)] = EOS_ID
        t_in[row, 0] = BOS_ID
        t_in[row, 1 : len(y) + 1] = y
        t_out[row, : len(y)] = y
        t_out[row, len(y)] = EOS_ID
    return Batch(torch.from_numpy(s), torch.from_numpy(t_in), torch.from_numpy(t_out), np.asarray(indices),
                 int(ls.sum()), int(lt.sum()), guide(indices, s, t_out, ls - 1, lt - 1) if guide else None)


class Joiner:
    """Concatenated training examples (``train.concat``; the augmentation of Marian's and Bergamot's pipelines, not the
    paper's): a share ``rate`` of batches has its pairs joined two or three to a row (neighbours in a batch sorted by
    length, so the batch keeps its token count), and each joined pair loses its final stop on both sides half the
    time, so that the model learns to translate sentences run together, with or without their stops, whole. The
    choices are drawn from (seed, epoch, position): a resumed run joins the same batches alike."""

    def __init__(self, rate: float, seed: int, src_stops: set[int], tgt_stops: set[int], longest: int) -> None:
        self.rate, self.seed, self.stops, self.longest = rate, seed, (src_stops, tgt_stops), longest

    @staticmethod
    def stop_ids(piece: Callable[[int], str | None], size: int) -> set[int]:
        """The ids of a vocabulary's pieces that are a sentence's final stop (``.``, ``!``, ``?``, with or without
        the word-start mark)."""
        return {i for i in range(size) if (piece(i) or "").lstrip("\u2581") in (".", "!", "?", "。", "！", "？")}

    def rows(self, src: TokenArray, tgt: TokenArray, indices: np.ndarray, epoch: int,
             position: int) -> tuple[np.ndarray, tuple[list[np.ndarray], list[np.ndarray]]] | None:
        """The rows of the batch ``indices`` (the batch's ``position`` in ``epoch``) joined, with each row's first
        example number; None for a batch left as it is. A group longer than ``longest`` tokens a side (EOS/BOS
        not counted) stays apart."""
        rng = np.random.default_rng([self.seed, epoch, position, 7])
        if self.rate <= 0 or len(indices) < 2 or rng.random() >= self.rate:
            return None
        k = int(rng.integers(2, 4))
        xs, ys, firsts = [], [], []
        for start in range(0, len(indices), k):
            group = indices[start:start + k]
            parts = [(src[i], tgt[i]) for i in group]
            strip = rng.random(len(parts)) < 0.5
            parts = [(x[:-1], y[:-1]) if cut and len(x) > 1 and len(y) > 1 and x[-1] in self.stops[0]
                     and y[-1] in self.stops[1] else (x, y) for (x, y), cut in zip(parts, strip, strict=True)]
            if max(sum(len(x) for x, _ in parts), sum(len(y) for _, y in parts)) > self.longest:
                xs += [src[i] for i in group]
                ys += [tgt[i] for i in group]
                firsts += list(group)
                continue
            xs.append(np.concatenate([x for x, _ in parts]))
            ys.append(np.concatenate([y for _, y in parts]))
            firsts.append(group[0])
        return np.asarray(firsts), (xs, ys)


class TokenBatchSampler:
    """Batches of sentence pairs grouped by length, each within ``max_tokens`` (paper §5.1).

    A batch of n pairs costs n x (longest source) source tokens and n x (longest target) target
    tokens, padding included; both must be <= max_tokens. Pairs are sorted by length (random tie
    order per epoch), cut greedily into batches, and the batch order is shuffled per epoch from
    ``seed``; the same (seed, epoch) always gives the same batches, so training resumes from
    (epoch, position) exactly. With ``world`` data-parallel ranks, the batch count is made a multiple
    of ``world`` by splitting the largest batches, and rank r takes every world-th batch: ranks get
    disjoint batches of equal count and every pair appears exactly once per epoch.
    """

    def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, seed: int = 1,
                 shuffle: bool = True, rank: int = 0, world: int = 1) -> None:
        self.ls, self.lt = np.asarray(src_lengths, np.int64), np.asarray(tgt_lengths, np.int64)
        longest = int(max(self.ls.max(initial=0), self.lt.max(initial=0)))
        if longest > max_tokens:
            raise ValueError(f"max_tokens={max_tokens} is smaller than the longest example ({longest} tokens); "
                             "raise max_tokens or prepare the data with a smaller --max-len")
        if not 0 <= rank < world:
            raise ValueError(f"rank={rank} must be in [0, world={world})")
        self.max_tokens, self.seed, self.shuffle, self.rank, self.world = max_tokens, seed, shuffle, rank, world
        self._cache: tuple[int, list[np.ndarray]] | None = None

    def _all_batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        tie = rng.random(len(self.ls)) if self.shuffle else np.arange(len(self.ls))
        # by the longer side (which sets the batch size), then target, then source length: 4.2% padding on
        # Multi30k at 4,096 tokens, against 6.4% sorting by (target, source)
        order = np.lexsort((tie, self.ls, self.lt, np.maximum(self.ls, self.lt)))
        batches, start, max_s, max_t = [], 0, 0, 0
        ls, lt, cap = self.ls[order].tolist(), self.lt[order].tolist(), self.max_tokens
        for j in range(len(order)):
            s, t = max(max_s, ls[j]), max(max_t, lt[j])
            if (j - start + 1) * max(s, t) > cap:
                batches.append(order[start:j])
                start, s, t = j, ls[j], lt[j]
            max_s, max_t = s, t
        if start < len(order):
            batches.append(order[start:])
        while len(batches) % self.world:                     # equal counts per rank: split the largest batch
            big = max(range(len(batches)), key=lambda i: len(batches[i]))
            if len(batches[big]) < 2:
                raise ValueError(f"cannot give {self.world} ranks a batch each: only {len(self.ls)} examples")
            half = len(batches[big]) // 2
            batches[big : big + 1] = [batches[big][:half], batches[big][half:]]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of ``epoch`` (lists of example numbers), in training order."""
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._all_batches(epoch)[self.rank :: self.world])
        return self._cache[1]

    def __len__(self) -> int:
        return len(self.epoch_batches(0))
