"""Preparing a data directory (``aiayn prepare``): parallel text validated and hashed, filtered by length and ratio, a
vocabulary trained (or given tokenizer files taken), and every split encoded once into the binaries that
data.DataDir reads, written atomically (a prepared directory is either whole or absent).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_dir
from ..config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from .datadir import FORMAT_VERSION, NEWER, BinWriter, DataDir, DataError, Source, read_pairs
from .tokenizer import Tokenizer, Vocab, stored_name

log = logging.getLogger(__name__)


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
    symbols: tuple[str, ...] = ()      # pieces the trained vocabulary keeps whole (multilingual.py: language tags)


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

    from .. import __version__

    return {"aiayn": __version__, "sentencepiece": sentencepiece.__version__, "numpy": np.__version__,
            "torch": torch.__version__}


def _validate_and_hash(sources: dict[str, Source], opts: PrepareOptions) -> tuple[dict[str, Any], str]:
    """Read every input once: check encodings and line counts, count pairs, hash the bytes."""
    info: dict[str, Any] = {}
    # options left at their defaults are not hashed when they are newer than the data format, so data dirs
    # prepared before them are still recognised as the same preparation
    fields = {k: v for k, v in dataclasses.asdict(opts).items() if k not in NEWER or v != NEWER[k]}
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
        Tokenizer.train(lines, tmp / stored_name(None), opts.vocab_size, opts.model_type, opts.character_coverage,
                        symbols=opts.symbols)
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


def encode_tagged(tokenizer: Any, lines: list[str], tags: tuple[str, ...] | list[str]) -> list[list[int]]:
    """Each line's ids, where a line that starts with a tag and a space (``<2fr> Ein Mann``, as a multilingual data
    directory's text holds them) gets the tag's id and then its text's own ids: the same ids as the text encoded
    alone with the tag put in front when translating, with no word-start piece of its own before the tag."""
    ids = {t: tokenizer.piece_id(t) for t in tags}
    heads: list[int | None] = []
    texts = []
    for line in lines:
        head, sep, rest = line.partition(" ")
        known = ids.get(head) if sep else None
        heads.append(known)
        texts.append(rest if known is not None else line)
    return [([h, *x] if h is not None else x) for h, x in zip(heads, tokenizer.encode(texts), strict=True)]


def _encode(vocab: Vocab, src_lines: list[str], tgt_lines: list[str],
            symbols: tuple[str, ...]) -> tuple[list[list[int]], list[list[int]]]:
    """Both sides' ids; with ``symbols``, a multilingual data dir's lines, a language tag in front (multilingual.py)."""
    if symbols:
        return encode_tagged(vocab.src, src_lines, symbols), encode_tagged(vocab.tgt, tgt_lines, symbols)
    return vocab.src.encode(src_lines), vocab.tgt.encode(tgt_lines)


def _encode_split(
    split: str, source: Source, vocab: Vocab, out: DataDir, opts: PrepareOptions, dtype: np.dtype, chunk: int,
    raw_source: Source | None = None,
) -> dict[str, Any]:
    """Tokenize one split in chunks of ``chunk`` pairs into binaries (sharded for train with ``shard_size``);
    memory stays bounded whatever the corpus size. ``raw_source``: the evaluation split's text as it is translated
    and scored, line for line, where it is not what is encoded (multilingual.py: without the language tags)."""
    shard_size = opts.shard_size if split == "train" else 0
    chunk = min(chunk, shard_size) if shard_size else chunk
    shards: list[dict[str, BinWriter]] = []

    def open_shard() -> dict[str, BinWriter]:
        shard = len(shards) if shard_size else None
        shards.append({lang: BinWriter(out.stem(split, lang, shard), dtype) for lang in (opts.src, opts.tgt)})
        return shards[-1]

    writers = open_shard()
    raw = None
    if split != "train":
        raw = {lang: open(out.raw_file(split, lang), "w", encoding="utf-8") for lang in (opts.src, opts.tgt)}  # noqa: SIM115
    dropped = {"empty": 0, "too_long": 0, "ratio": 0}
    pairs = read_pairs(source, opts.encoding_errors)
    raw_pairs = read_pairs(raw_source, opts.encoding_errors) if raw_source is not None else None
    while block := list(itertools.islice(pairs, chunk)):
        src_lines, tgt_lines = (list(x) for x in zip(*block, strict=True))
        src_ids, tgt_ids = _encode(vocab, src_lines, tgt_lines, opts.symbols)
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
            if raw_pairs is not None:
                src_lines, tgt_lines = (list(x) for x in zip(*itertools.islice(raw_pairs, len(block)), strict=True))
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
    extra: dict[str, Any] | None = None, raw: dict[str, Source] | None = None,
) -> Path:
    """Build a data directory from parallel text; returns its path. Reuses an identical earlier build. ``extra``:
    more fields for the manifest (how the inputs were made: distill.py records its teacher there); ``raw``: an
    evaluation split's text as translated and scored, where it differs from what is encoded (line for line).

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
        splits = {s: _encode_split(s, src, vocab, layout, opts, dtype, chunk, (raw or {}).get(s))
                  for s, src in sources.items()}
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
