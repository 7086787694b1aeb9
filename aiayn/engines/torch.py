"""aiayn's own engine (``--engine torch``): the trained model decoding in this process, N lines in -> N lines out, in order.

Lines are encoded with the run's SentencePiece model, sorted by length and cut into batches of
about ``batch_tokens`` source tokens (so padding stays small), decoded with beam search (or greedy
or sampling), and put back in input order. Empty or whitespace-only lines give empty lines;
lines longer than the model accepts are truncated with one warning on stderr.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import precision
from ..checkpoint import load_weights
from ..config import DecodeConfig, ModelConfig, RunConfig
from ..data.tokenizer import Vocab
from ..decoding.constraints import Constraints, check_fits, missing, refuse_constraints
from ..decoding.hypotheses import Hypothesis, max_length
from ..decoding.search import BeamSearch, Stop, decode_batch
from ..decoding.shortlist import Shortlist
from ..decoding.steps import TracedSteps
from ..model import Transformer
from ..precision import autocast
from ..quantize import weight_bytes
from ..quoting import brief
from ..rundir import RunDir
from ..runtime import eval_mode, map_in_threads, resolve_device, resolve_workers
from .base import About, Capabilities, EngineBase, Search, decode_batches, hypotheses, with_fixed

log = logging.getLogger(__name__)


@dataclass
class Trained:
    """A trained model as a run directory holds it: fp32 weights on the CPU, in eval mode, and its tokenizers."""

    run: RunDir
    checkpoint: Path
    config: RunConfig
    model: Transformer
    vocab: Vocab


def load_trained(path: str | Path) -> Trained:
    """The model of a run dir (the checkpoint :meth:`RunDir.locate` picks) or of a checkpoint dir inside one."""
    run, ckpt = RunDir.locate(path)
    cfg = run.config()
    model = Transformer(cfg.model)
    load_weights(model, ckpt)
    return Trained(run, ckpt, cfg, model.eval(), run.vocab())


def source_ids(model: Transformer, ids: Sequence[int]) -> list[int]:
    """One source sentence as the encoder takes it: cut to the model's positions, then EOS."""
    return list(ids[: model.cfg.max_positions - 1]) + [model.cfg.eos_id]


def source_batch(model: Transformer, seqs: Sequence[Sequence[int]], device: torch.device) -> torch.Tensor:
    """(B, S) ids of sentences made by :func:`source_ids`, right-padded to the longest, on ``device``."""
    src = torch.full((len(seqs), max(len(s) for s in seqs)), model.cfg.pad_id, dtype=torch.long)
    for row, s in enumerate(seqs):
        src[row, : len(s)] = torch.tensor(s)
    return src.to(device)


def translate_ids(
    model: Transformer, src_ids: Sequence[Sequence[int]], decode: DecodeConfig, device: torch.device,
    precision: str = "fp32", generator: torch.Generator | None = None, candidates: Shortlist | None = None,
    constraints: Sequence[Constraints | None] | None = None, stop: Stop | None = None,
    first: Sequence[int] | None = None,
) -> list[list[Hypothesis]]:
    """Decode each source id sequence (no EOS). Returns ``decode.nbest`` hypotheses per input, in input order.

    ``model`` is ready for inference on ``device`` (``decode.device`` and ``decode.precision`` were applied by
    whoever made it, as :class:`TorchEngine` does); ``precision``: a training precision to autocast its fp32 weights to
    (validation during training, see precision.py); ``candidates``: the model's shortlist (``decode.shortlist``);
    ``constraints``: each input's lexical constraints, or None (constraints.py); ``stop``: hypotheses.Stopped is raised
    once it is true (checked before each decoding step); ``first``: each input's forced first output token (a
    target-side language tag, multilingual.py; -1: none), left out of its hypotheses.
    """
    cfg = model.cfg
    limit = cfg.max_positions - 1
    if any(len(s) > limit for s in src_ids):
        log.warning("some inputs are longer than the model's %d source tokens and were truncated", limit)
    seqs = [source_ids(model, s) for s in src_ids]
    cons = list(constraints) if constraints is not None and any(c is not None for c in constraints) else None
    if cons is not None:
        refuse_constraints(decode)

    def run(batch: list[int]) -> list[list[Hypothesis]]:
        src = source_batch(model, [seqs[i] for i in batch], device)
        lead = None if first is None else torch.tensor([first[i] for i in batch], device=device)
        with autocast(device, precision):   # thread-local: entered by the thread that decodes
            return decode_batch(model, src, decode, generator, candidates,
                                None if cons is None else [cons[i] for i in batch], stop, lead)

    batches = decode_batches(src_ids, cfg.max_positions, decode)
    # sampling stays on one thread: the order of its random draws would otherwise depend on thread timing
    workers = 1 if decode.sampling else resolve_workers(decode.workers, device)
    results: list[list[Hypothesis]] = [[] for _ in seqs]
    with eval_mode(model):
        for batch, hyps in zip(batches, map_in_threads(run, batches, workers), strict=True):
            for i, h in zip(batch, hyps, strict=True):
                results[i] = h
    return results


