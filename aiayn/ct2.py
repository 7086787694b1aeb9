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


def converted(path: str | Path, quantization: str | None) -> Path:
    """The cached CTranslate2 conversion of run (or checkpoint) ``path``, made now if missing or stale."""
    run, ckpt = RunDir.locate(path)
    key = f"{ckpt.name}-{quantization or 'float32'}"
    cache = run.engine_cache("ctranslate2")
    out = cache / f"{key}-{weights_hash(ckpt)[:16]}"
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
    capabilities = Capabilities()

    def __init__(self, out: Path, vocab: Vocab, cfg: ModelConfig, decode: DecodeConfig) -> None:
        import ctranslate2
        import torch

        self.decode, self.vocab, self.cfg, self.path = decode, vocab, cfg, out
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
        require(self, "alignments")
        return []

    def attention(self, line: str, **overrides: Any) -> dict[str, Any]:
        require(self, "attention")
        return {}

    def translate(self, lines: Sequence[str], **overrides: Any) -> list[str]:
        hyps = self.translate_hypotheses(lines, **{**overrides, "nbest": 1})
        return self.detokenize([h[0].tokens for h in hyps])

    def detokenize(self, token_lists: list[list[int]]) -> list[str]:
        return detokenize(self.vocab, token_lists)


def load(path: str | Path, engine: str, **settings: Any) -> Any:
    """A Translator (``engine`` torch) or a CTranslate2Translator (ctranslate2) for run dir ``path``."""
    if engine == "ctranslate2":
        return CTranslate2Translator.load(path, **settings)
    if engine != "torch":
        raise ValueError(f"--engine {engine!r}: expected torch or ctranslate2")
    from .translate import Translator

    return Translator.load(path, **settings)
