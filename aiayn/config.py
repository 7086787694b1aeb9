"""Configuration: the model (paper §3, presets from Table 3), training (§5) and decoding (§6.1).

Three frozen, keyword-only dataclasses and one precedence chain:

    preset  ->  YAML file  ->  --set key=value

Every key lives in exactly one of the three sections, so ``--set d_model=256`` and
``--set model.d_model=256`` mean the same. Unknown keys and values of the wrong type raise
``ValueError`` naming the key and listing what is valid.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal

Norm = Literal["post", "pre"]
Positions = Literal["sinusoidal", "learned"]
Tie = Literal["none", "decoder", "all"]
Activation = Literal["relu", "swish", "gelu"]
# How numbers are computed. Training: fp32, or bf16/fp16 autocast over fp32 master weights; inference also int8
# (dynamically quantized linear layers, CPU). "auto" picks bf16 where the hardware runs it fast, else fp32.
# aiayn/precision.py resolves and applies it.
Precision = Literal["auto", "fp32", "bf16", "fp16", "int8"]
PRECISIONS: tuple[str, ...] = typing.get_args(Precision)
# What a finished beam hypothesis' log-probability is divided by (aiayn/decoding/search.py: length_penalty).
LengthNorm = Literal["gnmt", "length"]

# The special token ids, defined here only: the tokenizer is trained with them, the data manifest records them,
# and ModelConfig's defaults are them.
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A config dataclass's annotations, resolved once (``typing.get_type_hints`` took ~0.2 ms, every request)."""
    return typing.get_type_hints(cls)


def _checked(cls: type, f: Any, value: Any) -> Any:
    """``value`` for field ``f`` of config dataclass ``cls``, type-checked against its annotation (a float field takes
    an int, or a number written as a string, as a float); a ValueError names the field and what it expects."""
    hint, name = _hints(cls)[f.name], cls.__name__
    if typing.get_origin(hint) is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise ValueError(f"{name}.{f.name}={value!r}: expected one of {', '.join(map(repr, allowed))}")
    elif hint is float:
        if isinstance(value, str) and NUMBER.fullmatch(value.strip()):   # YAML 1.1 reads 1e-9 as a string
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name}.{f.name}={value!r}: expected a number")
        return float(value)
    elif hint in (int, bool, str):
        if type(value) is not hint:
            raise ValueError(f"{name}.{f.name}={value!r}: expected {hint.__name__}, got {type(value).__name__}")
    return value


def _check(obj: Any) -> None:
    """Type-check every field of a config dataclass against its annotation."""
    for f in fields(obj):
        object.__setattr__(obj, f.name, _checked(type(obj), f, getattr(obj, f.name)))


def _positive(obj: Any, *names: str, zero_ok: bool = False) -> None:
    for n in names:
        v = getattr(obj, n)
        if v < 0 or (v == 0 and not zero_ok):
            kind = "non-negative" if zero_ok else "positive"
            raise ValueError(f"{type(obj).__name__}.{n}={v!r}: expected a {kind} value")


