"""Many languages in one model (Johnson et al., 2017, "Google's Multilingual Neural Machine Translation System"):
one encoder-decoder, one joint vocabulary, and a tag that names the target language.

The tag ``<2xx>`` is one piece of the joint SentencePiece vocabulary (a user-defined symbol, never split). Where it
goes is the data's ``position``:

- ``target`` (the default; fairseq's ``--decoder-langtok``, M2M-100, NLLB): the tag is the first token of the target;
  every search forces it (``first``: CTranslate2's ``target_prefix``, Argos's package ``target_prefix``) and drops it
  from the output (:class:`Directed`).
- ``source`` (Johnson et al., Sockeye's ``<2en>``, Marian/OPUS-MT's ``>>fra<<``): the tag is the first token of the
  source, ``<2fr> Ein Mann fährt ...``; decoding is the bilingual model's (:meth:`Multilingual.source_ids`).

docs/multilingual.md has their measured comparison on Multi30k (the target side learned faster in 11 of 12
directions), why the default is the target, and what an Argos package needs.

A multilingual data directory (:func:`prepare_multilingual`) is a data directory whose two sides are named ``src``
and ``tgt`` (its files: ``train.src.bin``, ``valid.tgt`` ...): every direction's pairs one after another, the
source of each tagged. Its manifest's ``multilingual`` record (:class:`Multilingual`) names the languages, the
directions, the tag position, the sampling temperature and where each direction's lines lie in each evaluation
split, so that validation scores each direction apart (train.validate) and the best checkpoint is chosen on their
mean.

Directions are sampled by temperature (fairseq's ``--sampling-temperature``; Arivazhagan et al., 2019): direction
d, with n_d training pairs of N in all, gets p_d ∝ (n_d / N) ** (1 / T) of an epoch of N pairs; T = 1 keeps the
corpus as it is, larger T gives small directions more (repeated) pairs and large ones fewer.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Multilingual, Position
from .datadir import DataError, Source, find_source, read_pairs

log = logging.getLogger(__name__)

SIDES = ("src", "tgt")              # the "languages" of a multilingual data directory's two sides


def tag(lang: str) -> str:
    """The piece that names ``lang`` as the target in a model trained here: ``<2fr>`` (config.Multilingual.tag: an
    imported model's may be its own)."""
    return f"<2{lang}>"


def parse_langs(spec: str) -> tuple[str, ...]:
    """``de,en,fr,cs`` -> ('de', 'en', 'fr', 'cs'); at least two distinct codes of letters (and -)."""
    langs = tuple(x.strip() for x in spec.split(",") if x.strip())
    for lang in langs:
        if not lang.replace("-", "").isalnum() or lang in SIDES:
            raise ValueError(f"--langs: {lang!r} is not a language code (expected codes such as de,en,fr)")
    if len(set(langs)) != len(langs) or len(langs) < 2:
        raise ValueError(f"--langs {spec!r}: give at least two distinct language codes, e.g. de,en,fr,cs")
    return langs


def parse_directions(spec: str, langs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """Which directions to train: ``all`` (every ordered pair of ``langs``), one language code (to and from it
    only: the others are then zero-shot), or a list ``de-en,en-fr``."""
    every = tuple((a, b) for a in langs for b in langs if a != b)
    spec = spec.strip()
    if spec == "all":
        return every
    if spec in langs:
        return tuple((a, b) for a, b in every if spec in (a, b))
    out = []
    for item in spec.split(","):
        a, sep, b = item.strip().partition("-")
        if not sep or (a, b) not in every:
            raise ValueError(f"--directions: {item.strip()!r} is not SRC-TGT of two of --langs {','.join(langs)} "
                             "(or give 'all', or one language: to and from it)")
        out.append((a, b))
    return tuple(dict.fromkeys(out))


def sampled_sizes(sizes: dict[str, int], temperature: float) -> dict[str, int]:
    """Each direction's pairs in one epoch of as many pairs as the corpus has, sampled by ``temperature``."""
    if temperature <= 0:
        raise ValueError(f"--sampling-temperature {temperature}: expected a number > 0 (1: as the corpus is)")
    total = sum(sizes.values())
    weights = {d: (n / total) ** (1.0 / temperature) for d, n in sizes.items()}
    norm = sum(weights.values())
    return {d: max(1, round(total * w / norm)) for d, w in weights.items()}


# --- preparing a multilingual data directory ---------------------------------------------------------------------------


def direction_source(prefix: str | Path, src: str, tgt: str) -> Source:
    """One direction's line-aligned files: the pair's own (fairseq's ``PREFIX.de-en.de`` / ``PREFIX.de-en.en``, either
    order of the pair), else the multi-parallel corpus's ``PREFIX.de`` / ``PREFIX.en`` (plain or .gz)."""
    p = Path(prefix)
    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        try:
            return find_source(p.parent / f"{p.name}.{pair}", src, tgt)
        except DataError:
            pass
    try:
        return find_source(p, src, tgt)
    except DataError:
        raise DataError(f"no files for {src}-{tgt} under {p}: expected {p}.{src} and {p}.{tgt} (a multi-parallel "
                        f"corpus) or {p}.{src}-{tgt}.{src} and {p}.{src}-{tgt}.{tgt} (plain or .gz)") from None


def _write_split(sources: dict[tuple[str, str], Source], sizes: dict[str, int] | None, position: Position,
                 out: Path, errors: str, seed: int) -> dict[str, tuple[int, int]]:
    """Write one split's directions one after another: ``out``.src / ``out``.tgt tagged (what is encoded) and, for an
    evaluation split (``sizes`` None: every line), ``out``.raw.src / .raw.tgt as they are (what is translated and
    scored); ``sizes``: the training split's sampled pairs per direction. Returns each direction's (first, end)."""
    ranges = {}
    at = 0
    files = [open(f"{out}.{x}", "w", encoding="utf-8") for x in SIDES]  # noqa: SIM115 - closed below
    if sizes is None:
        files += [open(f"{out}.raw.{x}", "w", encoding="utf-8") for x in SIDES]  # noqa: SIM115
    try:
        for (a, b), source in sources.items():
            name = f"{a}-{b}"
            chosen: Iterator[tuple[str, str]] = read_pairs(source, errors)
            if sizes is not None and sizes[name] != (n := sum(1 for _ in read_pairs(source, errors))):
                lines = list(chosen)
                rng = np.random.default_rng([seed, *name.encode()])
                want = sizes[name]
                order = np.concatenate([np.arange(n)] * (want // n) +
                                       [np.sort(rng.choice(n, size=want % n, replace=False))])
                chosen = (lines[int(i)] for i in order)
            count = 0
            for s, t in chosen:
                tagged = (f"{tag(b)} {s}", t) if position == "source" else (s, f"{tag(b)} {t}")
                for f, line in zip(files, (*tagged, s, t), strict=False):
                    f.write(line + "\n")
                count += 1
            ranges[name] = (at, at + count)
            at += count
    finally:
        for f in files:
            f.close()
    return ranges


def prepare_multilingual(splits: dict[str, str | Path], langs: Sequence[str], directions: Sequence[tuple[str, str]],
                         out: str | Path, opts: Any, temperature: float = 1.0, position: Position = "target",
                         force: bool = False, seed: int = 1) -> Path:
    """One data directory for every direction: ``splits`` maps train/valid (and test) to a file PREFIX (see
    :func:`direction_source`); ``opts``: prepare.PrepareOptions (its languages are set here). The evaluation splits
    hold every ordered pair of ``langs`` that has files (the zero-shot ones too: they are measured), the training
    split only ``directions``."""
    from .prepare import prepare

    if position not in ("source", "target"):
        raise ValueError(f"--tag-position {position!r}: expected 'source' or 'target'")
    if opts.tokenizers or opts.vocab != "joint":
        raise ValueError("a multilingual model has one joint vocabulary trained with its language tags: leave out "
                         "--vocab separate, --spm-model, --hf-tokenizer and --vocab-from")
    if "train" not in splits or "valid" not in splits:
        raise DataError("prepare needs --train and --valid")
    train = {d: direction_source(splits["train"], *d) for d in directions}
    every = [(a, b) for a in langs for b in langs if a != b]
    evals: dict[str, dict[tuple[str, str], Source]] = {}
    for split in ("valid", "test"):
        if split in splits:
            found = {}
            for d in every:
                try:
                    found[d] = direction_source(splits[split], *d)
                except DataError:
                    if d in directions:
                        raise
            evals[split] = found
    counts = {f"{a}-{b}": sum(1 for _ in read_pairs(s, opts.encoding_errors)) for (a, b), s in train.items()}
    sizes = sampled_sizes(counts, temperature)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.text-") as tmp:
        stem = Path(tmp)
        ranges = {"train": _write_split(train, sizes, position, stem / "train", opts.encoding_errors, seed)}
        for split, found in evals.items():
            ranges[split] = _write_split(found, None, position, stem / split, opts.encoding_errors, seed)
        info = Multilingual(tuple(langs), tuple(directions), position, temperature,
                            {s: r for s, r in ranges.items() if s != "train"}, sizes)
        sources = {s: Source(stem / f"{s}.src", stem / f"{s}.tgt") for s in ranges}
        raw = {s: Source(stem / f"{s}.raw.src", stem / f"{s}.raw.tgt") for s in evals}
        o = replace(opts, src=SIDES[0], tgt=SIDES[1], symbols=tuple(tag(x) for x in langs))
        return prepare(sources, out, o, force=force, extra={"multilingual": info.to_dict()}, raw=raw)



# --- translating: one direction of a multilingual engine -------------------------------------------------------------


class Directed:
    """One direction of a multilingual model's engine (engines.Engine), as a bilingual engine is: its ``languages``
    are (src, tgt); the target's tag goes first in each line's source ids (:meth:`encode`, the tag on the source) or
    is the forced first token of each output (``first``, given to the engine's ``decode_lines`` and ``admit``: the
    tag on the target). Everything else is the engine's own but its calibration (the direction's own, where ``aiayn
    calibrate`` fitted one), so several directions share one model in memory (the server keeps one view per
    direction). Word alignments and attention maps would count the tag as a word: they are not offered."""

    def __init__(self, engine: Any, multi: Multilingual, src: str, tgt: str) -> None:
        multi.check(src, tgt)
        tag_id = engine.vocab.src.piece_id(multi.tag(tgt)) if multi.position == "source" else \
            engine.vocab.tgt.piece_id(multi.tag(tgt))
        if tag_id is None:
            raise ValueError(f"the model's vocabulary has no piece {multi.tag(tgt)}: it was not prepared with --langs")
        caps = replace(engine.capabilities, alignments=False, attention=False, processes=False)
        self.__dict__.update(engine_=engine, multilingual=multi, languages=(src, tgt), tag_id=tag_id,
                             first=tag_id if multi.position == "target" else None, capabilities=caps,
                             calibration=engine.calibration.for_direction(f"{src}-{tgt}"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["engine_"], name)

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Each line's source ids, with the target's tag first where the tag is the source's (a blank line stays
        blank)."""
        multi, tgt, tag_id = self.multilingual, self.languages[1], self.tag_id
        return [multi.source_ids(ids, tgt, tag_id) for ids in self.engine_.encode(lines)]

    def decode_lines(self, ids: list[list[int]], decode: Any, cons: Any, stop: Any = None,
                     first: int | None = None) -> Any:
        """The engine's, each output started by this direction's tag where the tag is the target's."""
        return self.engine_.decode_lines(ids, decode, cons, stop, self.first)

    def admit(self, search: Any, ids: list[list[int]], keys: list[Any], decode: Any, cons: Any,
              first: int | None = None) -> None:
        """The engine's (a server's step-level batcher), each output started by the tag where it is the target's."""
        self.engine_.admit(search, ids, keys, decode, cons, self.first)

    def hypotheses(self, ids: Sequence[Sequence[int]], decode: Any, cons: Any, stop: Any = None,
                   first: int | None = None) -> Any:
        """The engine's, each output started by the tag where it is the target's."""
        return self.engine_.hypotheses(ids, decode, cons, stop, self.first)

    def translate_hypotheses(self, lines: Sequence[str], decode: Any = None, constraints: Any = None,
                             **overrides: Any) -> Any:
        """engines.base.EngineBase's, through this direction's :meth:`encode` and :meth:`hypotheses`."""
        engine = self.engine_
        decode = engine.settings(decode, **overrides)
        return self.hypotheses(self.encode(lines), decode, engine.constraints(lines, constraints, decode))


def for_direction(engine: Any, src: str | None, tgt: str | None) -> Any:
    """The engine that translates ``src`` into ``tgt``: one direction of a multilingual engine (:class:`Directed`;
    both languages named), or a bilingual engine as it is, refused by name if it was trained on another pair."""
    multi = None if isinstance(engine, Directed) else getattr(engine, "multilingual", None)
    check_direction(engine.languages, multi, src, tgt)
    if multi is None or src is None or tgt is None:     # (check_direction: both named where multi is given)
        return engine
    return Directed(engine, multi, src, tgt)


def check_direction(languages: tuple[str, str] | None, multi: Multilingual | None, src: str | None,
                    tgt: str | None) -> None:
    """ValueError naming what a model knows unless it translates ``src`` into ``tgt`` (None: not named): a bilingual
    model of the pair ``languages`` (None: not recorded), or a multilingual one, which needs both named. Read from a
    run's description, before its engine starts (``aiayn translate``), and from the engine (:func:`for_direction`)."""
    if multi is None:                           # (one direction already: an Argos package of one, say)
        if languages is not None and ((src and src != languages[0]) or (tgt and tgt != languages[1])):
            raise ValueError(f"this model translates {languages[0]} into {languages[1]}, not "
                             f"{src or languages[0]} into {tgt or languages[1]}")
        return
    multi.check(src, tgt)
    if src is None or tgt is None:
        raise ValueError(f"this is a multilingual model of {', '.join(multi.langs)}: name the source language too "
                         "(--source)")
