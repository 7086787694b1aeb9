"""``aiayn <command>``: one short function per pipeline stage, each a thin layer over the library.

Errors in the user's input (files, options, configs) print one line naming what is wrong and exit
with status 2; they never show a traceback. Ctrl-C exits with 130 (training saves a checkpoint first).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from . import __version__

log = logging.getLogger("aiayn")

DEFAULT_CACHE = Path(os.environ.get("AIAYN_CACHE", Path.home() / ".cache" / "aiayn"))


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s", stream=sys.stderr)


# --- prepare -------------------------------------------------------------------------------------------------


def cmd_prepare(a: argparse.Namespace) -> int:
    from .corpora import CORPORA, fetch
    from .data import DataDir, PrepareOptions, find_source, prepare

    if a.corpus:
        src, tgt = a.src or CORPORA[a.corpus].langs[0], a.tgt or CORPORA[a.corpus].langs[1]
        sources = fetch(a.corpus, src, tgt, a.cache_dir)
    else:
        if not (a.train and a.valid and a.src and a.tgt):
            raise ValueError("prepare needs --train PREFIX --valid PREFIX --src LANG --tgt LANG (or --corpus NAME)")
        src, tgt = a.src, a.tgt
        sources = {"train": find_source(a.train, src, tgt), "valid": find_source(a.valid, src, tgt)}
        if a.test:
            sources["test"] = find_source(a.test, src, tgt)
    opts = PrepareOptions(src=src, tgt=tgt, vocab_size=a.vocab_size, model_type=a.model_type,
                          character_coverage=a.character_coverage, encoding_errors=a.encoding_errors,
                          max_len=a.max_len, max_ratio=a.max_ratio)
    out = prepare(sources, a.out, opts, force=a.force)
    m = DataDir(out).manifest
    for split, s in m["splits"].items():
        dropped = ", ".join(f"{k} {v}" for k, v in s["dropped"].items() if v) or "none"
        log.info("%-5s %8d pairs (%d in; dropped: %s)  %d %s / %d %s tokens", split, s["pairs"], s["pairs_in"],
                 dropped, s["src_tokens"], src, s["tgt_tokens"], tgt)
    log.info("vocabulary: %d %s pieces, shared by %s and %s", m["vocab"]["size"], m["vocab"]["model_type"], src, tgt)
    log.info("data dir: %s (prepared in %.1f s)", out, m["seconds"])
    return 0


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare", help="tokenize and binarize a parallel corpus into a data dir",
                       description="Read line-aligned PREFIX.<src>/PREFIX.<tgt> files (plain or .gz) or a known "
                       "corpus, train one joint SentencePiece vocabulary and write binarized splits.")
    p.add_argument("--train", help="PREFIX of the training files (PREFIX.de, PREFIX.en), or a .tsv file")
    p.add_argument("--valid", help="PREFIX of the validation files")
    p.add_argument("--test", help="PREFIX of the test files (optional)")
    p.add_argument("--corpus", choices=["multi30k", "iwslt14", "wmt14"],
                   help="a known corpus instead of --train/--valid/--test (multi30k is bundled and works offline)")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="where downloaded corpora go (%(default)s)")
    p.add_argument("--src", help="source language code (file suffix)")
    p.add_argument("--tgt", help="target language code (file suffix)")
    p.add_argument("--vocab-size", type=int, default=8000, help="joint vocabulary size (default %(default)s)")
    p.add_argument("--model-type", choices=["bpe", "unigram"], default="bpe")
    p.add_argument("--character-coverage", type=float, default=None,
                   help="SentencePiece character coverage (default: 1.0, or 0.9995 for CJK-sized alphabets)")
    p.add_argument("--encoding-errors", choices=["strict", "replace"], default="strict",
                   help="invalid UTF-8: stop with the file and line (strict), or replace with U+FFFD")
    p.add_argument("--max-len", type=int, default=256, help="drop training pairs longer than this (tokens)")
    p.add_argument("--max-ratio", type=float, default=3.0, help="drop training pairs with a longer/shorter "
                   "token ratio above this (pairs with both sides under 10 tokens are kept)")
    p.add_argument("--out", required=True, type=Path, help="the data dir to write")
    p.add_argument("--force", action="store_true", help="rebuild even if --out holds a different preparation")
    p.set_defaults(func=cmd_prepare)


# --- main -------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiayn", description="The Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"aiayn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in ADDERS:
        add(sub)
    return parser


ADDERS: list[Callable[[argparse._SubParsersAction], None]] = [_add_prepare]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("aiayn: interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError) as e:
        if args.verbose:
            raise
        print(f"aiayn {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
