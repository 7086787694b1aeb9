"""``aiayn <command>``: one short function per pipeline stage, each a thin layer over the library.

Errors in the user's input (files, options, configs) print one line naming what is wrong and exit
with status 2; they never show a traceback. Ctrl-C exits with 130 (training saves a checkpoint first).
"""

from __future__ import annotations

import argparse
import json
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
    p.add_argument("--corpus", choices=["multi30k", "iwslt14", "wmt14", "copy"],
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


# --- train, average ------------------------------------------------------------------------------------------


def cmd_train(a: argparse.Namespace) -> int:
    from .config import resolve
    from .rundir import RunDir
    from .runtime import configure
    from .train import Trainer, TrainingError

    sets = list(a.set or [])
    for flag, key in ((a.max_steps, "max_steps"), (a.max_epochs, "max_epochs"), (a.max_minutes, "max_minutes")):
        if flag is not None:
            sets.append(f"{key}={flag}")
    cfg = resolve(a.preset, a.config, sets, base=RunDir(a.out).saved_config())   # resuming: the run's settings first
    configure(cfg.train.threads)
    trainer = Trainer(a.data, a.out, cfg)
    try:
        trainer.train()
    except TrainingError as e:
        print(f"aiayn train: {e}", file=sys.stderr)
        return 1
    log.info("run dir: %s  (translate with: aiayn translate --model %s)", a.out, a.out)
    return 130 if (trainer.stop_reason or "").startswith("stopped by") else 0


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model on a data dir (re-run to resume)",
                       description="Train a Transformer. Settings: preset -> --config YAML -> --set key=value. "
                       "Re-running the same command on an existing run dir resumes it exactly.")
    p.add_argument("--data", required=True, type=Path, help="a data dir written by `aiayn prepare`")
    p.add_argument("--out", required=True, type=Path, help="the run dir (created, or resumed if it exists)")
    p.add_argument("--config", type=Path, help="a YAML recipe (see configs/)")
    p.add_argument("--preset", choices=["tiny", "small", "base", "big"], help="model size preset (paper Table 3)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimizer updates")
    p.add_argument("--max-epochs", type=int, help="stop after this many epochs")
    p.add_argument("--max-minutes", type=float, help="stop after this much training time")
    p.add_argument("--set", nargs="+", action="extend", metavar="KEY=VALUE",
                   help="override any config field, e.g. max_tokens=8192 (repeatable; later ones win)")
    p.set_defaults(func=cmd_train)


def cmd_average(a: argparse.Namespace) -> int:
    from .checkpoint import average_last
    from .rundir import RunDir

    run = RunDir(a.model)
    chosen = average_last(run, a.last, out=a.out, minimum=2)
    log.info("averaged %s into %s", ", ".join(d.name for d in chosen), a.out or run.averaged)
    return 0


def _add_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("average", help="average the last N checkpoints of a run (paper §6.1)")
    p.add_argument("--model", required=True, type=Path, help="the run dir")
    p.add_argument("--last", type=int, default=5, help="how many of the newest step checkpoints (default 5)")
    p.add_argument("--out", type=Path, help="where to write (default RUN_DIR/averaged, which translate prefers)")
    p.set_defaults(func=cmd_average)


# --- translate, evaluate -----------------------------------------------------------------------------------------


def _decode_settings(a: argparse.Namespace) -> dict[str, object]:
    """The DecodeConfig fields given on the command line (the run's saved settings apply to the rest)."""
    keys = ("beam", "lenpen", "batch_tokens", "workers", "max_len_a", "max_len_b", "temperature", "top_k", "top_p",
            "device", "precision")
    out = {k: getattr(a, k, None) for k in keys}
    if getattr(a, "sampling", False):
        out["sampling"] = True
    return out


def _add_decode_flags(p: argparse.ArgumentParser) -> None:
    from .config import PRECISIONS

    p.add_argument("--model", required=True, type=Path, help="a run dir (or a checkpoint dir inside one)")
    p.add_argument("--beam", type=int, help="beam size (1 = greedy; default: the run's, 4)")
    p.add_argument("--lenpen", type=float, help="length penalty alpha (default: the run's, 0.6)")
    p.add_argument("--max-len-a", type=float, help="max output length = a * source length + b (default 1)")
    p.add_argument("--max-len-b", type=int, help="(default 50)")
    p.add_argument("--batch-tokens", type=int, help="source tokens x beam per batch (default 6000)")
    p.add_argument("--workers", type=int, help="CPU: batches decoded at once, each by its own thread with its share "
                   "of the cores (default 0 = auto: one per core, at most 4; 1 = one batch at a time)")
    p.add_argument("--device", help="auto (default), cpu, cuda, cuda:N, mps")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="inference precision: fp32 (default), bf16/fp16 weights, int8 quantized linear layers (CPU), "
                   "auto (bf16 where the hardware is fast at it)")


