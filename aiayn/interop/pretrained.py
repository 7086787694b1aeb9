"""Start from a pretrained model: a Hugging Face ``MarianMTModel`` (the ~1,500 OPUS-MT models, and aiayn's own
Hugging Face exports) read into an aiayn run directory that translate, evaluate, serve, export and
``train --init-from`` use as they use a run trained here.

What a Marian checkpoint has that the paper's model does not is a ``ModelConfig`` field of its own, the paper's
value the default: the FFN's activation (``activation``: OPUS-MT models use swish), the bias on the output
projection (``output_bias``: ``final_logits_bias``). The rest is renumbering:

- **the d_model axis**: Marian's sinusoids have all the sines first and then the cosines, where §3.5 interleaves
  them; every weight on the residual stream is permuted back (export.py's :func:`~aiayn.interop.export.marian_order`, the
  inverse of what export does), which changes nothing the model computes.
- **the vocabulary**: Marian numbers its pieces with a ``vocab.json`` table (``</s>`` 0, ``<unk>`` 1, ...,
  ``<pad>`` last) shared by a source and a target SentencePiece model, and starts decoding with ``<pad>``
  (``decoder_start_token_id``). aiayn keeps its fixed special ids (config.PAD_ID ...): the run's tokenizers are
  the two SentencePiece models numbered by the table (tokenizer.py), the embedding and output rows follow them,
  aiayn's BOS row is the decoder start token's, and aiayn's padding row, which Marian does not have apart from
  its start token, gets a zero embedding and a -1e4 output bias (its probability is 0, as nothing scores it).

Configurations aiayn does not implement are refused with the field named (:data:`REFUSED`). Hub names need the
``huggingface_hub`` package (with ``transformers``: ``pip install 'aiayn[export]'``); local directories do not.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from .. import checkpoint
from ..atomic import atomic_dir
from ..config import BOS_ID, PAD_ID, DecodeConfig, ModelConfig, Multilingual, RunConfig
from ..data.tokenizer import Vocab, stored_name, table_of
from ..decoding.hypotheses import FILE as CALIBRATION
from ..model import Transformer
from ..rundir import RunDir
from ..translation.route import from_tag_code
from .export import INFO, layer_names, marian_order

log = logging.getLogger(__name__)

FORMATS = ("huggingface",)
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}   # transformers' -> aiayn's
KILLED = -1e4     # the output bias of a row the pretrained model has no probability for (aiayn's padding)
HF_CONFIG, MARIAN_VOCAB = "config.json", "vocab.json"    # transformers' files (not aiayn's of the same names)
_FILES = (HF_CONFIG, "generation_config.json", "tokenizer_config.json", MARIAN_VOCAB, "target_vocab.json",
          "source.spm", "target.spm", "model.safetensors", INFO, CALIBRATION)  # and pytorch_model.bin where no safetensors


class PretrainedError(ValueError):
    """The checkpoint cannot be imported: the message names the file or the configuration field."""


# MarianConfig fields whose values aiayn does not implement: (field, what aiayn needs, why).
REFUSED: tuple[tuple[str, Any, str], ...] = (
    ("scale_embedding", True, "aiayn multiplies embeddings by sqrt(d_model) (§3.4)"),
    ("normalize_before", False, "Marian models are post-norm"),
    ("add_final_layer_norm", False, "a post-norm stack has no final LayerNorm"),
    ("normalize_embedding", False, "aiayn has no LayerNorm on the embeddings"),
    ("static_position_embeddings", True, "aiayn's positions are the sinusoids (§3.5)"),
)
_SAME = (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim"))


def import_model(source: str | Path, out: str | Path, fmt: str = "huggingface", src_lang: str | None = None,
                 tgt_lang: str | None = None, force: bool = False) -> Path:
    """Read the Marian checkpoint ``source`` (a directory, or a name on the Hugging Face hub) into the run directory
    ``out``; returns it. ``src_lang``/``tgt_lang``: the language codes (default: the tokenizer's, or the
    ``opus-mt-SRC-TGT`` name) that choose sacreBLEU's tokenizer."""
    if fmt not in FORMATS:
        raise PretrainedError(f"--from {fmt!r}: expected one of {', '.join(FORMATS)}")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise PretrainedError(f"{out} exists and is not empty; choose another --out or pass --force")
    folder = _local(source)
    hf_cfg = _read_json(folder / HF_CONFIG)
    tok_cfg = _read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    exported = _read_json(folder / INFO) if (folder / INFO).is_file() else {}       # an aiayn export's settings
    langs = _languages(str(source), tok_cfg, src_lang, tgt_lang, exported.get("languages"))
    info: dict[str, Any] = {"imported_from": str(source), "format": fmt,
                            **({"src": langs[0], "tgt": langs[1]} if langs else {}),
                            # what an aiayn export knows of its text: its length norms and sentence openers
                            **({"norms": exported["norms"]} if isinstance(exported.get("norms"), dict) else {})}
    # written whole or not at all (a failure leaves --out as it was; --force replaces it, old checkpoints included)
    with tempfile.TemporaryDirectory() as tmp, atomic_dir(out) as new:
        vocab = _vocab(folder, tok_cfg, Path(tmp))
        if (multi := _targets(vocab, langs, src_lang or tok_cfg.get("source_lang"), folder)) is not None:
            info = {k: v for k, v in info.items() if k not in ("src", "tgt")} | {"multilingual": multi.to_dict()}
        model = marian_model(hf_cfg, _hf_state(folder), vocab, folder)
        run = RunDir(new)
        run.create(RunConfig(model=model.cfg, decode=_decode_config(folder, exported)), vocab, info)
        checkpoint.save(run.best, model, {"step": 0, "imported_from": str(source), "architecture": "MarianMTModel"})
        if (folder / CALIBRATION).is_file():               # an aiayn export's confidence calibration
            shutil.copyfile(folder / CALIBRATION, new / CALIBRATION)
    log.info("imported %s into %s (%.1fM parameters)", source, out,
             sum(p.numel() for p in model.parameters()) / 1e6)
    return out


