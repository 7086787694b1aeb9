"""``aiayn <command>``: one short function per pipeline stage, each a thin layer over the library.

Errors in the user's input (files, options, configs) print one line naming what is wrong and exit
with status 2; they never show a traceback. Ctrl-C exits with 130 (training saves a checkpoint first).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import logging
import os
import select
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from . import __version__

if TYPE_CHECKING:
    pass

log = logging.getLogger("aiayn")

DEFAULT_CACHE = Path(os.environ.get("AIAYN_CACHE", Path.home() / ".cache" / "aiayn"))


def _command(sub: argparse._SubParsersAction, func: Callable[[argparse.Namespace], int],
             description: str | None = None) -> argparse.ArgumentParser:
    """The subcommand ``func`` runs (``cmd_NAME`` is ``aiayn NAME``): its one-line help (:data:`COMMANDS`), and as
    its description the function's docstring (or ``description``)."""
    name = func.__name__.removeprefix("cmd_")
    help = COMMANDS[name]
    p = sub.add_parser(name, help=help, description=description or inspect.cleandoc(func.__doc__ or help))
    p.set_defaults(func=func)
    return p


# each command and its one-line help, in the order `aiayn --help` lists them
COMMANDS = {
    "prepare": "tokenize and binarize a parallel corpus into a data dir",
    "align": "word-align a data dir's training pairs (eflomal) for guided alignment",
    "train": "train a model on a data dir (re-run to resume)",
    "average": "average the last N checkpoints of a run (paper §6.1)",
    "translate": "translate text (stdin -> stdout by default)",
    "evaluate": "translate a test set and score it with sacreBLEU (BLEU, chrF, TER)",
    "calibrate": "fit a run's confidence (per sentence, in [0, 1]) on its validation split against sentence chrF",
    "demo": "prepare + train + evaluate + translate on the bundled Multi30k",
    "serve": "an HTTP translation service with a web page (needs aiayn[serve])",
    "export": "export a run to CTranslate2 or Hugging Face transformers (optionally checked)",
    "import": "read a pretrained Marian / OPUS-MT model into a run dir",
    "distill": "translate a corpus with a teacher into a data dir for a student (Kim & Rush 2016)",
    "shortlist": "build a run's lexical shortlist (fewer output tokens per batch: faster decoding)",
    "plot": "plots: positional encoding, learning rate, label smoothing, a run's training curves "
             "and attention maps (needs matplotlib)",
}


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s", stream=sys.stderr)


# --- prepare -------------------------------------------------------------------------------------------------


def cmd_prepare(a: argparse.Namespace) -> int:
    """Read line-aligned PREFIX.<src>/PREFIX.<tgt> files (plain or .gz), a known corpus or a Hugging Face dataset;
    train one joint SentencePiece vocabulary (or one per language, or use given tokenizers) and write binarized
    splits."""
    from .corpora import inputs, tokenizer_files
    from .data import DataDir, PrepareOptions, prepare

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
    for line in DataDir(out).summary():
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


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    from .corpora import CORPORA

    p = _command(sub, cmd_prepare)
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
    p.add_argument("--out", required=True, type=Path, help="the data dir to write")
    p.add_argument("--force", action="store_true", help="rebuild even if --out holds a different preparation")


def cmd_align(a: argparse.Namespace) -> int:
    """Word-align the training pairs of a data dir with eflomal (both directions, symmetrized by grow-diag-final-and)
    over the words its tokenizers make, and store the links there, for guided alignment: a model trained with
    --set guided_alignment=0.1 learns to align with one encoder-decoder attention head, which translate --alignments
    then reads (docs/terminology.md)."""
    from .lexicon import align_corpus

    info = align_corpus(a.data, a.split)
    log.info("aligned %d %s pairs (%d links) with eflomal in %.1f s; train with --set guided_alignment=0.1",
             info["pairs"], a.split, info["links"], info["seconds"])
    return 0


def _add_align(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, cmd_align)
    p.add_argument("data", type=Path, help="a data dir written by `aiayn prepare`")
    p.add_argument("--split", default="train", help="the split to align (default %(default)s)")


# --- train, average ------------------------------------------------------------------------------------------


def cmd_train(a: argparse.Namespace) -> int:
    """Train a Transformer. Settings: preset -> --config YAML -> --set key=value. Re-running the same command on an
    existing run dir resumes it exactly."""
    from .config import resolve
    from .rundir import RunDir
    from .runtime import configure
    from .train import Trainer, TrainingError

    sets = list(a.set or [])
    for flag, key in ((a.max_steps, "max_steps"), (a.max_epochs, "max_epochs"), (a.max_minutes, "max_minutes")):
        if flag is not None:
            sets.append(f"{key}={flag}")
    base = RunDir(a.out).saved_config()                 # resuming: the run's settings first
    if base is None and a.init_from:
        base = RunDir.locate(a.init_from)[0].config()   # fine-tuning: the parent's settings first
    cfg = resolve(a.preset, a.config, sets, base=base)
    configure(cfg.train.threads)
    trainer = Trainer(a.data, a.out, cfg, init_from=a.init_from)
    try:
        trainer.train()
    except TrainingError as e:
        print(f"aiayn train: {e}", file=sys.stderr)
        return 1
    log.info("run dir: %s  (translate with: aiayn translate --model %s)", a.out, a.out)
    return 130 if (trainer.stop_reason or "").startswith("stopped by") else 0


