"""``aiayn prepare`` and ``aiayn align``: a parallel corpus into a data dir, and its word alignments.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from .common import DEFAULT_CACHE, command

log = logging.getLogger("aiayn")


def cmd_prepare(a: argparse.Namespace) -> int:
    """Read line-aligned PREFIX.<src>/PREFIX.<tgt> files (plain or .gz), a known corpus or a Hugging Face dataset;
    train one joint SentencePiece vocabulary (or one per language, or use given tokenizers) and write binarized
    splits."""
    from ..data.corpora import inputs, tokenizer_files
    from ..data.datadir import DataDir, summary
    from ..data.prepare import PrepareOptions, prepare

    if a.langs:
        return _prepare_multilingual(a)

    given = inputs(a.cache_dir, corpus=a.corpus, hf_dataset_name=a.hf_dataset, hf_config=a.hf_config,
                   hf_split_map=_split_map(a.hf_split_map), train=a.train, valid=a.valid, test=a.test, src=a.src,
                   tgt=a.tgt)
    tokenizers = tokenizer_files(a.cache_dir, spm_model=a.spm_model, hf_tokenizer=a.hf_tokenizer,
                                 vocab_from=a.vocab_from)
    opts = PrepareOptions(src=given.src, tgt=given.tgt, vocab_size=a.vocab_size, vocab=a.vocab,
                          src_vocab_size=a.src_vocab_size or 0, tgt_vocab_size=a.tgt_vocab_size or 0,
                          tokenizers=tokenizers, model_type=a.model_type, character_coverage=a.character_coverage,
                          encoding_errors=a.encoding_errors, max_len=a.max_len, max_ratio=a.max_ratio,
                          shard_size=a.shard_size)
    out = prepare(given.sources, a.out, opts, force=a.force)
    for line in summary(DataDir(out)):
        log.info("%s", line)
    return 0


def _prepare_multilingual(a: argparse.Namespace) -> int:
    """``--langs``: one data dir of many directions (multilingual.py) from PREFIX.<lang> files (or PREFIX.<pair>.<lang>)."""
    from ..data.datadir import DataDir, summary
    from ..data.multilingual import parse_directions, parse_langs, prepare_multilingual
    from ..data.prepare import PrepareOptions

    if a.corpus or a.src or a.tgt:
        raise ValueError("--langs reads --train/--valid/--test PREFIX files or --hf-dataset; leave out --corpus, --src "
                         "and --tgt")
    if not (a.hf_dataset or (a.train and a.valid)):
        raise ValueError("--langs needs --train PREFIX --valid PREFIX (files PREFIX.de, PREFIX.en, ...) or "
                         "--hf-dataset NAME")
    if a.vocab != "joint" or a.spm_model or a.hf_tokenizer or a.vocab_from:
        raise ValueError("a multilingual data dir trains one joint vocabulary with its language tags: leave out "
                         "--vocab separate, --spm-model, --hf-tokenizer and --vocab-from")
    langs = parse_langs(a.langs)
    directions = parse_directions(a.directions, langs)
    opts = PrepareOptions(src="src", tgt="tgt", vocab_size=a.vocab_size, model_type=a.model_type,
                          character_coverage=a.character_coverage, encoding_errors=a.encoding_errors,
                          max_len=a.max_len, max_ratio=a.max_ratio, shard_size=a.shard_size)
    splits: dict[str, str | Path] = {k: v for k, v in (("train", a.train), ("valid", a.valid), ("test", a.test)) if v}
    if a.hf_dataset:                 # one dataset (or configuration) per pair of languages: {src} and {tgt} in it
        from ..data.corpora import hf_multilingual

        pairs = [(x, y) for x in langs for y in langs if x < y]
        splits = dict(hf_multilingual(a.hf_dataset, pairs, a.cache_dir, a.hf_config, _split_map(a.hf_split_map)))
    out = prepare_multilingual(splits, langs, directions, a.out, opts, a.sampling_temperature, a.tag_position,
                               force=a.force)
    for line in summary(DataDir(out)):
        log.info("%s", line)
    return 0


def _split_map(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        ours, sep, theirs = item.partition("=")
        if not sep or ours not in ("train", "valid", "test") or not theirs:
            raise ValueError(f"--hf-split-map {item!r}: expected train=NAME, valid=NAME or test=NAME")
        out[ours] = theirs
    return out


def add_prepare(sub: argparse._SubParsersAction) -> None:
    from ..data.corpora import CORPORA

    p = command(sub, cmd_prepare)
    p.add_argument("--train", help="PREFIX of the training files (PREFIX.de, PREFIX.en), or a .tsv file")
    p.add_argument("--valid", help="PREFIX of the validation files")
    p.add_argument("--test", help="PREFIX of the test files (optional)")
    p.add_argument("--corpus", choices=sorted(CORPORA),
                   help="a known corpus instead of --train/--valid/--test (multi30k is bundled and works offline)")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="where downloaded corpora go (%(default)s)")
    p.add_argument("--src", help="source language code (file suffix)")
    p.add_argument("--tgt", help="target language code (file suffix)")
    p.add_argument("--hf-dataset", metavar="NAME_OR_DIR", help="a Hugging Face dataset with a translation column: "
                   "a hub id (e.g. IWSLT/iwslt2017) or a directory written by save_to_disk (needs aiayn[hf])")
    p.add_argument("--hf-config", help="the dataset's configuration (e.g. iwslt2017-zh-en)")
    p.add_argument("--hf-split-map", nargs="+", metavar="OURS=THEIRS",
                   help="dataset split names, e.g. valid=dev (default: train=train valid=validation test=test)")
    p.add_argument("--vocab-size", type=int, default=8000, help="vocabulary size (default %(default)s)")
    p.add_argument("--vocab", choices=["joint", "separate"], default="joint",
                   help="one SentencePiece model for both languages (default, as in the paper) or one per language")
    p.add_argument("--src-vocab-size", type=int, help="with --vocab separate: the source's size (default --vocab-size)")
    p.add_argument("--tgt-vocab-size", type=int, help="with --vocab separate: the target's size (default --vocab-size)")
    p.add_argument("--spm-model", nargs="+", type=Path, metavar="FILE",
                   help="use existing SentencePiece model(s) instead of training: one (shared) or two (source, target)")
    p.add_argument("--hf-tokenizer", nargs="+", metavar="PATH_OR_NAME",
                   help="use Hugging Face tokenizer.json file(s) (or a directory, or a hub model name such as "
                   "bert-base-chinese): one (shared) or two (source, target); needs aiayn[hf]")
    p.add_argument("--vocab-from", type=Path, metavar="DIR",
                   help="reuse the tokenizers of a data dir or run dir (e.g. to fine-tune that run on new data)")
    p.add_argument("--model-type", choices=["bpe", "unigram"], default="bpe")
    p.add_argument("--character-coverage", type=float, default=None,
                   help="SentencePiece character coverage (default: 1.0, or 0.9995 for CJK-sized alphabets)")
    p.add_argument("--encoding-errors", choices=["strict", "replace"], default="strict",
                   help="invalid UTF-8: stop with the file and line (strict), or replace with U+FFFD")
    p.add_argument("--max-len", type=int, default=256, help="drop training pairs longer than this (tokens)")
    p.add_argument("--max-ratio", type=float, default=3.0, help="drop training pairs with a longer/shorter "
                   "token ratio above this (pairs with both sides under 10 tokens are kept)")
    p.add_argument("--shard-size", type=int, default=0, metavar="PAIRS",
                   help="split the training binaries into shards of this many pairs (default: one file per language)")
    p.add_argument("--langs", metavar="LANG,LANG,...",
                   help="many languages in one model (docs/multilingual.md): the files PREFIX.de, PREFIX.en, ... of a "
                   "multi-parallel corpus (or PREFIX.de-en.de, PREFIX.de-en.en per pair), e.g. --langs de,en,fr,cs")
    p.add_argument("--directions", default="all", metavar="all|LANG|SRC-TGT,...",
                   help="with --langs: the directions trained: all (default), one language (to and from it only: the "
                   "others are zero-shot), or a list such as de-en,en-de")
    p.add_argument("--sampling-temperature", type=float, default=1.0, metavar="T",
                   help="with --langs: direction d gets a share of (n_d/N)^(1/T) of the training pairs (1, the default: "
                   "as the corpus is; 5: small directions repeated)")
    p.add_argument("--tag-position", choices=("source", "target"), default="target",
                   help="with --langs: the target language's tag <2xx> first in the target, the decoder's first token "
                   "(the default: fairseq's --decoder-langtok, M2M-100; measured better on Multi30k, and what an Argos "
                   "package of one direction needs), or first in the source (Johnson et al., Marian, Sockeye): "
                   "docs/multilingual.md")
    p.add_argument("--out", required=True, type=Path, help="the data dir to write")
    p.add_argument("--force", action="store_true", help="rebuild even if --out holds a different preparation")


def cmd_align(a: argparse.Namespace) -> int:
    """Word-align the training pairs of a data dir with eflomal (both directions, symmetrized by grow-diag-final-and)
    over the words its tokenizers make, and store the links there, for guided alignment: a model trained with
    --set guided_alignment=0.1 learns to align with one encoder-decoder attention head, which translate --alignments
    then reads (docs/terminology.md)."""
    from ..decoding.lexicon import align_corpus

    info = align_corpus(a.data, a.split)
    log.info("aligned %d %s pairs (%d links) with eflomal in %.1f s; train with --set guided_alignment=0.1",
             info["pairs"], a.split, info["links"], info["seconds"])
    return 0


def add_align(sub: argparse._SubParsersAction) -> None:
    p = command(sub, cmd_align)
    p.add_argument("data", type=Path, help="a data dir written by `aiayn prepare`")
    p.add_argument("--split", default="train", help="the split to align (default %(default)s)")