def _read_input(path: Path | None) -> list[str]:
    raw = path.read_bytes() if path else sys.stdin.buffer.read()
    text = raw.decode("utf-8", errors="replace")
    if "\ufffd" in text and "\ufffd" not in raw.decode("utf-8", errors="ignore"):
        log.warning("the input has invalid UTF-8; the bad bytes were replaced with U+FFFD")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def cmd_translate(a: argparse.Namespace) -> int:
    from .translate import Translator

    translator = Translator.load(a.model, **_decode_settings(a))
    lines = _read_input(a.input)
    out = open(a.output, "w", encoding="utf-8") if a.output else sys.stdout  # noqa: SIM115
    try:
        if a.nbest and a.nbest > 1:
            nb = translator.translate_hypotheses(lines, nbest=a.nbest, beam=max(a.nbest, translator.decode.beam))
            for i, hyps in enumerate(nb):
                for h, text in zip(hyps, translator.detokenize([h.tokens for h in hyps]), strict=True):
                    out.write(f"{i}\t{h.score:.4f}\t{text}\n")
        else:
            for line in translator.translate(lines):
                out.write(line + "\n")
    finally:
        if a.output:
            out.close()
    return 0


def _add_translate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate text (stdin -> stdout by default)",
                       description="Translate one sentence per line. N lines in, N lines out, in order.")
    _add_decode_flags(p)
    p.add_argument("--input", type=Path, help="input file (default: stdin)")
    p.add_argument("--output", type=Path, help="output file (default: stdout)")
    p.add_argument("--nbest", type=int, help="print the N best as 'line<TAB>score<TAB>text'")
    p.add_argument("--sampling", action="store_true", help="sample instead of searching")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--top-p", type=float)
    p.set_defaults(func=cmd_translate)


def cmd_evaluate(a: argparse.Namespace) -> int:
    from .data import read_lines
    from .evaluate import evaluate
    from .rundir import RunDir
    from .translate import Translator

    src, ref = list(read_lines(a.src, "replace")), list(read_lines(a.ref, "replace"))
    if len(src) != len(ref):
        raise ValueError(f"{a.src} has {len(src)} lines but {a.ref} has {len(ref)}")
    translator = Translator.load(a.model, **_decode_settings(a))
    r = evaluate(translator, src, ref, a.hyps or RunDir.locate(a.model)[0].hypotheses(a.src.name))
    if a.json:
        print(json.dumps(r))
    else:
        print(f"BLEU {r['bleu']:.2f}  (lowercased {r['bleu_lc']:.2f})  chrF {r['chrf']:.2f}  "
              f"{r['sentences']} sentences in {r['seconds']:.1f} s")
        print(f"  {r['signature']}")
        print(f"  hypotheses: {r['hypotheses']}")
    return 0


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="translate a test set and score it with sacreBLEU (BLEU, chrF)")
    _add_decode_flags(p)
    p.add_argument("--src", required=True, type=Path, help="source file (plain or .gz)")
    p.add_argument("--ref", required=True, type=Path, help="raw reference file (plain or .gz)")
    p.add_argument("--hyps", type=Path, help="where to write the hypotheses (default RUN_DIR/hyps/SRC.hyp)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_evaluate)


# --- demo --------------------------------------------------------------------------------------------------------


def cmd_demo(a: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(a.out, a.minutes, a.src, a.tgt, a.set)
    return 0


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="prepare + train + evaluate + translate on the bundled Multi30k, time-bounded")
    p.add_argument("--minutes", type=float, default=15.0, help="training time (default %(default)s)")
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="where data and run go (default %(default)s)")
    p.add_argument("--src", default="de", choices=["de", "en"])
    p.add_argument("--tgt", default="en", choices=["de", "en"])
    p.add_argument("--set", nargs="+", action="extend", metavar="KEY=VALUE", help="override recipe settings (repeatable)")
    p.set_defaults(func=cmd_demo)


# --- serve ---------------------------------------------------------------------------------------------------------


def cmd_serve(a: argparse.Namespace) -> int:
    from . import __version__
    from .rundir import RunDir
    from .serve import ServeConfig, serve
    from .translate import Translator

    key = a.api_key or os.environ.get("AIAYN_API_KEY") or None
    cfg = ServeConfig(host=a.host, port=a.port, max_batch_tokens=a.max_batch_tokens, max_wait_ms=a.max_wait_ms,
                      max_body_bytes=a.max_body_bytes, max_lines=a.max_lines, max_chars=a.max_chars,
                      max_queue_lines=a.max_queue_lines, timeout_s=a.timeout, workers=a.workers or 0, api_key=key)
    translator = Translator.load(a.model, **_decode_settings(a))
    run, ckpt = RunDir.locate(a.model)
    serve(translator, cfg, {"languages": run.languages(), "checkpoint": str(ckpt), "version": __version__})
    return 0