def _add_train(sub: argparse._SubParsersAction) -> None:
    from .config import PRESETS

    p = _command(sub, cmd_train)
    p.add_argument("--data", required=True, type=Path, help="a data dir written by `aiayn prepare`")
    p.add_argument("--out", required=True, type=Path, help="the run dir (created, or resumed if it exists)")
    p.add_argument("--config", type=Path, help="a YAML recipe (see configs/)")
    p.add_argument("--preset", choices=list(PRESETS), help="model size preset (paper Table 3)")
    p.add_argument("--init-from", type=Path, metavar="RUN",
                   help="start from another run's weights (its best checkpoint, or a checkpoint dir) and settings, "
                   "with a fresh optimizer and schedule: fine-tuning. The data must use its tokenizers "
                   "(prepare --vocab-from RUN)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimizer updates")
    p.add_argument("--max-epochs", type=int, help="stop after this many epochs")
    p.add_argument("--max-minutes", type=float, help="stop after this much training time")
    p.add_argument("--set", nargs="+", action="extend", metavar="KEY=VALUE",
                   help="override any config field, e.g. max_tokens=8192 (repeatable; later ones win)")


def cmd_average(a: argparse.Namespace) -> int:
    from .rundir import RunDir

    run = RunDir(a.model)
    chosen = run.average_last(a.last, out=a.out, minimum=2)
    log.info("averaged %s into %s", ", ".join(d.name for d in chosen), a.out or run.averaged)
    return 0


def _add_average(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, cmd_average)
    p.add_argument("--model", required=True, type=Path, help="the run dir")
    p.add_argument("--last", type=int, default=5, help="how many of the newest step checkpoints (default 5)")
    p.add_argument("--out", type=Path, help="where to write (default RUN_DIR/averaged, which translate prefers)")


# --- translate, evaluate -----------------------------------------------------------------------------------------


def _add_setting_flags(p: argparse.ArgumentParser, cls: type, section: str, exclude: tuple[str, ...] = (),
                       default: Callable[[dataclasses.Field[Any]], str] = lambda f: f"{f.default}") -> None:
    """One flag per field of a settings dataclass made with config.setting (``max_len_a`` -> ``--max-len-a``, or the
    field's own ``flag``), typed, with its help and ``default(field)`` as the default it names; parsed into
    ``section.NAME``, None when not given (:func:`_given`)."""
    import types
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        hint, flag = hints[f.name], f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        if typing.get_origin(hint) in (typing.Union, types.UnionType):           # str | None: a str
            hint = next(t for t in typing.get_args(hint) if t is not type(None))
        kw: dict[str, Any] = {"dest": f"{section}.{f.name}", "default": None,
                              "help": f"{f.metadata['help']} (default: {default(f)})".replace("%", "%%")}
        if hint is bool:
            p.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
        elif typing.get_origin(hint) is typing.Literal:
            p.add_argument(flag, choices=typing.get_args(hint), **kw)
        else:
            p.add_argument(flag, type=hint, metavar=f.name.upper(), **kw)


def _given(a: argparse.Namespace, section: str) -> dict[str, Any]:
    """The settings of ``section`` given on the command line (:func:`_add_setting_flags`), by field name."""
    return {k.split(".", 1)[1]: v for k, v in vars(a).items() if k.startswith(section + ".") and v is not None}


def _add_decode_flags(p: argparse.ArgumentParser, exclude: tuple[str, ...] = (), several: str = "chain") -> None:
    """--model (``several``: repeatable), and one flag per DecodeConfig field; a field not given keeps the run's saved
    setting."""
    from .config import DecodeConfig

    p.add_argument("--engine", default="auto",
                   help="a name in engines/auto.py's table: torch: aiayn's own; ctranslate2: the model converted for "
                        "CTranslate2 on first use, cached in the run dir (needs aiayn[export]); auto: CTranslate2 where "
                        "it is installed, aiayn's own for what it cannot do (constraints, attention maps), said when "
                        "used (default: %(default)s)")
    if several == "pairs":
        p.add_argument("--model", required=True, type=Path, action="append",
                       help="a run dir (or a checkpoint dir inside one, or a directory of run dirs); repeat it to "
                            "serve several models, one per language pair (pairs without one go through a pivot)")
    else:
        p.add_argument("--model", required=True, type=Path, action="append",
                       help="a run dir (or a checkpoint dir inside one); repeat it to translate through each in turn "
                            "(de-en then en-fr: a pivot)")
    _add_setting_flags(p, DecodeConfig, "decode", exclude,
                       default=lambda f: f"the run's decode.{f.name}; new runs: {f.default}")


