"""CTranslate2 as an engine behind aiayn's own commands: ``translate``, ``evaluate`` and ``serve --engine ctranslate2``.

The run's model is converted (export.py's CTranslate2 export) on first use and cached in the run dir, keyed by a hash
of the checkpoint's weights and the conversion's quantization; when the weights change, the next use converts again
and removes the stale conversions. A new conversion is checked against aiayn's engine on the run's validation lines
(export.check: greedy and beam 4, fp32) and the result is reported and kept beside it.

Every decoding setting maps to CTranslate2's option or is refused by name (:data:`OPTIONS`): beam -> beam_size, lenpen
-> length_penalty (CTranslate2 divides by |Y| ** alpha: ``length_norm: length`` only), min_len ->
min_decoding_length, nbest -> num_hypotheses, max_len_a / max_len_b -> max_decoding_length per length group, sampling
/ temperature / top_k / top_p -> sampling_topk / sampling_temperature / sampling_topp, shortlist -> use_vmap,
batch_tokens -> max_batch_size in tokens, workers -> inter_threads, device, precision -> compute_type (int8 converts
with int8 weights).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import precision as precisions
from .checkpoint import MODEL
from .config import DecodeConfig, ModelConfig
from .engine import Capabilities, hypotheses, require, with_fixed
from .export import ctranslate2_limited, export
from .rundir import RunDir, load_trained
from .runtime import resolve_device, resolve_workers
from .search import Hypothesis, max_length
from .tokenizer import Vocab
from .translate import detokenize, encode

log = logging.getLogger(__name__)

# each DecodeConfig field: the CTranslate2 option it becomes (a test holds that every field is listed)
OPTIONS = {"beam": "beam_size", "lenpen": "length_penalty", "length_norm": "length_penalty (length only)",
           "max_len_a": "max_decoding_length", "max_len_b": "max_decoding_length", "min_len": "min_decoding_length",
           "nbest": "num_hypotheses", "batch_tokens": "max_batch_size (tokens)", "workers": "inter_threads",
           "device": "device", "precision": "compute_type", "shortlist": "use_vmap",
           "keep_plain": "(constraints: refused by this engine)", "sampling": "sampling_topk",
           "temperature": "sampling_temperature", "top_k": "sampling_topk", "top_p": "sampling_topp"}
COMPUTE = {"fp32": "float32", "int8": "int8", "bf16": "bfloat16", "fp16": "float16"}


def _refused(decode: DecodeConfig) -> None:
    if decode.length_norm != "length":
        raise ValueError(f"length_norm={decode.length_norm!r}: CTranslate2 divides a hypothesis' log-probability by "
                         "|Y| ** lenpen only (length_norm: length); use --engine torch for gnmt")
    if decode.sampling and decode.beam != 1:
        raise ValueError(f"sampling with beam={decode.beam}: CTranslate2 samples with beam 1 only")


def weights_hash(ckpt: Path) -> str:
    """sha256 of a checkpoint's weights file (what the conversion cache is keyed by)."""
    h = hashlib.sha256()
    with open(ckpt / MODEL, "rb") as inp:
        while block := inp.read(1 << 20):
            h.update(block)
    return h.hexdigest()


CONVERSION = 2    # what a conversion holds (2: the attention its word alignments read); a new one converts again


def converted(path: str | Path, quantization: str | None) -> Path:
    """The cached CTranslate2 conversion of run (or checkpoint) ``path``, made now if missing or stale."""
    run, ckpt = RunDir.locate(path)
    key = f"{ckpt.name}-{quantization or 'float32'}"
    cache = run.engine_cache("ctranslate2")
    out = cache / f"{key}-{hashlib.sha256(f'{weights_hash(ckpt)}-{CONVERSION}'.encode()).hexdigest()[:16]}"
    if (out / "model.bin").is_file():
        return out
    for stale in cache.glob(f"{key}-*") if cache.is_dir() else ():
        log.info("the weights of %s changed since %s was converted: converting again", ckpt, stale.name)
        shutil.rmtree(stale)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log.info("converting %s for CTranslate2 (%s), once: cached in %s", ckpt, quantization or "float32", out)
    export(ckpt, "ctranslate2", tmp, quantization=quantization, force=True)
    _check(ckpt, run, tmp)
    tmp.rename(out)
    return out