class TorchEngine(EngineBase):
    """aiayn's own engine (engine.Engine): a trained model with its tokenizer and decoding settings,
    ``translate(lines) -> lines``.

    ``decode.device`` and ``decode.precision`` are applied once, here (precision.py): fp32; bf16 or fp16
    (weights and activations in that type, log-probabilities in fp32); int8 (dynamically quantized linear
    layers, CPU); auto (bf16 where the hardware is fast at it, else fp32).
    """

    engine = "torch"
    capabilities = Capabilities(constraints=True, alignments=True, attention=True, stepwise=True, processes=True)

    def __init__(self, model: Transformer, vocab: Vocab, decode: DecodeConfig | None = None,
                 shortlist: Shortlist | None = None, about: About | None = None) -> None:
        super().__init__(about)
        self.decode = decode or DecodeConfig()
        self.shortlist = shortlist             # the run's lexical shortlist, if it has one (decode.shortlist uses it)
        self.device = resolve_device(self.decode.device)
        self.precision = precision.resolve(self.decode.precision, self.device)
        self._can_compile(self.decode)
        self.model = precision.for_inference(model.to(self.device).eval(), self.precision)
        if self.device.type == "cpu" and self.precision in ("fp32", "int8"):
            self.model.traced = TracedSteps(self.model)   # its decoding step, without Python between the operators
        self.cfg = model.cfg
        self.vocab = vocab
        self.workers = resolve_workers(self.decode.workers, self.device)      # batches decoded side by side

    @classmethod
    def load(cls, path: str | Path, **settings: Any) -> TorchEngine:
        """From a run dir (its averaged/, best/ or last/ checkpoint) or a checkpoint dir inside one, with the
        run's decoding settings; ``settings``: any :class:`DecodeConfig` field (``device``, ``precision``,
        ``beam``, ...) to override (None values are ignored)."""
        t = load_trained(path)
        log.debug("loaded %s", t.checkpoint)
        decode = t.config.decode.replace(**settings)
        return cls(t.model, t.vocab, decode, Shortlist.for_run(t.run.path, decode.shortlist), About.of_run(t.run))

    def _can_compile(self, decode: DecodeConfig) -> None:
        if decode.static and self.precision == "int8":
            raise ValueError("decode.compile cannot be used with precision int8: torch.compile does not trace the "
                             "dynamically quantized linear layers; use --precision fp32 with --compile, or int8 "
                             "without it")

    def settings(self, decode: DecodeConfig | None = None, **overrides: object) -> DecodeConfig:
        """The decoding settings (``decode``, default this engine's) with some fields overridden (None values are
        ignored). The device and the precision are fixed when the engine is made."""
        return with_fixed(self.decode, decode, overrides)

    def constraints(self, lines: Sequence[str], phrases: Sequence[Sequence[str] | None] | None,
                    decode: DecodeConfig) -> list[Constraints | None] | None:
        """Each line's target phrases as the Constraints beam search keeps (:func:`line_constraints`)."""
        return line_constraints(self.vocab, self.cfg, lines, phrases, decode)

    def decode_lines(self, ids: list[list[int]], decode: DecodeConfig, cons: list[Constraints | None] | None,
                     stop: Stop | None = None, first: int | None = None) -> list[list[Hypothesis]]:
        """engine.Engine's: the lines searched as given, batched by length (:func:`translate_ids`)."""
        self._can_compile(decode)
        return translate_ids(self.model, ids, decode, self.device, candidates=self.shortlist, constraints=cons,
                             stop=stop, first=None if first is None else [first] * len(ids))

    def hypotheses(self, ids: Sequence[Sequence[int]], decode: DecodeConfig, cons: Sequence[Constraints | None] | None,
                   stop: Stop | None = None, first: int | None = None) -> list[list[Hypothesis]]:
        """:meth:`translate_hypotheses` of encoded lines, with resolved settings and Constraints (engine.hypotheses:
        blank lines and keep_plain; ``first``: decode_lines'); a warning names the phrases a line's best translation
        could not keep."""
        out = hypotheses(self, ids, decode, cons, stop, first)
        for i, hs in enumerate(out):
            if cons is not None and ids[i] and (lost := missing(hs[0].tokens, cons[i])):
                log.warning("line %d: no translation within the length limit contains %s; the best one without "
                            "them is given", i + 1, " / ".join(self.vocab.tgt.decode([list(p)])[0] for p in lost))
        return out

    def alignments(self, lines: Sequence[str], outputs: Sequence[Sequence[int]], source: bool = False,
                   ids: Sequence[Sequence[int]] | None = None, attention: Sequence[Any] | None = None) -> list[str]:
        """The word alignment (``"0-0 1-2 ..."``, source word - target word) of each line with its translation's
        tokens ``outputs``, from the encoder-decoder attention (the heads trained to align, else the layer that aligns
        best: align.method; blank: ""). ``source``: the other way, each source word's best target word (markup.py
        places a tag by it where the first way has none); ``ids``: the lines' source ids, if they are encoded already
        (``attention``: its searches return none)."""
        from ..decoding.align import align, format_links, method

        ids = self.encode(lines) if ids is None else ids
        layer, shift, heads = method(self.model)
        links = align(self.model, (self.vocab.src.piece, self.vocab.tgt.piece), ids, outputs, layer, shift,
                      self.device, source, heads)
        return [format_links(x) for x in links]

    def search(self, decode: DecodeConfig) -> BeamSearch:
        """An empty search.BeamSearch with ``decode``'s settings, for a server to admit sentences to between its steps
        (capability ``stepwise``)."""
        return BeamSearch(self.model, decode, self.shortlist)

    def admit(self, search: Search, ids: list[list[int]], keys: list[Any], decode: DecodeConfig,
              cons: list[Constraints | None] | None, first: int | None = None) -> None:
        """Encoded lines join ``search`` (one of :meth:`search`'s) between two of its steps: one encoder call."""
        assert isinstance(search, BeamSearch)
        seqs = [source_ids(self.model, x) for x in ids]
        lead = None if first is None else torch.full((len(ids),), first, dtype=torch.long)
        search.admit(source_batch(self.model, seqs, self.device), keys, decode, constraints=cons, first=lead)

    def attention(self, line: str, **overrides: Any) -> dict[str, Any]:
        """``line`` translated (any decoding overrides), with every attention probability the model computed for it
        (:func:`attention_maps`)."""
        return attention_maps(self, line, self.translate_hypotheses([line], **{**overrides, "nbest": 1})[0][0])

    def memory_bytes(self) -> int:
        return weight_bytes(self.model)

    def model_info(self) -> tuple[dict[str, Any], int]:
        return self.model.cfg.to_dict(), sum(p.numel() for p in self.model.parameters())