def _probability(obj: Any, *names: str) -> None:
    for n in names:
        v = getattr(obj, n)
        if not 0.0 <= v < 1.0:
            raise ValueError(f"{type(obj).__name__}.{n}={v!r}: expected a probability in [0, 1)")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Hyperparameters of the network (paper §3 and Table 3). Defaults are the `base` model."""

    src_vocab_size: int = 37000
    tgt_vocab_size: int = 37000
    d_model: int = 512          # D
    d_ff: int = 2048            # F, inner size of the position-wise FFN (§3.3)
    n_heads: int = 8            # H; d_k = d_v = D / H (§3.2.2)
    n_layers: int = 6           # N, for the encoder and for the decoder (the shorthand for both depths)
    n_enc_layers: int = 0       # the encoder's N where it differs (0: n_layers): a deep encoder and a shallow decoder
    n_dec_layers: int = 0       # the decoder's N (0: n_layers); Deviation: Kasai et al. 2021, distilled students
    p_drop: float = 0.1         # residual dropout and dropout on embeddings + positions (§5.4)
    p_attn: float = 0.0         # dropout on attention probabilities (not in the paper; tensor2tensor's option)
    p_ffn: float = 0.0          # dropout after the FFN's ReLU (not in the paper; tensor2tensor's option)
    norm: Norm = "post"         # "post": LayerNorm(x + Sublayer(x)) as in the paper; "pre": x + Sublayer(LayerNorm(x))
    positions: Positions = "sinusoidal"   # §3.5; "learned" is the paper's Table 3 row (E)
    tie: Tie = "all"            # §3.4: "all" shares src/tgt embeddings and the pre-softmax matrix
    activation: Activation = "relu"   # §3.3's max(0, x); "swish" (x * sigmoid(x): Marian / OPUS-MT models), "gelu"
    output_bias: bool = False   # a bias on the pre-softmax projection (§3.4 has none; Marian models train one)
    max_positions: int = 1024   # longest sequence (tokens, BOS/EOS included) the model accepts
    alignment_heads: int = 0    # heads 0..k-1 of alignment_layer's encoder-decoder attention are trained to align
                                # (guided alignment, train.guided_alignment; 0: none, word links come from the
                                # attention of all heads: align.py). Deviation: Garg et al. 2019, not in the paper
    alignment_layer: int = -2   # the decoder layer of those heads (negative: from the last; -2, the penultimate, as
                                # Garg et al. and fairseq; a 1-layer decoder uses its only layer)
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID

    def __post_init__(self) -> None:
        _check(self)
        _positive(self, "src_vocab_size", "tgt_vocab_size", "d_model", "d_ff", "n_heads", "n_layers", "max_positions")
        _positive(self, "n_enc_layers", "n_dec_layers", zero_ok=True)
        _probability(self, "p_drop", "p_attn", "p_ffn")
        if self.d_model % self.n_heads:
            raise ValueError(f"ModelConfig: d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if not 0 <= self.alignment_heads <= self.n_heads:
            raise ValueError(f"ModelConfig.alignment_heads={self.alignment_heads}: expected 0 .. n_heads "
                             f"({self.n_heads})")
        if not -self.decoder_layers <= self.alignment_layer < self.decoder_layers and self.decoder_layers > 1:
            raise ValueError(f"ModelConfig.alignment_layer={self.alignment_layer}: the decoder has "
                             f"{self.decoder_layers} layers (expected {-self.decoder_layers} .. "
                             f"{self.decoder_layers - 1})")
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"ModelConfig: sinusoidal positions need an even d_model, got {self.d_model}")
        if self.tie == "all" and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"ModelConfig: tie='all' shares one vocabulary, but src_vocab_size={self.src_vocab_size} "
                f"!= tgt_vocab_size={self.tgt_vocab_size}; use tie='decoder' or 'none'"
            )
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id, "unk_id": self.unk_id}
        if len(set(ids.values())) != len(ids):
            raise ValueError(f"ModelConfig: special token ids must be distinct, got {ids}")
        smallest = min(self.src_vocab_size, self.tgt_vocab_size)
        for k, v in ids.items():
            if not 0 <= v < smallest:
                raise ValueError(f"ModelConfig.{k}={v}: expected an id in [0, {smallest})")

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    @property
    def aligning_layer(self) -> int:
        """``alignment_layer`` counted from 0 (a 1-layer decoder: its only layer)."""
        return max(self.alignment_layer, -self.decoder_layers) % self.decoder_layers

    @property
    def encoder_layers(self) -> int:
        """The encoder's depth: ``n_enc_layers``, or ``n_layers`` when it is 0."""
        return self.n_enc_layers or self.n_layers

    @property
    def decoder_layers(self) -> int:
        """The decoder's depth: ``n_dec_layers``, or ``n_layers`` when it is 0."""
        return self.n_dec_layers or self.n_layers

    @classmethod
    def preset(cls, name: str, *, vocab_size: int | None = None, **overrides: Any) -> ModelConfig:
        """A named preset (``tiny``, ``small``, ``base``, ``big``) with any field overridden.

        ``vocab_size`` sets both vocabulary sizes (one shared vocabulary, as in the paper).
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}: expected one of {', '.join(PRESETS)}")
        values = dict(PRESETS[name])
        if vocab_size is not None:
            values.update(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size)
        values.update(overrides)
        return from_dict(cls, values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: dict[str, dict[str, Any]] = {
    # A few thousand parameters: for unit tests and the copy task.
    "tiny": dict(d_model=32, d_ff=64, n_heads=4, n_layers=2, p_drop=0.0, src_vocab_size=16, tgt_vocab_size=16),
    # Multi30k scale (~29k sentence pairs): fits a 2-core CPU.
    "small": dict(d_model=256, d_ff=1024, n_heads=4, n_layers=3, p_drop=0.1, src_vocab_size=8000, tgt_vocab_size=8000),
    # Table 3, "base": 65M parameters with a 37k shared vocabulary.
    "base": dict(d_model=512, d_ff=2048, n_heads=8, n_layers=6, p_drop=0.1),
    # Table 3, "big": 213M parameters.
    "big": dict(d_model=1024, d_ff=4096, n_heads=16, n_layers=6, p_drop=0.3),
}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """The training recipe (paper §5). Names are the ones users set with ``--set``."""

    max_tokens: int = 4096          # per batch, source or target side, padding counted (§5.1 batches by tokens)
    update_freq: int = 1            # batches accumulated per optimizer step (paper: ~25k tokens per step)
    precision: Precision = "auto"   # auto = bf16 where the hardware runs it fast, else fp32; fp16 is CUDA-only;
                                    # int8 is for inference only
    lr_factor: float = 1.0          # multiplier on the §5.3 rate
    warmup: int = 4000              # warmup_steps of §5.3
    cooldown: float = 0.0           # last fraction of the run over which the rate falls linearly to 0 (not in
                                    # the paper); the run ends at max_steps, max_epochs or max_minutes, whichever comes first
    adam_beta1: float = 0.9         # §5.3
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    label_smoothing: float = 0.1    # eps_ls of §5.4
    concat: float = 0.0             # share of batches whose pairs are joined two or three to a row, each losing its
    #                                 final stop on both sides half the time (batches.Joiner; not in the paper): a
    #                                 model that has seen sentences run together without stops translates them whole
    guided_alignment: float = 0.0   # weight of the guided-alignment loss (Garg et al. 2019; not in the paper): the
                                    # cross-entropy of model.alignment_heads' attention against the word links of
                                    # `aiayn align DATA`; 0 = off (0.05-0.1 in the literature)
    clip_norm: float = 0.0          # gradient clipping (0 = off; not in the paper)
    max_bad_updates: int = 5        # updates with a non-finite loss or gradient are skipped (with a warning); this
                                    # many in a row stop the run (1: stop at the first)
    seed: int = 1
    max_steps: int = 0              # 0 = no limit
    max_epochs: int = 0
    max_minutes: float = 0.0
    save_every_steps: int = 1000
    keep_last: int = 5              # step checkpoints kept on disk, 0 = all (best/ and last/ are kept apart)
    valid_every_steps: int = 1000
    valid_each_epoch: bool = True   # also validate at the end of every epoch
    valid_bleu: bool = True         # greedy-decode the validation set and score it with sacreBLEU
    valid_max_sentences: int = 2000  # validation BLEU over at most this many lines, a fixed seeded subset (0 = all)
    bleu_tokenize: str = ""         # sacreBLEU tokenizer for validation BLEU ("" = by the target language)
    early_stop_metric: Literal["valid_bleu", "valid_loss"] = "valid_bleu"
    patience: int = 0               # stop after this many validations without improvement (0 = never)
    average_last: int = 0           # at the end, average the last K checkpoints into averaged/ (paper: 5 / 20)
    loss_chunk_tokens: int = 2048   # target tokens per chunk of the vocabulary projection (0 = all at once)
    compile: bool = False           # torch.compile the model
    threads: int = 0                # CPU threads (0 = all cores)
    device: str = "auto"            # auto | cpu | cuda | cuda:N | mps
    log_every_steps: int = 50
    tensorboard: bool = True        # write TensorBoard events when tensorboard is installed

    def __post_init__(self) -> None:
        _check(self)
        _positive(self, "max_tokens", "update_freq", "save_every_steps", "valid_every_steps", "log_every_steps",
                  "max_bad_updates")
        _positive(self, "warmup", "max_steps", "max_epochs", "max_minutes", "keep_last", "patience",
                  "average_last", "loss_chunk_tokens", "threads", "valid_max_sentences", "clip_norm",
                  "lr_factor", "guided_alignment", zero_ok=True)
        _probability(self, "label_smoothing", "adam_beta1", "adam_beta2", "concat")
        if self.concat and self.guided_alignment:
            raise ValueError("TrainConfig.concat with guided_alignment: the alignment targets are a pair's own; "
                             "set one of them to 0")
        if not 0.0 <= self.cooldown <= 1.0:
            raise ValueError(f"TrainConfig.cooldown={self.cooldown!r}: expected a fraction of the run in [0, 1]")
        if self.cooldown > 0 and not (self.max_steps or self.max_epochs or self.max_minutes):
            raise ValueError("TrainConfig.cooldown needs the run's length: set max_steps, max_epochs or max_minutes")
        if self.precision == "int8":
            raise ValueError("TrainConfig.precision='int8': int8 is for translation (decode.precision); "
                             "train in fp32, bf16 or fp16 (or auto)")


def setting(default: Any, help: str, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
            per_request: bool = False, per_sentence: bool = False, flag: str | None = None,
            needs: str | None = None, parse: Callable[[str], Any] | None = None) -> Any:
    """A field of a settings dataclass (:class:`DecodeConfig`, serve.ServeConfig): its default, what it means (the
    command-line help), its bounds, and for decoding whether one request may set it (``aiayn serve``) and whether a
    search applies it to each sentence on its own (``per_sentence``: sentences that differ in it may be decoded
    together; every other field decides which sentences may: :meth:`DecodeConfig.batch_key`). The command-line
    flags (``flag``, else ``--`` and the name with dashes), the server's request model and the validation are all
    derived from these, so a new setting is one line in its dataclass (CONTRIBUTING.md). A request's option
    (pipeline.Request) is made the same way; ``needs``: the engine capability it asks for when set
    (engines.base.require), ``parse``: how a flag's or a form field's text becomes its value."""
    return field(default=default, metadata={"help": help, "ge": ge, "gt": gt, "le": le, "per_request": per_request,
                                            "per_sentence": per_sentence, "flag": flag, "needs": needs,
                                            "parse": parse})


def _bounded(cls: type, f: Any, value: Any) -> None:
    """ValueError naming field ``f`` of ``cls`` unless ``value`` is within the bounds :func:`setting` gave it."""
    tests = {"gt": (">", lambda v, b: v > b), "ge": (">=", lambda v, b: v >= b), "le": ("<=", lambda v, b: v <= b)}
    bounds = [(sign, ok, f.metadata[k]) for k, (sign, ok) in tests.items() if f.metadata.get(k) is not None]
    if not all(ok(value, b) for _, ok, b in bounds):
        expected = " and ".join(f"{sign} {b:g}" for sign, _, b in bounds)
        raise ValueError(f"{cls.__name__}.{f.name}={value!r}: expected a value {expected}")


def check_bounds(obj: Any) -> None:
    """The bounds given by :func:`setting`, checked with an error naming the field and what is expected."""
    for f in fields(obj):
        _bounded(type(obj), f, getattr(obj, f.name))


def overrides(cls: type, given: Mapping[str, Any]) -> Mapping[str, Any]:
    """The fields of config dataclass ``cls`` that ``given`` sets (None: not given), each checked alone, where it is
    given (its name, its type, its bounds: the error names the field), read-only. A rule between two fields is
    checked where the settings are made whole (an engine's ``settings``)."""
    known = {f.name: f for f in fields(cls)}
    out = {k: v for k, v in given.items() if v is not None}
    if set(out) - set(known):
        from_dict(cls, out)                            # (its error names the unknown keys and the valid ones)
    for k, v in out.items():
        out[k] = _checked(cls, known[k], v)
        _bounded(cls, known[k], out[k])
    return types.MappingProxyType(out)


def check(settings: Any) -> None:
    """Validate a settings dataclass made with :func:`setting` (DecodeConfig, serve.ServeConfig): every field's type
    and bounds, with an error naming the field and what is expected."""
    _check(settings)
    check_bounds(settings)


@dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    """Decoding (paper §6.1: beam 4, length penalty alpha 0.6, max length = source length + 50; the paper's GNMT
    form of the penalty is ``length_norm="gnmt"``, which the WMT14 recipes set).

    The one description of every decoding setting: ``aiayn translate/evaluate/serve`` flags (``--max-len-a``
    for ``max_len_a``), the fields of a ``POST /translate`` request (``per_request``) and ``decode.*`` keys of a
    recipe all come from these fields."""

    beam: int = setting(4, "beam size (1 = greedy)", ge=1, per_request=True)
    lenpen: float = setting(0.6, "alpha of the length penalty (see length_norm)", ge=0, per_request=True)
    length_norm: LengthNorm = setting("length", "beam scores are log p(Y) / lp(Y) with |Y| counting EOS: length "
                                      "lp = |Y| ** lenpen (fairseq, Marian, CTranslate2, transformers; better on "
                                      "Multi30k's validation set at every lenpen tried) or gnmt lp = "
                                      "((5 + |Y|) / 6) ** lenpen (the paper's, as tensor2tensor)", per_request=True)
    max_len_a: float = setting(1.0, "max output length = a * source length + b", ge=0, per_request=True,
                               per_sentence=True)
    max_len_b: int = setting(50, "see max_len_a", ge=0, per_request=True, per_sentence=True)
    min_len: int = setting(0, "no EOS before this many tokens", ge=0, per_request=True)
    nbest: int = setting(1, "hypotheses returned per line (at most beam)", ge=1, per_request=True, per_sentence=True)
    batch_tokens: int = setting(6000, "source tokens x beam per translation batch", ge=1)
    workers: int = setting(0, "CPU: batches decoded at once, each by its own thread with its share of the cores "
                           "(0 = auto: one per core, at most 4; 1 = one batch at a time)", ge=0)
    device: str = setting("auto", "auto, cpu, cuda, cuda:N or mps")
    precision: Precision = setting("fp32", "of the weights at inference: fp32, bf16/fp16, int8 (quantized linear "
                                   "layers, CPU) or auto (bf16 where the hardware is fast at it)")
    compile: bool = setting(False, "aiayn's engine: decode with the static-shape step compiled by torch.compile "
                            "(steps.compiled_step; CUDA graphs on a GPU; a first batch of each shape waits seconds "
                            "for it; not with a shortlist)")
    shortlist: bool = setting(False, "decode over the candidate target tokens of the run's lexical shortlist for "
                              "the batch's source tokens (built by `aiayn shortlist`) instead of the whole vocabulary",
                              per_request=True)
    keep_plain: bool = setting(True, "constraints (a glossary): a line whose unconstrained translation already "
                               "contains its phrases (each of its nbest) keeps it, and only the other constrained "
                               "lines are decoded again with constrained search (false: constrained search for every "
                               "line that has constraints)", per_request=True, per_sentence=True)
    no_repeat_ngram: int = setting(0, "never repeat an n-gram of this many target tokens (0 = off; a repair of a "
                                   "repetition loop uses 3)", ge=0, per_request=True)
    sampling: bool = setting(False, "sample instead of searching", per_request=True)
    temperature: float = setting(1.0, "sampling: divide the logits by this", gt=0, per_request=True)
    top_k: int = setting(0, "sampling: from the k most likely tokens only (0 = all)", ge=0, per_request=True)
    top_p: float = setting(1.0, "sampling: from the smallest set of tokens with this much probability", gt=0, le=1,
                           per_request=True)

    def __post_init__(self) -> None:
        check(self)
        if self.nbest > self.beam:
            raise ValueError(f"DecodeConfig: nbest={self.nbest} cannot exceed beam={self.beam}")

    @property
    def static(self) -> bool:
        """Decode on the compiled static-shape step (steps.start): ``compile``, without a shortlist (the static
        step projects onto the whole vocabulary)."""
        return self.compile and not self.shortlist

    def batch_key(self) -> tuple[Any, ...]:
        """What sentences decoded together in one search must share: every field but those a search applies to
        each sentence on its own (``per_sentence``: the length limit, nbest). ``aiayn serve`` groups requests by it,
        and search.BeamSearch refuses a sentence whose key differs, so a new setting cannot be left out."""
        return tuple(getattr(self, f.name) for f in fields(self) if not f.metadata["per_sentence"])

    def replace(self, **settings: Any) -> DecodeConfig:
        """These settings with some fields replaced (None values ignored), validated; unknown names are ValueErrors
        naming the valid ones."""
        given = {k: v for k, v in settings.items() if v is not None}
        return from_dict(DecodeConfig, {**dataclasses.asdict(self), **given}) if given else self   # (frozen)


def beam_for_nbest(settings: dict[str, Any], beam: int) -> dict[str, Any]:
    """One rule for every front end (``aiayn translate --nbest``, aiayn's API, LibreTranslate's ``alternatives``): a
    beam holds at least ``nbest`` hypotheses, so where ``settings`` give no beam (absent or None) the engine's
    ``beam`` grows to nbest; a beam given smaller than nbest is kept, for DecodeConfig to refuse by name."""
    nbest = settings.get("nbest") or 1
    if settings.get("beam") is not None:
        return settings
    rest = {k: v for k, v in settings.items() if k != "beam"}
    return {**rest, "beam": nbest} if nbest > beam else rest


SECTIONS: dict[str, type] = {"model": ModelConfig, "train": TrainConfig, "decode": DecodeConfig}


# settings that were DecodeConfig's and are now a request's options (pipeline.Request): how each text is cut and
# checked, asked per request (a flag, a request's field), not a model's. A run saved before keeps them in its
# config.json, which reads without them.
REQUEST_OPTIONS = ("sentences", "sentence_tokens", "repair", "runon")


def from_dict(cls: type, values: dict[str, Any]) -> Any:
    """Build a config dataclass, failing clearly on unknown keys."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    moved = [k for k in unknown if cls is DecodeConfig and k in REQUEST_OPTIONS]
    if moved:
        raise ValueError(f"decode.{moved[0]} is a request's option, not a model's setting: ask for it per request "
                         f"(--{moved[0].replace('_', '-')}, \"{moved[0]}\" in a request; pipeline.Request)")
    if unknown:
        raise ValueError(f"unknown {cls.__name__} key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}")
    return cls(**values)


Position = Literal["source", "target"]         # where a multilingual model's language tag goes


@dataclass(frozen=True)
class Multilingual:
    """What a multilingual data directory (and a run trained on it) records (multilingual.py): its languages, the
    directions it was trained on, where the tag goes, the sampling temperature, and each evaluation split's lines by
    direction (``ranges[split][direction] = (first, end)``)."""

    langs: tuple[str, ...]
    directions: tuple[tuple[str, str], ...]
    position: Position = "source"
    temperature: float = 1.0
    ranges: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    train: dict[str, int] = field(default_factory=dict)          # training pairs per direction, as sampled
    tags: dict[str, str] = field(default_factory=dict)           # a language's tag where not <2xx> (Marian: >>fra<<)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["directions"] = [f"{a}-{b}" for a, b in self.directions]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Multilingual:
        return cls(tuple(d["langs"]), tuple((x.split("-", 1)[0], x.split("-", 1)[1]) for x in d["directions"]),
                   d.get("position", "source"), float(d.get("temperature", 1.0)),
                   {s: {k: (int(v[0]), int(v[1])) for k, v in r.items()} for s, r in d.get("ranges", {}).items()},
                   {k: int(v) for k, v in d.get("train", {}).items()}, {k: str(v) for k, v in d.get("tags", {}).items()})

    def tag(self, lang: str) -> str:
        """The piece that names ``lang`` as the target: ``<2fr>`` (an imported model's own: ``>>fra<<``)."""
        return self.tags.get(lang, f"<2{lang}>")

    def describe(self) -> str:
        return (f"{len(self.langs)} languages ({', '.join(self.langs)}), {len(self.directions)} directions trained, the "
                f"target named by a tag on the {self.position} (temperature {self.temperature:g}); evaluation splits "
                "hold every direction")

    def trained(self, src: str, tgt: str) -> bool:
        """Whether (src, tgt) was one of its training directions (else it is zero-shot)."""
        return (src, tgt) in self.directions

    def check(self, src: str | None, tgt: str | None) -> None:
        """ValueError naming what it knows unless it can translate ``src`` into ``tgt``: both among its languages,
        and different (the source may be left out: the tag names only the target)."""
        known = ", ".join(self.langs)
        if tgt is None:
            raise ValueError(f"this is a multilingual model: name the target language with --target (one of {known})")
        if tgt not in self.langs or (self.tags and tgt not in self.tags):
            writes = ", ".join(self.tags) if self.tags else known
            raise ValueError(f"this model does not write {tgt!r}: it writes {writes}")
        if src is not None and src not in self.langs:
            raise ValueError(f"this model does not read {src!r}: its languages are {known}")
        if src == tgt:
            raise ValueError(f"--source and --target are both {src!r}")

    def first_tokens(self, lines: Sequence[int], piece_id: Callable[[str], int | None], split: str = "valid",
                     ) -> list[int] | None:
        """With the tag on the target side, each of these lines (numbers in ``split``) decodes from its direction's
        tag (``piece_id``: the target vocabulary's id of a piece): the search's forced first tokens (search.py); else
        None (the tag is in the source ids already)."""
        if self.position != "target":
            return None
        tags = {name: piece_id(self.tag(name.split("-", 1)[1])) for name in self.ranges.get(split, {})}
        out = []
        for i in lines:
            name = next((n for n, (a, b) in self.ranges[split].items() if a <= i < b), None)
            tag_id = None if name is None else tags[name]
            if tag_id is None:
                raise ValueError(f"line {i + 1} of {split} lies in no direction with a tag in the vocabulary")
            out.append(tag_id)
        return out

    def source_ids(self, ids: list[int], tgt: str, tag_id: int) -> list[int]:
        """A line's source ids as the model reads them with ``tgt`` as the target (``tag_id``: the tag's id): the
        tag first when the tag is the source's; a blank line stays blank (it is never decoded)."""
        return [tag_id, *ids] if ids and self.position == "source" else ids


@dataclass(frozen=True)
class Norms:
    """What a model's training data shows of its sentences, for what it is given and what it gives: the longest
    source sentence (tokens; longer ones are cut at their clauses, spans.py), the target/source length ratio of
    pairs of at least MIN_TOKENS source tokens (its 0.1st and 99.9th percentiles; a translation outside them is
    flagged, pipeline.py), the share of pairs whose target is their source (a model trained to copy is not
    flagged for copying), the 5th percentile of that ratio (``short``: a translation under it may have dropped a
    sentence run on without its stop: pipeline.guarded), and the source's **starters**: capitalized words that start
    training sentences, each with the share of its uses that start one (German ``Ein`` 0.995, ``Leute`` 0.29); the
    **openers**, those at OPENER_SHARE or more, are where run-on text is cut (spans.cut_runon). Counted by
    data.DataDir.norms; written in a run's data.json by training (rundir.RunDir.norms)."""

    MIN_TOKENS: ClassVar[int] = 5
    SAMPLE: ClassVar[int] = 100_000                    # pairs compared for copies, at most
    OPENER_MIN: ClassVar[int] = 10                     # a starter starts this many training sentences at least,
    STARTER_SHARE: ClassVar[float] = 0.05              # and this share of its uses starts one;
    OPENER_SHARE: ClassVar[float] = 0.8                # an opener, this share

    longest_src: int | None = None
    ratio: tuple[float, float] | None = None
    copies: float = 0.0
    short: float | None = None
    starters: tuple[tuple[str, float], ...] = ()

    @property
    def openers(self) -> tuple[str, ...]:
        return tuple(w for w, share in self.starters if share >= Norms.OPENER_SHARE)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: Any) -> Norms | None:
        """From data.json's ``norms`` (None where it is missing or malformed)."""
        try:
            r = d.get("ratio")
            return Norms(None if d.get("longest_src") is None else int(d["longest_src"]),
                         None if r is None else (float(r[0]), float(r[1])), float(d.get("copies", 0.0)),
                         None if d.get("short") is None else float(d["short"]),
                         tuple((str(w), float(s)) for w, s in d.get("starters", ())))
        except (AttributeError, TypeError, ValueError, IndexError):
            return None


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything a run needs: the three sections, saved together as ``config.json``."""

    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict[str, Any]:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        unknown = set(d) - set(SECTIONS)
        if unknown:
            raise ValueError(f"unknown config section(s) {sorted(unknown)}; expected {list(SECTIONS)}")
        return cls(**{name: from_dict(c, d.get(name, {})) for name, c in SECTIONS.items()})

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        d = json.loads(Path(path).read_text())
        for k in REQUEST_OPTIONS:                      # (saved before they became a request's: REQUEST_OPTIONS)
            d.get("decode", {}).pop(k, None)
        return cls.from_dict(d)