class _Lines:
    """The lines of a binary stream (a file, or stdin), decoded as UTF-8 (bad bytes replaced, with one warning),
    without their line ends; split on "\\n" only. ``more_ready`` tells the translation stream whether more
    can be read without waiting."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.warned = f, False
        try:
            self.regular = stat.S_ISREG(os.fstat(f.fileno()).st_mode)
        except (OSError, ValueError, AttributeError):
            self.regular = True

    def __iter__(self) -> Iterator[str]:
        for raw in self.f:
            line = raw.decode("utf-8", errors="replace")
            if "\ufffd" in line and not self.warned and "\ufffd" not in raw.decode("utf-8", errors="ignore"):
                log.warning("the input has invalid UTF-8; the bad bytes were replaced with U+FFFD")
                self.warned = True
            yield line.rstrip("\n").rstrip("\r")

    def more_ready(self) -> bool:
        if self.regular:
            return True
        try:
            return bool(select.select([self.f], [], [], 0)[0])
        except (OSError, ValueError):
            return True


def _count_lines(path: Path) -> int:
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def cmd_translate(a: argparse.Namespace) -> int:
    """Translate line by line, each line cut into its sentences (a paragraph per line is fine; --no-sentences: each
    line one sentence). N lines in, N lines out, in order. With --nbest N > 1, N lines per input line:
    'line<TAB>score<TAB>text'. With --alignments, each text is followed by ' ||| ' and its word alignment."""

    settings = _given(a, "decode")
    nbest = settings.pop("nbest", None) or 1           # per request: a beam not given grows to it (pipeline.prepare)
    names = {"nbest": "--nbest", "alignments": "--alignments", "glossary": "--glossary", "constraints": "--constraints",
             "format": "--format html", "unit": "line"}
    glossary = None
    if a.glossary:
        from .constraints import Glossary

        glossary = Glossary.load(a.glossary)
    _check_input(a)
    with _engines(a, settings) as engines, _fallback(a) as fallback:
        return _translate(a, engines, settings, nbest, names, glossary, fallback)


def _check_input(a: argparse.Namespace) -> None:
    """An --input file refused by name, before any model is loaded, where its bytes are not what it is read as (a
    document's format, or text: documents/formats.py)."""
    if a.input is None:
        return
    from .documents.encoding import refuse_binary
    from .documents.formats import EXTENSIONS, check_content, find

    if a.input.suffix.lower() in EXTENSIONS[1:] and a.format == "text":
        check_content(a.input, find(a.input))
    else:
        with open(a.input, "rb") as f:
            refuse_binary(f.read(4096), a.input.name)


@contextlib.contextmanager
def _engines(a: argparse.Namespace, settings: dict[str, Any]) -> Iterator[list[Any]]:
    """The engine of each --model (more than one: a pivot, each in turn), closed at the end (worker processes end)."""
    from .engines.auto import load

    engines: list[Any] = []
    try:
        for m in a.model:
            engines.append(load(m, a.engine, processes=a.processes, **settings))
        yield engines
    finally:
        for engine in engines:
            engine.close()


@contextlib.contextmanager
def _fallback(a: argparse.Namespace) -> Iterator[list[Any]]:
    """--fallback RUN's engine (with its run's own settings), closed at the end; none without it."""
    from .engines.auto import load

    engine = load(a.fallback, a.engine, processes=a.processes) if a.fallback else None
    try:
        yield [engine] if engine is not None else []
    finally:
        if engine is not None:
            engine.close()


def _translate(a: argparse.Namespace, engines: list[Any], settings: dict[str, Any], nbest: int, names: dict[str, str],
               glossary: Any, fallback: list[Any]) -> int:
    """cmd_translate's work, once its engines are loaded."""
    from tqdm import tqdm

    from .documents.formats import EXTENSIONS
    from .pipeline import FALLBACK, Request, leg, prepare, stream, translate_with_fallback

    before = dict(FALLBACK)                                 # (this process's counts: this command's are the change)
    def translate_through(engines: list[Any], request: Request) -> Any:
        return translate_with_fallback(engines, fallback, request, a.min_confidence)

    def request(lines: list[str], constraints: list[list[str]] | None = None) -> Request:
        return Request(lines, {**settings, "nbest": nbest}, constraints, glossary, a.alignments, a.format, names,
                       a.protect)

    asked = request([], [] if a.constraints else None)          # what it refuses: before any line is read
    for engine in engines[:-1]:
        prepare(engine, leg(asked))
    prepare(engines[-1], asked)
    if a.input and a.input.suffix.lower() in EXTENSIONS[1:] and a.format == "text":  # a document (.txt: lines)
        languages = (engines[0].languages or (None, None))[0], (engines[-1].languages or (None, None))[1]
        from .documents.common import Scored

        return _translate_document(a, nbest, languages, lambda texts, fmt, kinds: [
            Scored(t[0].text, t[0].confidence) for t in translate_through(
                engines, replace(request(texts), format=fmt, protect=kinds))])
    inp = _input(a.input) if a.input else sys.stdin.buffer
    out = open(a.output, "w", encoding="utf-8") if a.output else sys.stdout  # noqa: SIM115
    show = not a.quiet and sys.stderr.isatty() and (a.input is not None or not sys.stdin.isatty())
    bar = tqdm(total=_count_lines(a.input) if a.input else None, unit=" lines", disable=not show, file=sys.stderr,
               dynamic_ncols=True)
    flush = out.flush if not a.output else (lambda: None)   # a pipe gets each line at once; a file is buffered
    kept = [0, 0]                                           # protected spans: kept, total
    try:
        lines: Any = _Lines(inp)
        if a.constraints:                                   # (line, phrases) pairs
            lines = _Constrained(lines, a.constraints)
            run = lambda chunk: translate_through(engines, request([x for x, _ in chunk], [c for _, c in chunk]))  # noqa: E731
        else:
            run = lambda chunk: translate_through(engines, request(chunk))  # noqa: E731
        for i, translations in enumerate(stream(lines, run, in_flight=min(e.calls_at_once for e in engines))):
            kept[0], kept[1] = kept[0] + translations[0].spans[0], kept[1] + translations[0].spans[1]
            for t in translations:
                text = t.text if t.alignment is None else f"{t.text} ||| {t.alignment}"
                out.write(_scored(i, t, text) if a.scores else f"{i}\t{t.score:.4f}\t{text}\n" if nbest > 1 else
                          text + "\n")
            bar.update()
            flush()        # each line as soon as it and every earlier one are done
    finally:
        bar.close()
        if a.input:
            inp.close()
        if a.output:
            out.close()
    if kept[1]:
        log.info("protected spans (placeholders, URLs, tags): %d of %d kept", kept[0], kept[1])
    if fallback:
        _said_fallback({k: FALLBACK[k] - before[k] for k in FALLBACK}, a.min_confidence)
    return 0


def _said_fallback(counts: dict[str, int], min_confidence: float) -> None:
    sent = counts["sent"]
    log.info("--fallback: %d line%s under confidence %g translated again, %d bettered", sent, "" if sent == 1 else "s",
             min_confidence, counts["kept"])


def _scored(line: int, t: Any, text: str) -> str:
    """--scores: one JSON object per translation (its input line, text, score and confidence)."""
    conf = None if t.confidence is None else round(t.confidence, 4)
    return json.dumps({"line": line, "text": text, "score": round(t.score, 4), "confidence": conf},
                      ensure_ascii=False) + "\n"


def _input(path: Path) -> BinaryIO:
    """An input file of lines (_check_input: text); one in UTF-16 or UTF-32 (its byte-order mark says so) read as
    UTF-8."""
    import codecs
    import io

    from .documents.encoding import bom

    f = open(path, "rb")  # noqa: SIM115 - the caller closes it
    marked = bom(f.peek(4)[:4])
    if marked in ("utf-16", "utf-32"):
        text = io.TextIOWrapper(f, encoding=marked, newline="")
        return io.BytesIO(text.read().encode("utf-8"))
    if marked == "utf-8-sig":
        f.read(len(codecs.BOM_UTF8))
    return f


def _translate_document(a: argparse.Namespace, nbest: int, languages: tuple[str | None, str | None],
                        translate: Callable[[list[str], str, tuple[str, ...]], list[str]]) -> int:
    """--input FILE --output FILE of a document format (documents/), with a progress bar over its texts."""
    from tqdm import tqdm

    from .documents.common import DocumentError, Options
    from .documents.formats import find, translate_document

    if a.output is None or find(a.output) != find(a.input):
        raise DocumentError(f"{a.input.name}: a document is written to a file of its own format: give --output "
                            f"NAME{a.input.suffix}")
    if nbest > 1 or a.alignments or a.constraints:
        raise DocumentError(f"{a.input.name}: a document takes none of --nbest, --alignments, --constraints")
    bar = tqdm(total=0, unit=" texts", disable=a.quiet or not sys.stderr.isatty(), file=sys.stderr, dynamic_ncols=True)

    def chunked(texts: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
        bar.total += len(texts)
        out: list[str] = []
        for i in range(0, len(texts), 32):                  # the bar moves as the document goes
            out += translate(texts[i:i + 32], fmt, kinds)
            bar.update(len(texts[i:i + 32]))
        return out

    try:
        report = translate_document(a.input, a.output, chunked,
                                    options=Options(languages[0], languages[1], review=not a.no_fuzzy,
                                                    min_confidence=a.min_confidence))
    finally:
        bar.close()
    n = report.texts
    log.info("%s: %d text%s translated into %s%s; protected spans (placeholders, inline tags): %d of %d kept",
             a.input.name, n, "" if n == 1 else "s", a.output,
             f" (read as {report.encoding})" if report.encoding not in (None, "utf-8", "ascii") else "",
             report.kept, report.spans)
    return 0


def _add_translate(sub: argparse._SubParsersAction) -> None:
    from . import spans

    p = _command(sub, cmd_translate)
    _add_decode_flags(p)
    p.add_argument("--input", type=Path, help="input file (default: stdin)")
    p.add_argument("--output", type=Path, help="output file (default: stdout)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it shows on a terminal only anyway)")
    p.add_argument("--glossary", type=Path, metavar="TSV",
                   help="'source term<TAB>target term' lines: a line containing a term is translated with its target "
                        "term (lexically constrained beam search; the matching rules: docs/terminology.md)")
    p.add_argument("--format", choices=("text", "html"), default="text",
                   help="html: each line is an HTML fragment, translated with its markup kept (tags placed by the word "
                        "alignment; placeholders such as {name} and %%s kept; docs/terminology.md)")
    p.add_argument("--alignments", action="store_true",
                   help="print each translation's word alignment after it: 'text ||| 0-0 1-2 ...' (source word - "
                        "target word, from 0; from the encoder-decoder attention)")
    p.add_argument("--constraints", type=Path, metavar="JSONL",
                   help="one JSON list of target phrases per input line (or null): each translation contains them")
    p.add_argument("--protect", type=_kinds, default=spans.DEFAULT, metavar="KINDS",
                   help="the protected spans of a text, taken out before translating and put back on the aligned words "
                        f"(comma-separated, of {', '.join(spans.KINDS)}; none: off; default: {','.join(spans.DEFAULT)}). "
                        "A document's format says its own")
    p.add_argument("--scores", action="store_true",
                   help="one JSON object per translation: {line, text, score, confidence}; confidence in [0, 1] is "
                        "the calibrated probability that it is acceptable (aiayn calibrate; docs/confidence.md)")
    p.add_argument("--no-fuzzy", action="store_true",
                   help="documents: trust the machine translations (a PO entry is not marked fuzzy, an XLIFF target is "
                        "'translated', not 'needs-review-translation') but those less sure than --min-confidence")
    p.add_argument("--fallback", type=Path, metavar="RUN",
                   help="a stronger model (the teacher behind a student, or the same run, the first decoded with "
                        "--beam 1) that translates again each line less sure than --min-confidence; its translation "
                        "is kept where it is surer. It decodes with its run's settings")
    p.add_argument("--min-confidence", type=_unit, default=0.5, metavar="X",
                   help="a translation less sure than X (in [0, 1]: docs/confidence.md) is translated again by "
                        "--fallback, and in a document with --no-fuzzy marked for review all the same (default "
                        "%(default)s)")
    _add_processes_flag(p)


def _unit(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a number in [0, 1]") from None
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a number in [0, 1]")
    return x


def _kinds(value: str) -> tuple[str, ...]:
    from . import spans

    if value.strip() in ("", "none"):
        return ()
    try:
        return spans.check(k.strip() for k in value.split(","))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_processes_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--processes", action=argparse.BooleanOptionalAction, default=True,
                   help="aiayn's engine on a CPU with more than one worker (--workers; auto: one per core): each worker "
                        "a process with its own copy of the model and its share of the cores, started at once, so "
                        "that they load while this one reads the input, and no two batches share Python's GIL "
                        "(docs/performance.md); --no-processes: threads of this process. The output is the same")


class _Constrained:
    """Input lines paired with their constraints: a list of target phrases from --constraints, one JSON list or null
    per input line, in step with the input (the pipeline adds the --glossary terms a line contains)."""

    def __init__(self, lines: _Lines, path: Path) -> None:
        self.lines, self.path = lines, path

    def __iter__(self) -> Iterator[tuple[str, list[str]]]:
        with open(self.path, encoding="utf-8") as f:
            for n, line in enumerate(self.lines, 1):
                yield line, self._read(f, n)
            if f.readline().strip():
                raise ValueError(f"{self.path}: more lines than the input; one JSON list (or null) per input line")

    def _read(self, f: Any, n: int) -> list[str]:
        raw = f.readline()
        if not raw:
            raise ValueError(f"{self.path}: {n - 1} lines, but the input has more; one JSON list (or null) per "
                             f"input line")
        try:
            value = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.path}:{n}: not JSON ({e.msg}); expected a list of target phrases or null") from None
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
            raise ValueError(f"{self.path}:{n}: expected a list of non-empty strings (target phrases) or null, got "
                             f"{raw.strip()[:80]}")
        return value

    def more_ready(self) -> bool:
        return self.lines.more_ready()


def cmd_evaluate(a: argparse.Namespace) -> int:
    from .data import read_lines
    from .evaluate import evaluate
    from .pipeline import Pivot
    from .rundir import RunDir

    src = list(read_lines(a.src, "replace"))
    refs = [list(read_lines(r, "replace")) for r in a.ref]
    for path, ref in zip(a.ref, refs, strict=True):
        if len(src) != len(ref):
            raise ValueError(f"{a.src} has {len(src)} lines but {path} has {len(ref)}")
    with _engines(a, _given(a, "decode")) as engines:
        translator = Pivot(engines) if len(engines) > 1 else engines[0]
        run = RunDir.locate(a.model[-1])[0]
        lang = a.lang or run.target_language()
        r = evaluate(translator, src, refs if len(refs) > 1 else refs[0], a.hyps or run.hypotheses(a.src.name),
                     lang=lang, tokenize=a.tokenize, ter=a.ter)
    if a.json:
        print(json.dumps(r))
    else:
        ter = f"  TER {r['ter']:.2f}" if "ter" in r else ""
        print(f"BLEU {r['bleu']:.2f}  (lowercased {r['bleu_lc']:.2f})  chrF {r['chrf']:.2f}{ter}  "
              f"{r['sentences']} sentences in {r['seconds']:.1f} s")
        print(f"  {r['signature']}")
        if r.get("confidence"):
            c = r["confidence"]
            print(f"  confidence: Pearson r {_n(c['pearson'])} with sentence chrF, ROC AUC {_n(c['roc_auc'])} for the "
                  f"{c['below_threshold']:.1%} under chrF {c['threshold']:g} ({c['calibration']})")
        print(f"  hypotheses: {r['hypotheses']}")
    return 0


def _n(x: float | None) -> str:
    """A measure as printed (None: it cannot be measured there, one class missing)."""
    return "n/a" if x is None else f"{x:.3f}"


def cmd_calibrate(a: argparse.Namespace) -> int:
    from .data import DataDir, read_lines
    from .engines.auto import load
    from .evaluate import calibrate
    from .rundir import RunDir

    run = RunDir.locate(a.model)[0]
    if a.src or a.ref:
        if not (a.src and a.ref):
            raise ValueError("--src and --ref go together: the lines to calibrate on and their references")
        fit_on = (list(read_lines(a.src, "replace")), list(read_lines(a.ref, "replace")))
        held = None
    else:
        info = run.data_info()
        if "data_dir" not in info or not DataDir(info["data_dir"]).has_split("valid"):
            raise ValueError(f"{run.path}: its data dir (data.json's data_dir) is not here; give --src and --ref")
        data = DataDir(info["data_dir"])
        fit_on = data.raw_lines("valid", "src"), data.raw_lines("valid", "tgt")
        held = (data.raw_lines("test", "src"), data.raw_lines("test", "tgt")) if data.has_split("test") else None
    engine = load(a.model, a.engine)
    try:
        cal, report = calibrate(engine, *fit_on, a.threshold, held)
    finally:
        engine.close()
    out = run.path / "calibration.json"
    cal.save(out)
    for name, what in (("fitted", "fitted on"), ("held_out", "held out")):
        if name in report:
            r = report[name]
            print(f"{what}: {r['sentences']} sentences, Pearson r {_n(r['pearson'])} with sentence chrF, ROC AUC "
                  f"{_n(r['roc_auc'])} for the {r['below_threshold']:.1%} under chrF {a.threshold:g}")
    print(f"calibration: {out}")
    return 0


def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    from .confidence import THRESHOLD

    p = _command(sub, cmd_calibrate)
    p.add_argument("--model", required=True, type=Path, help="the run dir (its calibration.json is written there)")
    p.add_argument("--engine", default="auto",
                   help="the engine whose translations are calibrated (default: %(default)s, as translate)")
    p.add_argument("--threshold", type=float, default=THRESHOLD,
                   help="sentence chrF at or above which a translation is acceptable (default %(default)s)")
    p.add_argument("--src", type=Path, help="lines to calibrate on (default: the run's validation split)")
    p.add_argument("--ref", type=Path, help="their references")


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, cmd_evaluate)
    _add_decode_flags(p, exclude=("nbest",))          # the best translation of each line is scored
    p.add_argument("--src", required=True, type=Path, help="source file (plain or .gz)")
    p.add_argument("--ref", required=True, type=Path, action="append",
                   help="raw reference file (plain or .gz); repeat for several references")
    p.add_argument("--hyps", type=Path, help="where to write the hypotheses (default RUN_DIR/hyps/SRC.hyp)")
    p.add_argument("--tokenize", help="sacreBLEU tokenizer for BLEU (13a, zh, ja-mecab, ko-mecab, char, intl, "
                   "flores200, none; default: chosen from the target language)")
    p.add_argument("--lang", help="target language code for choosing the tokenizer (default: the run's)")
    p.add_argument("--ter", action="store_true", help="also compute TER")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_processes_flag(p)