# --- reading the checkpoint ------------------------------------------------------------------------------------


def _local(source: str | Path) -> Path:
    """A local directory as it is; a hub name downloaded (the files a Marian model needs) into the hub's cache."""
    p = Path(source)
    if p.is_dir():
        if not (p / HF_CONFIG).is_file():
            raise PretrainedError(f"{p}: no config.json (not a Hugging Face model directory)")
        return p
    if p.exists() or str(source).count("/") > 1:
        raise PretrainedError(f"{source}: neither a model directory nor a hub name such as Helsinki-NLP/opus-mt-de-en")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise PretrainedError("hub names need the huggingface_hub package: pip install 'aiayn[export]' (or give "
                           "a local directory)") from None
    try:
        folder = Path(snapshot_download(str(source), allow_patterns=list(_FILES)))
        if not (folder / "model.safetensors").is_file():               # older hub models: torch weights only
            folder = Path(snapshot_download(str(source), allow_patterns=["pytorch_model.bin"]))
        return folder
    except Exception as e:  # noqa: BLE001 - the hub raises many kinds (not found, offline, gated)
        raise PretrainedError(f"{source}: could not be downloaded from the Hugging Face hub ({type(e).__name__}: "
                           f"{str(e).strip()[:200]})") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise PretrainedError(f"{path}: cannot be read ({e})") from None
    if not isinstance(value, dict):
        raise PretrainedError(f"{path}: expected a JSON object")
    return value