def _add_serve(sub: argparse._SubParsersAction) -> None:
    from .serve import ServeConfig

    d = ServeConfig()
    p = sub.add_parser("serve", help="an HTTP translation service with a web page (needs aiayn[serve])",
                       description="JSON API (POST /translate, /attention; GET /health, /info, /metrics) and a web "
                       "page at /. Lines of concurrent requests are batched together. SIGTERM or Ctrl-C: requests in "
                       "flight are answered, then it exits.")
    _add_decode_flags(p)
    p.add_argument("--host", default=d.host, help="address to bind (default %(default)s: this machine only)")
    p.add_argument("--port", type=int, default=d.port, help="(default %(default)s)")
    p.add_argument("--max-batch-tokens", type=int, default=d.max_batch_tokens,
                   help="source tokens merged into one model call (default %(default)s)")
    p.add_argument("--max-wait-ms", type=float, default=d.max_wait_ms,
                   help="how long a request may wait for others to share its model call (default %(default)s)")
    p.add_argument("--max-lines", type=int, default=d.max_lines, help="lines per request (default %(default)s)")
    p.add_argument("--max-chars", type=int, default=d.max_chars, help="characters per line (default %(default)s)")
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="(default %(default)s)")
    p.add_argument("--max-queue-lines", type=int, default=d.max_queue_lines,
                   help="lines waiting over all requests before new ones get 503 (default %(default)s)")
    p.add_argument("--timeout", type=float, default=d.timeout_s, help="seconds per request before 504 (default %(default)s)")
    p.add_argument("--api-key", help="require this key (header X-API-Key) on all but /health and the page; "
                   "default: $AIAYN_API_KEY if set")
    p.set_defaults(func=cmd_serve)


# --- export --------------------------------------------------------------------------------------------------------


def cmd_export(a: argparse.Namespace) -> int:
    from .data import read_lines
    from .export import check, export

    out = export(a.model, a.format, a.out, a.quantization, a.force)
    log.info("exported %s to %s (%s)", a.model, out, a.format)
    if not a.check:
        return 0
    lines = list(read_lines(a.check, "replace"))
    refs = list(read_lines(a.check_ref, "replace")) if a.check_ref else None
    if refs is not None and len(refs) != len(lines):
        raise ValueError(f"{a.check} has {len(lines)} lines but {a.check_ref} has {len(refs)}")
    r = check(a.model, a.format, out, lines, refs)
    against = "the references" if refs else "aiayn's translations"
    for name in ("greedy", "beam4"):
        x = r[name]
        print(f"{name:7s} identical {x['identical']}/{r['sentences']} ({100 * x['identical_share']:.1f}%)  BLEU against "
              f"{against}: aiayn {x['bleu_aiayn']:.2f}, export {x['bleu_export']:.2f} ({x['bleu_difference']:+.2f})")
    if a.quantization not in (None, "float32"):
        print(f"(the export's weights are {a.quantization}: identity is expected of float32 exports only)")
        return 0
    if r["greedy"]["identical_share"] < 0.99:
        print(f"aiayn export: check failed: {100 * r['greedy']['identical_share']:.1f}% of greedy translations are "
              "identical (at least 99% expected)", file=sys.stderr)
        return 1
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    from .export import CT2_QUANTIZATIONS, FORMATS

    p = sub.add_parser("export", help="export a run to CTranslate2 or Hugging Face transformers (optionally checked)",
                       description="Write a run's model in another engine's format. --check FILE translates FILE "
                       "with aiayn and with the export (greedy and beam 4, fp32) and fails when fewer than 99%% of "
                       "the greedy translations are identical.")
    p.add_argument("--model", required=True, type=Path, help="a run dir (or a checkpoint dir inside one)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--out", required=True, type=Path, help="the directory to write")
    p.add_argument("--quantization", choices=CT2_QUANTIZATIONS, help="CTranslate2 weight type (default float32)")
    p.add_argument("--check", type=Path, help="source sentences to translate with both and compare")
    p.add_argument("--check-ref", type=Path, help="references for --check: BLEU of both against them")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out")
    p.set_defaults(func=cmd_export)


# --- plot --------------------------------------------------------------------------------------------------------


def cmd_plot(a: argparse.Namespace) -> int:
    from .plots import all_plots

    for path in all_plots(a.model, a.out, a.sentence):
        log.info("wrote %s", path)
    return 0


def _add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="plots: positional encoding, learning rate, label smoothing, a run's "
                       "training curves and attention maps (needs matplotlib)")
    p.add_argument("--model", type=Path, help="a run dir (for training curves and attention maps)")
    p.add_argument("--out", type=Path, default=Path("plots"), help="output directory (default %(default)s)")
    p.add_argument("--sentence", default="Ein Mann fährt mit dem Fahrrad über eine Brücke.",
                   help="source sentence for the attention maps")
    p.set_defaults(func=cmd_plot)


# --- main -------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiayn", description="The Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"aiayn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in ADDERS:
        add(sub)
    return parser


ADDERS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_prepare, _add_train, _add_average, _add_translate, _add_evaluate, _add_demo, _add_plot, _add_export, _add_serve,
]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    if args.command not in ("train", "demo"):   # those tune the process with their own `threads` setting
        from .runtime import configure

        configure()
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