# --- demo --------------------------------------------------------------------------------------------------------


def cmd_demo(a: argparse.Namespace) -> int:
    from .demo import run_demo

    if a.updates < 0 or a.minutes < 0:
        raise ValueError("--updates and --minutes cannot be negative")

    run_demo(a.out, a.minutes or (0.0 if a.updates else 15.0), a.src, a.tgt, a.set, a.updates)
    return 0


def _add_demo(sub: argparse._SubParsersAction) -> None:
    from .corpora import CORPORA

    langs = CORPORA["multi30k"].langs
    from .demo import UPDATES

    p = _command(sub, cmd_demo)
    p.add_argument("--updates", type=int, default=UPDATES,
                   help="train this many updates, in fp32, whatever the machine's speed (default %(default)s: about "
                        "15 minutes on a 2-core AVX2 CPU); 0: train for --minutes")
    p.add_argument("--minutes", type=float, default=0.0,
                   help="a cap on the training time (with --updates 0: the training time, 15 if not given)")
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="where data and run go (default %(default)s)")
    p.add_argument("--src", default=langs[0], choices=langs)
    p.add_argument("--tgt", default=langs[1], choices=langs)
    p.add_argument("--set", nargs="+", action="extend", metavar="KEY=VALUE", help="override recipe settings (repeatable)")