def line_constraints(vocab: Vocab, cfg: ModelConfig, lines: Sequence[str], phrases: Sequence[Sequence[str] | None] | None,
                     decode: DecodeConfig) -> list[Constraints | None] | None:
    """Each line's target phrases (strings, or None / [] for none) as the Constraints beam search keeps: their
    tokens as the target tokenizer encodes each phrase on its own. None when no line has any. A clear error for
    phrases that are not strings, settings that cannot keep them, or phrases longer than a line's length limit."""
    if phrases is None:
        return None
    if len(phrases) != len(lines):
        raise ValueError(f"constraints for {len(phrases)} lines, but {len(lines)} lines to translate")
    out: list[Constraints | None] = []
    for n, ps in enumerate(phrases, 1):
        if isinstance(ps, str) or not isinstance(ps, (list, tuple, type(None))):
            raise ValueError(f"line {n}: constraints are a list of target phrases (strings), not {brief(ps)}")
        kept = [p.strip() for p in ps or [] if isinstance(p, str) and p.strip()]
        if len(kept) != len(ps or []):
            raise ValueError(f"line {n}: every constraint must be a non-empty string: {brief(ps, 80)}")
        out.append(Constraints(vocab.tgt.encode(kept)) if kept else None)
    if all(c is None for c in out):
        return None
    refuse_constraints(decode)
    rows = [i for i, c in enumerate(out) if c is not None]
    for i, ids in zip(rows, vocab.src.encode([lines[i] for i in rows]), strict=True):
        n = min(len(ids), cfg.max_positions - 1)
        check_fits(out[i], max_length(n, decode.max_len_a, decode.max_len_b, cfg.max_positions),
                   f"the line {lines[i][:60]!r}")
    return out


def attention_maps(t: TorchEngine, line: str, hyp: Hypothesis) -> dict[str, Any]:
    """``line`` and its translation ``hyp`` with every attention probability the model computes for them: pieces of
    the source (with EOS), of the decoder's input (BOS, y_1 ..) and of its output (y_1 .., EOS), and per layer and
    head the encoder self-attention (S x S), decoder self-attention (T x T) and encoder-decoder attention (T x S) as
    nested lists, by the explicit Eq. (1) (model.attention_maps)."""
    cfg = t.model.cfg
    src = t.vocab.src.encode([line])[0][: cfg.max_positions - 1] + [cfg.eos_id]
    tgt_in = [cfg.bos_id] + hyp.tokens
    with torch.inference_mode():
        maps = t.model.attention_maps(torch.tensor([src], device=t.device), torch.tensor([tgt_in], device=t.device))
    src_piece, tgt_piece = t.vocab.src.piece, t.vocab.tgt.piece
    as_lists = lambda layers: [m[0].float().cpu().tolist() for m in layers]  # noqa: E731  (L x H x rows x cols)
    return {"translation": t.detokenize([hyp.tokens])[0], "source": [src_piece(i) for i in src],
            "target_in": [tgt_piece(i) for i in tgt_in],
            "target_out": [tgt_piece(i) for i in hyp.tokens + [cfg.eos_id]], "encoder": as_lists(maps.encoder),
            "decoder_self": as_lists(maps.decoder_self), "cross": as_lists(maps.cross)}