def _check(ckpt: Path, run: RunDir, out: Path, lines: int = 200) -> None:
    """export.check on the first ``lines`` validation lines of the run's data dir, logged and kept as check.json."""
    from .data import DataDir
    from .export import check

    info = run.data_info()
    try:
        data = DataDir(info["data_dir"])
        src = data.raw_file("valid", data.src).read_text(encoding="utf-8").splitlines()[:lines]
    except (KeyError, OSError, ValueError):
        log.warning("the run's validation lines were not found (data dir %s): the conversion is not checked",
                    info.get("data_dir"))
        return
    result = check(ckpt, "ctranslate2", out, src)
    for beam in ("greedy", "beam4"):
        log.info("CTranslate2 check, %s: %d/%d validation lines identical to aiayn's (fp32)", beam,
                 result[beam]["identical"], len(src))
    (out / "check.json").write_text(json.dumps(result, indent=2) + "\n")


class CTranslate2Translator:
    """A run's model on CTranslate2 (engine.Engine; it decodes whole batches, without constraints or attention): its
    tokenizer is aiayn's, so its text is produced as aiayn's is."""

    engine = "ctranslate2"

    def __init__(self, out: Path, vocab: Vocab, cfg: ModelConfig, decode: DecodeConfig) -> None:
        import ctranslate2
        import torch

        from .align import method

        self.decode, self.vocab, self.cfg, self.path = decode, vocab, cfg, out
        # word alignments (and so HTML) from return_attention: the rows where each target piece is the output
        self.capabilities = Capabilities(alignments=method(cfg)[1] == 0)
        self.device = resolve_device(decode.device)
        self.precision = precisions.resolve(decode.precision, self.device)
        self.workers = resolve_workers(decode.workers, self.device)      # batches decoded side by side, as aiayn's
        self.translator = ctranslate2.Translator(
            str(out), device=self.device.type, device_index=self.device.index or 0,
            compute_type=COMPUTE[self.precision], inter_threads=self.workers,
            intra_threads=max(1, torch.get_num_threads() // self.workers))
        self.ids = {vocab.tgt.piece(i): i for i in range(vocab.tgt.vocab_size)}
        self.parameters = 0                                # the torch model's, set by load

    @classmethod
    def load(cls, path: str | Path, **settings: Any) -> CTranslate2Translator:
        """From a run dir (or a checkpoint), with the run's decoding settings and any overrides (as Translator)."""
        t = load_trained(path)
        decode = t.config.decode.replace(**settings)
        _refused(decode)
        device = resolve_device(decode.device)
        out = converted(path, "int8" if precisions.resolve(decode.precision, device) == "int8" else None)
        me = cls(out, t.vocab, t.config.model, decode)
        me.parameters = sum(p.numel() for p in t.model.parameters())
        return me

    def settings(self, decode: DecodeConfig | None = None, **overrides: object) -> DecodeConfig:
        decode = with_fixed(self.decode, decode, overrides, ("device", "precision", "workers"))
        _refused(decode)
        return decode

    def memory_bytes(self) -> int:
        return (self.path / "model.bin").stat().st_size

    def model_info(self) -> tuple[dict[str, Any], int]:
        return self.cfg.to_dict(), self.parameters

    def close(self) -> None:
        """Nothing to release before the process ends."""

    def translate_hypotheses(self, lines: Sequence[str], decode: DecodeConfig | None = None,
                             stop: Callable[[], bool] | None = None, **overrides: object) -> list[list[Hypothesis]]:
        """``decode.nbest`` hypotheses of each line, in order; a blank line gives empty ones (as Translator).
        ``stop`` is not asked: CTranslate2 decodes a call to its end (its callback stops greedy search only), so a
        server's work per request is bounded by its length caps instead (serve.ServeConfig)."""
        return self.hypotheses(self.encode(lines), self.settings(decode, **overrides), None, stop)

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        return encode(self.vocab, lines)

    def hypotheses(self, ids: Sequence[Sequence[int]], decode: DecodeConfig, cons: Sequence[Any] | None,
                   stop: Callable[[], bool] | None = None) -> list[list[Hypothesis]]:
        """engine.Engine's (engine.hypotheses: blank lines are not decoded)."""
        return hypotheses(self, ids, decode, cons, stop)

    def decode_lines(self, ids: list[list[int]], decode: DecodeConfig, cons: list[Any] | None,
                     stop: Callable[[], bool] | None = None) -> list[list[Hypothesis]]:
        """engine.Engine's: each line's ``nbest`` hypotheses (no constraints: the caller refused them,
        engine.require); ``stop`` is not asked (:meth:`translate_hypotheses`)."""
        d = decode
        piece, most = self.vocab.src.piece, self.cfg.max_positions
        options = dict(beam_size=d.beam, length_penalty=d.lenpen, min_decoding_length=d.min_len,
                       num_hypotheses=max(1, d.nbest), return_scores=True, max_batch_size=max(1, d.batch_tokens // d.beam),
                       batch_type="tokens", use_vmap=d.shortlist,
                       suppress_sequences=[[piece(self.cfg.pad_id)], [piece(self.cfg.bos_id)]])
        if d.sampling:
            options.update(sampling_topk=d.top_k, sampling_temperature=d.temperature, sampling_topp=d.top_p)
        results = ctranslate2_limited(self.translator, [[piece(t) for t in x[: most - 1]] for x in ids],
                                      lambda length: max_length(length, d.max_len_a, d.max_len_b, most), **options)
        return [[Hypothesis([self.ids[p] for p in tokens], score, score) for tokens, score in zip(hyps, scores, strict=True)]
                for hyps, scores in results]

    def constraints(self, lines: Sequence[str], phrases: Any, decode: DecodeConfig) -> None:
        require(self, "constraints")

    def alignments(self, lines: Sequence[str], outputs: Sequence[Sequence[int]], source: bool = False,
                   ids: Sequence[Sequence[int]] | None = None) -> list[str]:
        """As Translator.alignments, from the attention CTranslate2 returns (``return_attention``: the layer and heads
        align.method reads, written into the conversion) while it decodes each line forced to its translation's
        tokens: the same probabilities as aiayn's, so the same links."""
        import torch

        from .align import format_links, token_links, word_links

        ids = self.encode(lines) if ids is None else ids
        most, (src, tgt) = self.cfg.max_positions - 1, (self.vocab.src.piece, self.vocab.tgt.piece)
        todo = [i for i, (x, o) in enumerate(zip(ids, outputs, strict=True)) if len(x) and len(o)]
        sources = [[src(t) for t in ids[i][:most]] for i in todo]
        prefixes = [[tgt(t) for t in outputs[i][:most]] for i in todo]
        out = [""] * len(ids)
        for start in range(0, len(todo), 64):
            part = slice(start, start + 64)
            results = self.translator.translate_batch(
                sources[part], target_prefix=prefixes[part], return_attention=True, beam_size=1, min_decoding_length=0,
                max_decoding_length=max(map(len, prefixes[part])) + 1)
            for i, s, p, r in zip(todo[part], sources[part], prefixes[part], results, strict=True):
                cross = torch.tensor(r.attention[0][: len(p)])                  # (target pieces, source pieces)
                out[i] = format_links(word_links(token_links(cross, len(s), len(p), 0, source), s, p))
        return out

    def attention(self, line: str, **overrides: Any) -> dict[str, Any]:
        require(self, "attention")
        return {}

    def translate(self, lines: Sequence[str], **overrides: Any) -> list[str]:
        hyps = self.translate_hypotheses(lines, **{**overrides, "nbest": 1})
        return self.detokenize([h[0].tokens for h in hyps])

    def detokenize(self, token_lists: list[list[int]]) -> list[str]:
        return detokenize(self.vocab, token_lists)


class AutoTranslator:
    """``--engine auto`` where CTranslate2 is installed (engine.Engine): CTranslate2 decodes what it can, and aiayn's
    own engine, loaded on first need (and said so, with why), what it cannot: constraints and glossaries, attention
    maps, settings CTranslate2 refuses (length_norm gnmt, sampling with a beam), alignments where the model's aligning
    attention is not the one CTranslate2 returns. Its batches are whole (the server's WholeBatcher), each decoded by
    one engine: the server keeps constrained and plain requests in different batches."""

    engine = "ctranslate2"
    capabilities = Capabilities(constraints=True, alignments=True, attention=True)

    def __init__(self, fast: CTranslate2Translator, path: str | Path, settings: dict[str, Any]) -> None:
        import threading

        self.fast, self.path, self.loaded_with = fast, path, settings
        self.vocab, self.cfg, self.decode = fast.vocab, fast.cfg, fast.decode
        self.device, self.precision, self.workers = fast.device, fast.precision, fast.workers
        self.lock = threading.Lock()
        self.loaded: Any = None                          # aiayn's own engine, once it is needed

    def own(self, why: str) -> Any:
        """aiayn's own engine, loaded the first time something needs it (``why``: what, logged)."""
        with self.lock:
            if self.loaded is None:
                from .translate import Translator

                log.info("--engine auto: %s: aiayn's own engine decodes it (CTranslate2 decodes the rest)", why)
                self.loaded = Translator.load(self.path, **self.loaded_with)
            return self.loaded

    def settings(self, decode: DecodeConfig | None = None, **overrides: object) -> DecodeConfig:
        return with_fixed(self.decode, decode, overrides, ("device", "precision", "workers"))

    def _needs_own(self, decode: DecodeConfig, cons: Sequence[Any] | None) -> str | None:
        if cons is not None and any(c is not None for c in cons):
            return "constraints (a glossary)"
        try:
            _refused(decode)
        except ValueError as e:
            return str(e).split(":")[0]
        return None

    def decode_lines(self, ids: list[list[int]], decode: DecodeConfig, cons: list[Any] | None,
                     stop: Callable[[], bool] | None = None) -> list[list[Hypothesis]]:
        why = self._needs_own(decode, cons)
        return self.own(why).decode_lines(ids, decode, cons, stop) if why else \
            self.fast.decode_lines(ids, decode, None, stop)

    def hypotheses(self, ids: Sequence[Sequence[int]], decode: DecodeConfig, cons: Sequence[Any] | None,
                   stop: Callable[[], bool] | None = None) -> list[list[Hypothesis]]:
        return hypotheses(self, ids, decode, cons, stop)

    def translate_hypotheses(self, lines: Sequence[str], decode: DecodeConfig | None = None,
                             **overrides: object) -> list[list[Hypothesis]]:
        return self.hypotheses(self.encode(lines), self.settings(decode, **overrides), None)

    def translate(self, lines: Sequence[str], **overrides: Any) -> list[str]:
        hyps = self.translate_hypotheses(lines, **{**overrides, "nbest": 1})
        return self.detokenize([h[0].tokens for h in hyps])

    def constraints(self, lines: Sequence[str], phrases: Any, decode: DecodeConfig) -> Any:
        from .translate import line_constraints

        return line_constraints(self.vocab, self.cfg, lines, phrases, decode)

    def alignments(self, lines: Sequence[str], outputs: Sequence[Sequence[int]], source: bool = False,
                   ids: Sequence[Sequence[int]] | None = None) -> list[str]:
        engine = self.fast if self.fast.capabilities.alignments else self.own("alignments")
        return list(engine.alignments(lines, outputs, source, ids))

    def attention(self, line: str, **overrides: Any) -> dict[str, Any]:
        return dict(self.own("attention maps").attention(line, **overrides))

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        return encode(self.vocab, lines)

    def detokenize(self, token_lists: list[list[int]]) -> list[str]:
        return detokenize(self.vocab, token_lists)

    def memory_bytes(self) -> int:
        return self.fast.memory_bytes() + (self.loaded.memory_bytes() if self.loaded is not None else 0)

    def model_info(self) -> tuple[dict[str, Any], int]:
        return self.fast.model_info()

    def close(self) -> None:
        """Nothing to release before the process ends."""


ENGINES = ("auto", "torch", "ctranslate2")


def load(path: str | Path, engine: str = "torch", **settings: Any) -> Any:
    """The engine ``engine`` names for run dir ``path``: a Translator (torch), a CTranslate2Translator (ctranslate2),
    or with auto an AutoTranslator where CTranslate2 is installed and a Translator where it is not (logged)."""
    if engine not in ENGINES:
        raise ValueError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if engine == "auto":
        import importlib.util

        if importlib.util.find_spec("ctranslate2") is None:
            log.info("--engine auto: aiayn's own engine (CTranslate2 is not installed: pip install 'aiayn[export]')")
            engine = "torch"
        else:
            try:
                fast = CTranslate2Translator.load(path, **settings)
            except ValueError as e:                   # settings it cannot decode with
                log.info("--engine auto: aiayn's own engine (CTranslate2 cannot: %s)", e)
                engine = "torch"
            else:
                log.info("--engine auto: CTranslate2 (aiayn's own engine for what it cannot do, if asked)")
                return AutoTranslator(fast, path, {k: v for k, v in settings.items() if v is not None})
    if engine == "ctranslate2":
        return CTranslate2Translator.load(path, **settings)
    from .translate import Translator

    return Translator.load(path, **settings)