# --- serve ---------------------------------------------------------------------------------------------------------


def cmd_serve(a: argparse.Namespace) -> int:
    """JSON API (POST /translate, /attention; GET /health, /info, /metrics), LibreTranslate's API (POST /translate
    with q, /detect; GET /languages, /frontend/settings) and a web page at /. With several --model, each request is
    routed by its source and target languages. The lines of concurrent requests are decoded together, joining the
    running batch between decoding steps. SIGTERM or Ctrl-C: requests in flight are answered, then it exits."""
    from . import __version__
    from .runtime import cpu_workers
    from .serving.pairs import Models, Served
    from .serving.serve import ServeConfig, serve

    settings = _given(a, "serve")
    key = settings.pop("api_key", None) or os.environ.get("AIAYN_API_KEY") or None
    cfg = ServeConfig(**settings, api_key=key)
    # the server's decoding threads are its parallelism (--workers): each decodes on its own thread (aiayn's engine);
    # CTranslate2 decodes that many batches side by side
    workers = cfg.workers if a.engine != "torch" else 1
    # aiayn's engine on a CPU: in worker processes, so that this process needs no PyTorch (auto: when it is needed)
    processes = cpu_workers(cfg.workers) if a.engine in ("torch", "auto") and cfg.processes else 0
    models = Models.load(a.model, a.engine, cfg.memory_budget > 0, processes, **_given(a, "decode"), workers=workers)
    if cfg.fallback:
        models.add_fallback(Served.load(cfg.fallback, a.engine, True, processes, workers=workers), cfg.min_confidence)
    serve(models, cfg, {"version": __version__})
    return 0