def _hf_state(folder: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors by name, read without running code (safetensors, or a weights-only torch load)."""
    st, pt = folder / "model.safetensors", folder / "pytorch_model.bin"
    try:
        if st.is_file():
            from safetensors.torch import load_file
            return load_file(str(st))
        if pt.is_file():
            return torch.load(pt, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - damaged files raise many kinds
        raise PretrainedError(f"{st if st.is_file() else pt}: cannot be read ({type(e).__name__}: {e})") from None
    raise PretrainedError(f"{folder}: no model.safetensors or pytorch_model.bin")


def model_config(hf: dict[str, Any], where: Path | str = HF_CONFIG) -> ModelConfig:
    """The ModelConfig of a MarianConfig (as its config.json holds it), or a refusal naming the field."""
    if hf.get("model_type") != "marian":
        raise PretrainedError(f"{where}: model_type={hf.get('model_type')!r}; aiayn imports Marian models "
                           "(model_type 'marian', MarianMTModel)")
    for name, needed, why in REFUSED:
        if name in hf and hf[name] != needed:
            raise PretrainedError(f"{where}: {name}={hf[name]!r} is not supported ({why}; needs {needed!r})")
    for a, b in _SAME:
        if hf.get(a) != hf.get(b):
            raise PretrainedError(f"{where}: {a}={hf.get(a)!r} and {b}={hf.get(b)!r} differ; aiayn's encoder and "
                               "decoder layers have the same width (their depths may differ)")
    act = hf.get("activation_function", "gelu")
    if act not in ACTIVATIONS:
        raise PretrainedError(f"{where}: activation_function={act!r} is not supported (one of {', '.join(ACTIVATIONS)})")
    shared, tied = hf.get("share_encoder_decoder_embeddings", True), hf.get("tie_word_embeddings", True)
    if shared and not tied:
        raise PretrainedError(f"{where}: share_encoder_decoder_embeddings=true with tie_word_embeddings=false (one "
                           "embedding for both stacks, a separate output matrix) is not an aiayn tie mode")
    vs = int(hf["vocab_size"])
    vt = int(hf.get("decoder_vocab_size") or vs)
    if shared and vs != vt:
        raise PretrainedError(f"{where}: share_encoder_decoder_embeddings=true but vocab_size={vs} and "
                              f"decoder_vocab_size={vt} differ")
    try:
        return ModelConfig(
            src_vocab_size=vs, tgt_vocab_size=vt,       # Marian's sizes: aiayn's follow its tokenizers (marian_model)
            d_model=int(hf["d_model"]), d_ff=int(hf["encoder_ffn_dim"]), n_heads=int(hf["encoder_attention_heads"]),
            n_layers=int(hf["encoder_layers"]), n_enc_layers=_other(hf, "encoder_layers"),
            n_dec_layers=_other(hf, "decoder_layers"), p_drop=float(hf.get("dropout", 0.1)),
            p_attn=float(hf.get("attention_dropout", 0.0)), p_ffn=float(hf.get("activation_dropout", 0.0)),
            tie="all" if shared else "decoder" if tied else "none", activation=ACTIVATIONS[act],  # type: ignore[arg-type]
            output_bias=True, max_positions=int(hf.get("max_position_embeddings", 512)))
    except KeyError as e:
        raise PretrainedError(f"{where}: no {e.args[0]} field") from None
    except ValueError as e:
        raise PretrainedError(f"{where}: {e}") from None


def _other(hf: dict[str, Any], depth: str) -> int:
    """``n_enc_layers`` / ``n_dec_layers`` for a Marian depth: 0 (as ``n_layers``) when both stacks are as deep,
    else the depth itself (a deep-encoder / shallow-decoder model)."""
    return 0 if hf["encoder_layers"] == hf.get("decoder_layers", hf["encoder_layers"]) else int(hf[depth])


def _vocab(folder: Path, tok_cfg: dict[str, Any], tmp: Path) -> Vocab:
    """The source and target SentencePiece models, each numbered by its piece table (tokenizer.py's ``table_of``)."""
    separate = bool(tok_cfg.get("separate_vocabs", False))
    tables = {"src": folder / MARIAN_VOCAB, "tgt": folder / ("target_vocab.json" if separate else MARIAN_VOCAB)}
    files = {}
    for side, spm_name in (("src", "source.spm"), ("tgt", "target.spm")):
        for f in (folder / spm_name, tables[side]):
            if not f.is_file():
                raise PretrainedError(f"{folder}: no {f.name} (a MarianTokenizer needs source.spm, target.spm and "
                                   "vocab.json)")
        files[side] = tmp / stored_name(side)
        files[side].write_bytes((folder / spm_name).read_bytes())
        table_of(files[side]).write_bytes(tables[side].read_bytes())
    try:
        return Vocab.from_files(files["src"], files["tgt"])
    except ValueError as e:
        raise PretrainedError(f"{folder}: {e}") from None


def _check_vocab(vocab: Vocab, m: ModelConfig, hf: dict[str, Any], folder: Path) -> None:
    """The tables fit the model: their sizes, and the special ids config.json names are the table's."""
    for side, tok, size in (("src", vocab.src, m.src_vocab_size), ("tgt", vocab.tgt, m.tgt_vocab_size)):
        table = getattr(tok, "table", None)
        assert table is not None, "_vocab gives both sides a piece table"
        if table.size != size:
            raise PretrainedError(f"{folder}: the {side} piece table has {table.size} ids, config.json "
                                  f"{'vocab_size' if side == 'src' else 'decoder_vocab_size'}={size}")
    pad, eos, start = hf.get("pad_token_id"), hf.get("eos_token_id"), hf.get("decoder_start_token_id")
    natives = vocab.tgt.table.natives  # type: ignore[union-attr]
    for field, value, piece in (("pad_token_id", pad, natives[0]), ("eos_token_id", eos, natives[2])):
        if value != piece:
            raise PretrainedError(f"{folder / 'config.json'}: {field}={value!r}, but the piece table has it at {piece}")
    if start not in (pad, natives[1]) or (natives[1] is not None and start != natives[1]):
        raise PretrainedError(f"{folder / 'config.json'}: decoder_start_token_id={start!r} is neither the <s> piece "
                              "nor (without one) <pad>; aiayn starts decoding with its BOS")


def _rows(tok: Any, start: int | None) -> list[int | None]:
    """For each aiayn id, the pretrained model's row (None: none). ``start``: the decoder's start token, aiayn's
    BOS row; when that is Marian's <pad>, aiayn's own padding has no row."""
    ids = tok.ids
    rows: list[int | None] = list(range(ids.size)) if ids.identity else [None if n < 0 else int(n) for n in ids.to_native]
    if start is not None:
        if rows[PAD_ID] == start:
            rows[PAD_ID] = None
        rows[BOS_ID] = start
    return rows


def marian_model(hf: dict[str, Any], state: dict[str, torch.Tensor], vocab: Vocab, folder: Path = Path(".")
                 ) -> Transformer:
    """The aiayn model of a Marian checkpoint: its config.json (``hf``), its tensors by transformers' names, and
    its tokenizers as aiayn reads them (``vocab``). Marian's d_model axis is put back in §3.5's order and the
    embedding and output rows in aiayn's numbering; an output bias is kept when it is not zero or when a row
    has no pretrained counterpart (:data:`KILLED`)."""
    m = model_config(hf, folder / HF_CONFIG)
    _check_vocab(vocab, m, hf, folder)
    src_rows, tgt_rows = _rows(vocab.src, None), _rows(vocab.tgt, hf.get("decoder_start_token_id"))
    bias = state.get("final_logits_bias", torch.zeros(m.tgt_vocab_size)).float().reshape(-1)
    m = dataclasses.replace(m, src_vocab_size=len(src_rows), tgt_vocab_size=len(tgt_rows),
                            output_bias=None in tgt_rows or bool(bias.any()))
    model = Transformer(m)
    inv = torch.argsort(marian_order(m.d_model))              # Marian's order -> aiayn's

    def get(*names: str) -> torch.Tensor:
        for name in names:
            for n in (name, name.removeprefix("model.")):
                if n in state:
                    return state[n].float()
        raise PretrainedError(f"{folder}: the checkpoint has no tensor {names[0]}")

    ours = model.state_dict()
    with torch.no_grad():
        for hf_name, ours_name, part, d_in, d_out in layer_names(m):
            w, b = get(f"{hf_name}.weight"), get(f"{hf_name}.bias")
            w = w[:, inv] if d_in else w
            w, b = (w[inv], b[inv]) if d_out else (w, b)
            rows = part if part is not None else slice(None)
            ours[f"{ours_name}.weight"][rows] = w
            ours[f"{ours_name}.bias"][rows] = b
        tgt = get("model.decoder.embed_tokens.weight", "model.shared.weight", "lm_head.weight")
        _put_rows(model.tgt_embed.lut.weight, tgt[:, inv], tgt_rows)
        if m.tie != "all":
            src = get("model.encoder.embed_tokens.weight", "model.shared.weight")
            _put_rows(model.src_embed.lut.weight, src[:, inv], src_rows)
        if m.tie == "none":
            _put_rows(model.out_proj.weight, get("lm_head.weight")[:, inv], tgt_rows)
        if model.out_proj.bias is not None:
            model.out_proj.bias.copy_(torch.tensor([KILLED if r is None else float(bias[r]) for r in tgt_rows]))
    return model.eval()


def _put_rows(dest: torch.Tensor, src: torch.Tensor, rows: list[int | None]) -> None:
    have = [i for i, r in enumerate(rows) if r is not None]
    dest.zero_()
    dest[have] = src[[rows[i] for i in have]]


def _targets(vocab: Vocab, langs: tuple[str, str] | None, src: str | None, folder: Path) -> Multilingual | None:
    """A multilingual model's record (config.Multilingual): OPUS-MT names each target by a ``>>xxx<<`` piece at the
    start of the source (``>>fra<<``, ``>>por_Latn<<``); with two or more of them the model is served as one direction
    per target. None for a model of one target (a lone code piece is kept as text: MarianTokenizer's reading)."""
    table = getattr(vocab.src, "table", None)
    codes = [p for p in (table.ids if table is not None else {}) if re.fullmatch(r">>[A-Za-z]{2,3}(_[A-Za-z]+)?<<", p)]
    if len(codes) < 2:
        return None
    tags = {from_tag_code(p[2:-2]): p for p in codes}
    source = from_tag_code(src or (langs[0] if langs else ""))
    if not source:
        raise PretrainedError(f"{folder}: a model of {len(tags)} target languages ({', '.join(codes[:6])}...): give "
                              "its source language with --src")
    targets = tuple(t for t in tags if t != source)
    return Multilingual((source, *targets), tuple((source, t) for t in targets), "source",
                        tags={t: tags[t] for t in targets})


def _decode_config(folder: Path, exported: dict[str, Any]) -> DecodeConfig:
    """The checkpoint's beam size and length penalty (generation_config.json), ranked as transformers ranks
    finished hypotheses (log p / |Y|^lenpen: aiayn's length_norm='length'); an aiayn export's own length rule and
    ranking (aiayn-export.json) as they were."""
    gen = _read_json(folder / "generation_config.json") if (folder / "generation_config.json").is_file() else {}
    settings: dict[str, Any] = {"beam": int(gen.get("num_beams") or 4), "lenpen": float(gen.get("length_penalty", 1.0)),
                                "length_norm": "length"}
    settings.update({k: exported[k] for k in ("lenpen", "length_norm", "max_len_a", "max_len_b") if k in exported})
    try:
        return DecodeConfig(**settings)
    except (TypeError, ValueError) as e:
        raise PretrainedError(f"{folder}: decoding settings {settings}: {e}") from None


def _languages(source: str, tok_cfg: dict[str, Any], src: str | None, tgt: str | None,
               exported: list[str] | None = None) -> tuple[str, str] | None:
    """(source, target) language codes: given, the tokenizer's, an aiayn export's, or an ``opus-mt-SRC-TGT`` name's."""
    if exported and not (src or tgt or tok_cfg.get("source_lang")):
        return str(exported[0]), str(exported[1])
    named = re.search(r"opus-mt-([a-z]{2,3})-([a-z]{2,3})$", source.rstrip("/"))
    src = src or tok_cfg.get("source_lang") or (named.group(1) if named else None)
    tgt = tgt or tok_cfg.get("target_lang") or (named.group(2) if named else None)
    if not (src and tgt):
        log.warning("the language codes are not known (give --src and --tgt): BLEU will use sacreBLEU's 13a tokenizer")
        return None
    return str(src), str(tgt)


