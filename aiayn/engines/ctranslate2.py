"""CTranslate2, the C++ engine, as one of aiayn's engines: :class:`CTranslate2Engine`, the one CTranslate2 class,
on a run's conversion (auto.ctranslate2: made by export.py on first use and cached in the run dir) or on an export of
its own (``aiayn export``, :meth:`CTranslate2Engine.from_export`), decoding with aiayn's tokenizer, length rule
and pipeline; and :class:`AutoEngine`, ``--engine auto``'s: CTranslate2 with aiayn's own engine beside it for what
CTranslate2 cannot do (engines/auto.py loads either).

This module needs no PyTorch: with CTranslate2 installed and the conversion made, ``aiayn translate`` starts and
translates without importing it (docs/performance.md: a first translation).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import precision as precisions
from ..config import DecodeConfig, ModelConfig, Multilingual, Norms, Precision
from ..data.tokenizer import Vocab
from ..decoding.hypotheses import Hypothesis, Stopped, for_run, max_length
from ..runtime import DeviceName, cores, cpu_workers
from .base import About, Capabilities, EngineBase, decode_batches, with_fixed

__all__ = ["OPTIONS", "AutoEngine", "CTranslate2Engine", "ctranslate2_limited"]
log = logging.getLogger(__name__)

INFO = "aiayn-export.json"          # in every export (export.py): where it came from, its length rule and length penalty
EXPORT_SPM = "spm.model"            # in a CTranslate2 export: the run's (source) SentencePiece model
EXPORT_TGT_SPM = "spm.target.model"  # ... and the target's, when the sides have one each (imported Marian models)



def device_of(name: str) -> DeviceName:
    """``decode.device`` for CTranslate2, as runtime.resolve_device reads it for PyTorch (auto: CUDA if CTranslate2
    sees a GPU, else the CPU), asking CTranslate2 rather than PyTorch."""
    import ctranslate2

    kind, _, index = name.partition(":")
    if name == "auto":
        return DeviceName("cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise ValueError(f"device={name!r}: CTranslate2 decodes on cpu, cuda or cuda:N")
    if kind == "cuda" and ctranslate2.get_cuda_device_count() <= int(index or 0):
        raise ValueError(f"device={name!r} but CTranslate2 sees no such CUDA device here; use device=cpu or auto")
    return DeviceName(kind, int(index) if index else None)


def precision_of(name: str, device: DeviceName) -> str:
    """``decode.precision`` resolved as precision.resolve does, but by the compute types CTranslate2 has on
    ``device`` (it lists bfloat16 only where it runs it efficiently): auto is bf16 where it has it, else fp16 on a GPU
    and fp32 on a CPU; bf16 where it has not is an error naming what it has."""
    import ctranslate2

    precisions.check(name)
    if name in ("auto", "bf16"):
        types = ctranslate2.get_supported_compute_types(device.type, device.index or 0)
        if "bfloat16" in types:
            return "bf16"
        if name == "bf16":
            raise ValueError(f"precision=bf16: CTranslate2 {ctranslate2.__version__} has no efficient bfloat16 on "
                             f"this {device.type.upper()} (it has {', '.join(sorted(types))}); use fp32 or int8")
        return "fp16" if device.type == "cuda" else "fp32"
    return precisions.resolve(name, device)


# each DecodeConfig field: the CTranslate2 option it becomes (a test holds that every field is listed)
OPTIONS = {"beam": "beam_size", "lenpen": "length_penalty", "length_norm": "length_penalty (length only)",
           "max_len_a": "max_decoding_length", "max_len_b": "max_decoding_length", "min_len": "min_decoding_length",
           "nbest": "num_hypotheses", "batch_tokens": "max_batch_size (tokens)", "workers": "inter_threads",
           "device": "device", "precision": "compute_type", "shortlist": "use_vmap",
           "compile": "(aiayn's engine: CTranslate2's own step is compiled C++)",
           "keep_plain": "(constraints: refused by this engine)", "sampling": "sampling_topk",
           "no_repeat_ngram": "no_repeat_ngram_size",
           "temperature": "sampling_temperature", "top_k": "sampling_topk", "top_p": "sampling_topp"}
COMPUTE = {"fp32": "float32", "int8": "int8", "bf16": "bfloat16", "fp16": "float16"}


def ctranslate2_refuses(decode: DecodeConfig) -> None:
    """ValueError naming a setting CTranslate2 cannot decode with."""
    if decode.length_norm != "length":
        raise ValueError(f"length_norm={decode.length_norm!r}: CTranslate2 divides a hypothesis' log-probability by "
                         "|Y| ** lenpen only (length_norm: length); use --engine torch for gnmt")
    if decode.sampling and decode.beam != 1:
        raise ValueError(f"sampling with beam={decode.beam}: CTranslate2 samples with beam 1 only")


class CTranslate2Engine(EngineBase):
    """A run's model on CTranslate2 (engine.Engine; it decodes whole batches, without constraints or attention): its
    tokenizer is aiayn's, so its text is produced as aiayn's is."""

    engine = "ctranslate2"
    capabilities = Capabilities()          # (each one's own, from its model: __init__)

    def __init__(self, out: Path, vocab: Vocab, cfg: ModelConfig, decode: DecodeConfig, threads: int = 0,
                 about: About | None = None) -> None:
        """``out``: a CTranslate2 model directory of this model; ``threads``: CTranslate2's intra-op threads per
        translator (0: the process's, shared out among the ``decode.workers``)."""
        import ctranslate2

        super().__init__(about)
        from ..decoding.align import method

        self.decode, self.vocab, self.cfg, self.path = decode, vocab, cfg, out
        # word alignments (and so HTML) from return_attention: the rows where each target piece is the output
        self.capabilities = Capabilities(alignments=method(cfg)[1] == 0)
        self.device = device_of(decode.device)
        self.precision = precision_of(decode.precision, self.device)
        # batches decoded side by side, as aiayn's (runtime.resolve_workers)
        self.workers = cpu_workers(decode.workers) if self.device.type == "cpu" else decode.workers or 1
        self.translator = ctranslate2.Translator(
            str(out), device=self.device.type, device_index=self.device.index or 0,
            compute_type=COMPUTE[self.precision], inter_threads=self.workers,
            intra_threads=threads or max(1, cores() // self.workers))
        self.ids = {vocab.tgt.piece(i): i for i in range(vocab.tgt.vocab_size)}
        info = json.loads((out / INFO).read_text()) if (out / INFO).is_file() else {}
        self.parameters: int = int(info.get("parameters", 0))    # the model's (0: not recorded, auto.ctranslate2)

    @classmethod
    def from_export(cls, out: str | Path, precision: Precision = "fp32", workers: int = 1, threads: int = 0,
                    languages: tuple[str, str] | None = None, **settings: Any) -> CTranslate2Engine:
        """A CTranslate2 export on its own (``aiayn export --format ctranslate2``): its tokenizer files, and the
        beam, length rule, length penalty and min_len the run decoded with (recorded in it); ``precision``: the compute
        type (int8 on an int8 export); ``languages``: its pair, where the export does not record it (an Argos
        package's metadata names it); ``settings``: any other DecodeConfig field."""
        out = Path(out)
        info = json.loads((out / INFO).read_text())
        tgt = out / EXPORT_TGT_SPM
        vocab = Vocab.from_files(out / EXPORT_SPM, tgt if tgt.is_file() else None)
        cfg = ModelConfig(**info["model"]) if "model" in info else ModelConfig(max_positions=info["max_positions"])
        decode = DecodeConfig(beam=int(info.get("beam", DecodeConfig.beam)), lenpen=info["lenpen"],
                              length_norm="length",                         # (CTranslate2's: log p / |Y| ** lenpen)
                              max_len_a=info["max_len_a"], max_len_b=info["max_len_b"], min_len=info.get("min_len", 0),
                              device="cpu", precision=precision, workers=workers).replace(**settings)
        ctranslate2_refuses(decode)
        langs = languages or info.get("languages")
        about = About((str(langs[0]), str(langs[1])) if isinstance(langs, (list, tuple)) and len(langs) == 2 else None,
                      Norms.from_dict(info.get("norms")) or Norms(),
                      for_run(out),                     # (export copies the run's calibration.json)
                      Multilingual.from_dict(info["multilingual"]) if info.get("multilingual") else None)
        return cls(out, vocab, cfg, decode, threads, about)

    def settings(self, decode: DecodeConfig | None = None, **overrides: object) -> DecodeConfig:
        decode = with_fixed(self.decode, decode, overrides, ("device", "precision", "workers"))
        ctranslate2_refuses(decode)
        return decode

    def memory_bytes(self) -> int:
        return (self.path / "model.bin").stat().st_size

    def model_info(self) -> tuple[dict[str, Any], int]:
        return self.cfg.to_dict(), self.parameters

    def decode_lines(self, ids: list[list[int]], decode: DecodeConfig, cons: list[Any] | None,
                     stop: Callable[[], bool] | None = None, first: int | None = None) -> list[list[Hypothesis]]:
        """engine.Engine's: each line's ``nbest`` hypotheses (no constraints: the caller refused them,
        engine.require). ``stop``: asked before each wave of lines (hypotheses.Stopped once it is true), the lines cut
        as aiayn's engine cuts its batches (base.decode_batches: shortest first), a wave one batch for each translator
        thread, each line in its place in the result: a call cannot be stopped once begun, so a large batch whose
        requests are gone stops within one wave. ``first``: CTranslate2's ``target_prefix`` of
        one token, one more step allowed for it and left out of the hypotheses."""
        if stop is None:
            return self._decode(ids, decode, first)
        out: list[list[Hypothesis]] = [[] for _ in ids]
        per_wave = decode.replace(batch_tokens=decode.batch_tokens * self.workers)     # (one batch per thread)
        for part in decode_batches(ids, self.cfg.max_positions, per_wave):
            if stop():
                raise Stopped
            for i, hyps in zip(part, self._decode([ids[i] for i in part], decode, first), strict=True):
                out[i] = hyps
        return out

    def _decode(self, ids: list[list[int]], decode: DecodeConfig, first: int | None) -> list[list[Hypothesis]]:
        """Each line's hypotheses in one ctranslate2_limited call."""
        d = decode
        piece, most = self.vocab.src.piece, self.cfg.max_positions
        # beam search keeps the runner-up beside the best (hypotheses.features): asking for it costs nothing
        wanted = max(1, d.nbest)
        asked = max(wanted, 2) if d.beam > 1 and not d.sampling else wanted
        lead = 0 if first is None else 1                # (CTranslate2 counts a target prefix in its lengths)
        options = dict(beam_size=d.beam, length_penalty=d.lenpen, min_decoding_length=d.min_len + lead,
                       num_hypotheses=asked, return_scores=True, max_batch_size=max(1, d.batch_tokens // d.beam),
                       batch_type="tokens", use_vmap=d.shortlist, no_repeat_ngram_size=d.no_repeat_ngram,
                       suppress_sequences=[[piece(self.cfg.pad_id)], [piece(self.cfg.bos_id)]],
                       # each hypothesis's attention, its word alignment without a second pass (alignments)
                       return_attention=self.capabilities.alignments)
        if d.sampling:
            options.update(sampling_topk=d.top_k, sampling_temperature=d.temperature, sampling_topp=d.top_p)
        results = ctranslate2_limited(self.translator, [[piece(t) for t in x[: most - 1]] for x in ids],
                                      lambda length: max_length(length, d.max_len_a, d.max_len_b, most) + lead,
                                      None if first is None else [piece(first)], **options)
        return [_hypotheses([[self.ids[p] for p in tokens[lead:]] for tokens in hyps], scores, att, d.lenpen, wanted,
                            lead, d.beam) for hyps, scores, att in results]

    def alignments(self, lines: Sequence[str], outputs: Sequence[Sequence[int]], source: bool = False,
                   ids: Sequence[Sequence[int]] | None = None, attention: Sequence[Any] | None = None) -> list[str]:
        """As TorchEngine.alignments, from the attention CTranslate2 returns (``return_attention``: the layer and heads
        align.method reads, written into the conversion): an output's own (``attention``: Hypothesis.attention, kept
        from its decoding), else that of the line decoded again forced to the output's tokens: the same probabilities
        as aiayn's, so the same links.

        CTranslate2's beam search returns every row of a hypothesis's attention but the first as a forced pass has it
        (the first: another line's of its batch; 633 of 1,000 lines' links differed by it,
        benchmarks/results/alignments/return-attention-20261201-0130.txt). That
        row, where the decoder has read only BOS, is the same for every output of the line: it is taken from one greedy
        step, a third of a forced pass's cost, and put in the hypothesis's attention (so that the other way's call finds
        it)."""
        import numpy as np

        from ..decoding.align import format_links, token_links, word_links

        ids = self.encode(lines) if ids is None else ids
        most, (src, tgt) = self.cfg.max_positions - 1, (self.vocab.src.piece, self.vocab.tgt.piece)
        sources = [[src(t) for t in x[:most]] for x in ids]
        prefixes = [[tgt(t) for t in o[:most]] for o in outputs]
        given = attention or [None] * len(ids)
        todo = [i for i, (x, p) in enumerate(zip(sources, prefixes, strict=True)) if x and p]
        kept = [i for i in todo if given[i] is not None and len(given[i]) >= len(prefixes[i])]
        missing = [i for i in kept if given[i][0] is None]            # (a beam search's first row)
        for i, step in zip(missing, attended(self.translator, [sources[i] for i in missing], None), strict=True):
            given[i][0] = step[0]
        again = sorted(set(todo) - set(kept))
        forced = attended(self.translator, [sources[i] for i in again], [prefixes[i] for i in again])
        rows = dict(zip(again, forced, strict=True))
        out = [""] * len(ids)
        for i in todo:
            cross = np.asarray(rows[i][: len(prefixes[i])] if i in rows else given[i][: len(prefixes[i])])
            s, p = sources[i], prefixes[i]                                    # cross: (target pieces, source pieces)
            out[i] = format_links(word_links(token_links(cross, len(s), len(p), 0, source), s, p))
        return out


class AutoEngine(EngineBase):
    """``--engine auto`` where CTranslate2 is installed (engines/auto.py chooses it): CTranslate2 decodes what it can,
    and aiayn's own engine, loaded on first need (and said so, with why), what it cannot: constraints and glossaries,
    attention maps, settings CTranslate2 refuses (length_norm gnmt, sampling with a beam), alignments where the
    model's aligning attention is not the one CTranslate2 returns. Its batches are whole (the server's WholeBatcher),
    each decoded by one engine: the server keeps constrained and plain requests in different batches."""

    engine = "ctranslate2"
    capabilities = Capabilities(constraints=True, alignments=True, attention=True)

    def __init__(self, fast: CTranslate2Engine, load_own: Callable[[], Any]) -> None:
        """``load_own``: makes aiayn's own engine on the same run and settings, the first time it is needed
        (engines/auto.py gives it: in worker processes where ``--engine torch`` would decode in them)."""
        import threading

        super().__init__(About(fast.languages, fast.norms, fast.calibration, fast.multilingual))
        self.fast, self.load_own = fast, load_own
        self.vocab, self.cfg, self.decode = fast.vocab, fast.cfg, fast.decode
        self.device, self.precision, self.workers = fast.device, fast.precision, fast.workers
        self.lock = threading.Lock()
        self.loaded: Any = None                          # aiayn's own engine, once it is needed

    def own(self, why: str) -> Any:
        """aiayn's own engine, loaded the first time something needs it (``why``: what, logged)."""
        with self.lock:
            if self.loaded is None:
                log.info("--engine auto: %s: aiayn's own engine decodes it (CTranslate2 decodes the rest)", why)
                self.loaded = self.load_own()
            return self.loaded

    def settings(self, decode: DecodeConfig | None = None, **overrides: object) -> DecodeConfig:
        return with_fixed(self.decode, decode, overrides, ("device", "precision", "workers"))

    def _needs_own(self, decode: DecodeConfig, cons: Sequence[Any] | None) -> str | None:
        if cons is not None and any(c is not None for c in cons):
            return "constraints (a glossary)"
        try:
            ctranslate2_refuses(decode)
        except ValueError as e:
            return str(e).split(":")[0]
        return None

    def decode_lines(self, ids: list[list[int]], decode: DecodeConfig, cons: list[Any] | None,
                     stop: Callable[[], bool] | None = None, first: int | None = None) -> list[list[Hypothesis]]:
        why = self._needs_own(decode, cons)
        return self.own(why).decode_lines(ids, decode, cons, stop, first) if why else \
            self.fast.decode_lines(ids, decode, None, stop, first)

    def constraints(self, lines: Sequence[str], phrases: Any, decode: DecodeConfig) -> Any:
        from .torch import line_constraints

        return line_constraints(self.vocab, self.cfg, lines, phrases, decode)

    def alignments(self, lines: Sequence[str], outputs: Sequence[Sequence[int]], source: bool = False,
                   ids: Sequence[Sequence[int]] | None = None, attention: Sequence[Any] | None = None) -> list[str]:
        if self.fast.capabilities.alignments:
            return self.fast.alignments(lines, outputs, source, ids, attention)
        return list(self.own("alignments").alignments(lines, outputs, source, ids))

    def attention(self, line: str, **overrides: Any) -> dict[str, Any]:
        return dict(self.own("attention maps").attention(line, **overrides))

    def memory_bytes(self) -> int:
        return self.fast.memory_bytes() + (self.loaded.memory_bytes() if self.loaded is not None else 0)

    def model_info(self) -> tuple[dict[str, Any], int]:
        return self.fast.model_info()

    def close(self) -> None:
        """Close aiayn's own engine if it was loaded (its worker processes end)."""
        if self.loaded is not None:
            self.loaded.close()


def attended(translator: Any, sources: list[list[str]], prefixes: list[list[str]] | None) -> list[Any]:
    """Each line's attention (rows: target pieces) from ``translator`` decoding it greedily forced to its prefix, to
    its end (None: one step). Batches of 64 lines of like length, each decoding no further than its longest prefix,
    all asked at once (asynchronous) so that each of the translator's threads takes one: 1.18 s against 2.62 s for 400
    lines asked a batch at a time in their order, here, the same attention."""
    order = sorted(range(len(sources)), key=lambda k: len(prefixes[k]) if prefixes else len(sources[k]))
    pending = [(part, translator.translate_batch(
        [sources[k] for k in part], target_prefix=None if prefixes is None else [prefixes[k] for k in part],
        return_attention=True, beam_size=1, min_decoding_length=0, asynchronous=True,
        max_decoding_length=1 if prefixes is None else max(len(prefixes[k]) for k in part) + 1))
        for part in (order[start:start + 64] for start in range(0, len(order), 64))]
    out: list[Any] = [None] * len(sources)
    for part, results in pending:
        for k, r in zip(part, results, strict=True):
            out[k] = r.result().attention[0]
    return out


BUCKET = 16     # source lengths rounded up to a multiple of this give CTranslate2 calls' length limits (ctranslate2_limited)


def ctranslate2_limited(translator: Any, batch: Sequence[Sequence[str]], limit: Callable[[int], int],
                        prefix: list[str] | None = None,
                        **options: Any) -> list[tuple[list[list[str]], list[float], list[Any]]]:
    """(hypotheses, scores, attention) of each line of ``batch`` (source pieces) from CTranslate2's
    ``translate_batch``, under aiayn's length limit ``limit(its length)``, though CTranslate2 takes one limit per call;
    ``prefix``: every line's ``target_prefix`` (its hypotheses start with it); attention: each hypothesis's, where
    ``return_attention`` asked for it (else empty).

    One call per exact limit made batches of a line or two under a server's load (0.62x the throughput with two
    callers, docs/deploy.md). So lines are grouped by the limit of their length rounded up to a multiple of BUCKET
    (a few calls of many lines, submitted at once so that ``inter_threads`` decode them side by side), and a line is
    decoded again under its own limit if its search went on to within a token of it. A longer limit changes nothing
    for a search that ended before its own limit, and the hypotheses show when it ended: CTranslate2's beam search
    stops a line at the step its ``beam_size``-th hypothesis ends, and asked for ``beam_size`` hypotheses it returns
    one of those that ended then (greedy search: its one). With no length penalty CTranslate2 stops as soon as the
    best beam ends, which its hypotheses do not show: then each exact limit gets its own call."""
    beam, n = options.get("beam_size", 1), options.pop("num_hypotheses", 1)
    exact = beam > 1 and not options.get("length_penalty")
    results: list[Any] = [None] * len(batch)
    options["num_hypotheses"] = n if exact else max(n, beam)       # (n > beam: samples, each shows its own end)

    shortest = options.pop("min_decoding_length", None)

    def at_most(cap: int) -> dict[str, Any]:
        # the limit wins over min_len, as in aiayn's search (CTranslate2 refuses a minimum above the maximum)
        return {**options, **({} if shortest is None else {"min_decoding_length": min(shortest, cap)})}

    def run(groups: dict[int, list[int]]) -> None:
        pending = {cap: translator.translate_batch([list(batch[i]) for i in idx], max_decoding_length=cap,
                                                   target_prefix=None if prefix is None else [prefix] * len(idx),
                                                   asynchronous=True, **at_most(cap)) for cap, idx in groups.items()}
        for cap, idx in groups.items():
            for i, future in zip(idx, pending[cap], strict=True):
                results[i] = future.result()

    own = [limit(len(p)) for p in batch]
    first: dict[int, list[int]] = {}
    for i, p in enumerate(batch):
        first.setdefault(own[i] if exact else limit(-(-max(len(p), 1) // BUCKET) * BUCKET), []).append(i)
    run(first)
    again: dict[int, list[int]] = {}
    for cap, idx in first.items():
        for i in idx:
            if cap != own[i] and max(len(h) for h in results[i].hypotheses) >= own[i] - 1:
                again.setdefault(own[i], []).append(i)
    run(again)
    return [(r.hypotheses[:n], list(r.scores)[:n], list(r.attention)[:n]) for r in results]




def _hypotheses(tokens: list[list[int]], scores: list[float], attention: list[Any], lenpen: float, wanted: int,
                lead: int = 0, beam: int = 1) -> list[Hypothesis]:
    """A line's ``wanted`` hypotheses from CTranslate2's, best first: its score is log p / |Y| ** lenpen with |Y|
    counting EOS and the ``lead`` forced tokens left out of ``tokens``, from which the log-probability; the best told
    its runner-up where there is one; each with its attention's rows of its own tokens, where CTranslate2 returned it
    (``attention``: empty where not asked; not kept after a forced lead, whose rows no test has compared), the first
    row None after a beam search, which returns it wrong (CTranslate2Engine.alignments)."""
    rows: list[Any] = [None] * len(tokens)
    if attention and not lead:
        rows = [[None, *a[1:len(t)]] if beam > 1 else a[:len(t)] for a, t in zip(attention, tokens, strict=True)]
    out = [Hypothesis(t, s, s * (len(t) + 1 + lead) ** lenpen, attention=a)
           for t, s, a in zip(tokens, scores, rows, strict=True)]
    if len(out) > 1:
        out[0] = replace(out[0], runner_up=(out[1].score, out[1].tokens))
    return out[:wanted]