def _add_serve(sub: argparse._SubParsersAction) -> None:
    from .serving.serve import ServeConfig

    p = _command(sub, cmd_serve)
    # the server's own --workers and --max-batch-tokens decide what decode.workers and decode.batch_tokens do elsewhere
    _add_decode_flags(p, exclude=("workers", "batch_tokens"), several="pairs")
    _add_setting_flags(p, ServeConfig, "serve",
                       default=lambda f: "$AIAYN_API_KEY if set" if f.name == "api_key" else f"{f.default}")


# --- export --------------------------------------------------------------------------------------------------------


def cmd_export(a: argparse.Namespace) -> int:
    """Write a run's model in another engine's format."""
    from .data import read_lines
    from .interop.export import REQUIRED_IDENTICAL, check, export

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
    if r["length_norm"] != "length":
        print(f"(beam: this run ranks hypotheses with decode.length_norm={r['length_norm']}, the export by "
              "log p / |Y| ** lenpen; set decode.length_norm=length for the same beam search)")
    if r["quantization"] != "float32":
        print(f"(the export's weights are {r['quantization']}: identity is expected of float32 exports only)")
    if not r["passed"]:
        print(f"aiayn export: check failed: {100 * r['greedy']['identical_share']:.1f}% of greedy translations are "
              f"identical (at least {100 * REQUIRED_IDENTICAL:g}% expected)", file=sys.stderr)
        return 1
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    from .interop.export import CT2_QUANTIZATIONS, FORMATS, REQUIRED_IDENTICAL

    p = _command(sub, cmd_export,
                 description=f"{cmd_export.__doc__} --check FILE translates FILE with aiayn and with the export (greedy "
                 f"and beam 4, fp32) and fails when fewer than {100 * REQUIRED_IDENTICAL:g}% of the greedy "
                 "translations are identical.")
    p.add_argument("--model", required=True, type=Path, help="a run dir (or a checkpoint dir inside one)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--out", required=True, type=Path, help="the directory to write")
    p.add_argument("--quantization", choices=CT2_QUANTIZATIONS, help="CTranslate2 weight type (default float32)")
    p.add_argument("--check", type=Path, help="source sentences to translate with both and compare")
    p.add_argument("--check-ref", type=Path, help="references for --check: BLEU of both against them")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out")


# --- import -------------------------------------------------------------------------------------------------------


def cmd_import(a: argparse.Namespace) -> int:
    """Read a Hugging Face MarianMTModel with its MarianTokenizer (a local directory, or a hub name such as
    Helsinki-NLP/opus-mt-de-en) into a run directory that translate, evaluate, serve, export and train --init-from
    use."""
    from .engines.torch import load_trained
    from .interop.pretrained import import_model

    out = import_model(a.source, a.out, a.format, a.src, a.tgt, a.force)
    t = load_trained(out)
    m = t.config.model
    langs = t.run.languages()
    print(f"imported {a.source} into {out}: {sum(p.numel() for p in t.model.parameters()) / 1e6:.1f}M parameters, "
          f"{m.encoder_layers}+{m.decoder_layers} layers, d_model {m.d_model}, {m.activation}, vocabulary {m.tgt_vocab_size}"
          + (f", {langs[0]}->{langs[1]}" if langs else ""))
    return 0


def _add_import(sub: argparse._SubParsersAction) -> None:
    from .interop.pretrained import FORMATS

    p = _command(sub, cmd_import)
    p.add_argument("source", help="a model directory or a Hugging Face hub name")
    p.add_argument("--from", dest="format", default="huggingface", choices=FORMATS, help="its format")
    p.add_argument("--out", required=True, type=Path, help="the run directory to write")
    p.add_argument("--src", help="source language code (default: the tokenizer's, or the opus-mt-SRC-TGT name's)")
    p.add_argument("--tgt", help="target language code (chooses sacreBLEU's tokenizer)")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out")


# --- distill ------------------------------------------------------------------------------------------------------


def cmd_distill(a: argparse.Namespace) -> int:
    """Sequence-level knowledge distillation: translate every training source line of --data with the --teacher run
    (its beam; int8 where the CPU has no fast bf16) and write a data dir whose training targets are the teacher's
    outputs, whose tokenizer is the teacher's, and whose validation and test splits keep their references; train a
    student on it with `aiayn train`. Re-running resumes after a kill; under torchrun each process translates its own
    shards."""
    from .data import DataDir
    from .distill import DistillOptions, distill
    from .distributed import Distributed

    out = distill(a.teacher, a.data, a.out, DistillOptions(**_given(a, "distill")), force=a.force,
                  **_given(a, "decode"))
    if Distributed.from_env().main:
        for line in DataDir(out).summary():
            log.info("%s", line)
    return 0


def _add_distill(sub: argparse._SubParsersAction) -> None:
    from .config import DecodeConfig
    from .distill import DistillOptions

    p = _command(sub, cmd_distill)
    p.add_argument("--teacher", required=True, type=Path, help="the teacher's run dir (or a checkpoint dir in one)")
    p.add_argument("--data", required=True, type=Path, help="the data dir whose training sources are translated")
    p.add_argument("--out", required=True, type=Path, help="the distilled data dir to write")
    p.add_argument("--force", action="store_true", help="start again, discarding the shards of an earlier run")
    _add_setting_flags(p, DistillOptions, "distill")
    _add_setting_flags(p, DecodeConfig, "decode", exclude=("nbest", "sampling", "temperature", "top_k", "top_p"),
                       default=lambda f: "int8 on a CPU without fast bf16, else auto" if f.name == "precision" else
                       f"the teacher's decode.{f.name}")


# --- shortlist ----------------------------------------------------------------------------------------------------


def cmd_shortlist(a: argparse.Namespace) -> int:
    """Build a run's lexical shortlist from a data dir's training pairs (made with the run's tokenizer): for each
    source token the --k target tokens most often aligned to it (eflomal) or co-occurring with it (cooc), plus the
    --frequent most frequent target tokens. It is saved in the run dir; `translate --shortlist` (and a server request's
    "shortlist": true) decodes over a batch's candidates, and `export --format ctranslate2` writes it as the vocabulary
    map (use_vmap)."""
    from .data import DataDir, DataError
    from .lexicon import build
    from .rundir import RunDir

    run = RunDir.locate(a.model)[0]
    d = DataDir(a.data)
    if d.vocab().describe() != run.vocab().describe():
        raise DataError(f"{a.data} was not made with {run}'s tokenizer; prepare it with --vocab-from {run}")
    sl = build(d.path, run.config().model, a.k, a.frequent, a.method, a.max_pairs)
    path = sl.save(run.path)
    c = sl.meta["valid"]
    print(f"shortlist of {run}: {a.method}, k {a.k}, {a.frequent} frequent, from {sl.meta['pairs']} pairs in "
          f"{sl.meta['seconds']} s -> {path}" + (f"; validation references: {100 * c['tokens']:.1f}% of tokens, "
          f"{100 * c['sentences']:.1f}% of sentences covered, {c['candidates_per_sentence']:g} candidates per "
          f"sentence (of {run.config().model.tgt_vocab_size})" if c else ""))
    return 0


def _add_shortlist(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, cmd_shortlist)
    p.add_argument("--model", required=True, type=Path, help="the run dir to build it for (it is saved there)")
    p.add_argument("--data", required=True, type=Path, help="a data dir made with the run's tokenizer (its training "
                   "pairs are aligned)")
    p.add_argument("--k", type=int, default=50, help="candidates per source token (default %(default)s)")
    p.add_argument("--frequent", type=int, default=100, help="the most frequent target tokens, always candidates "
                   "(default %(default)s)")
    p.add_argument("--method", choices=("cooc", "eflomal"), default="cooc",
                   help="cooc: co-occurrence in sentence pairs, Dice's coefficient; eflomal: word alignments by the "
                   "eflomal aligner (pip install 'aiayn[align]') (default %(default)s: as good on Multi30k, about eight "
                   "times faster to build, docs/results.md)")
    p.add_argument("--max-pairs", type=int, default=0, help="use the first N training pairs only (0: all)")


# --- plot --------------------------------------------------------------------------------------------------------


def cmd_plot(a: argparse.Namespace) -> int:
    from .plots import all_plots

    for path in all_plots(a.model, a.out, a.sentence):
        log.info("wrote %s", path)
    return 0


def _add_plot(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, cmd_plot)
    p.add_argument("--model", type=Path, help="a run dir (for training curves and attention maps)")
    p.add_argument("--out", type=Path, default=Path("plots"), help="output directory (default %(default)s)")
    p.add_argument("--sentence", default="Ein Mann fährt mit dem Fahrrad über eine Brücke.",
                   help="source sentence for the attention maps")


# --- main -------------------------------------------------------------------------------------------------------


def build_parser(only: str | None = "") -> argparse.ArgumentParser:
    """The command line's parser: every command's arguments (the default), or only command ``only``'s (None: none),
    the others by their names and help. A command's arguments can need the module that runs it (its formats, its
    defaults), and importing those costs seconds (PyTorch): ``aiayn translate --engine ctranslate2`` pays for none."""
    parser = argparse.ArgumentParser(prog="aiayn", description="The Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"aiayn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help in COMMANDS.items():
        if only == "" or only == name:
            ADDERS[name](sub)
        else:
            sub.add_parser(name, help=help, add_help=False)
    return parser


ADDERS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "prepare": _add_prepare, "align": _add_align, "train": _add_train, "average": _add_average,
    "translate": _add_translate, "evaluate": _add_evaluate, "calibrate": _add_calibrate, "demo": _add_demo,
    "serve": _add_serve,
    "export": _add_export, "import": _add_import, "distill": _add_distill, "shortlist": _add_shortlist,
    "plot": _add_plot,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((x for x in argv if not x.startswith("-")), None)      # (the options before it take no value)
    args = build_parser(command if command in COMMANDS else None).parse_args(argv)
    _setup_logging(args.verbose)
    if args.command not in ("train", "demo"):   # those tune the process with their own `threads` setting
        from .runtime import keep_freed_memory

        keep_freed_memory()
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("aiayn: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError) as e:       # bad input, missing or unreadable files, a full disk, ...
        if args.verbose:
            raise
        print(f"aiayn {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
