"""Export a trained run to the engines translation is deployed with, and check that it still translates the same.

- **CTranslate2** (the C++ engine OpenNMT-py, fairseq and Marian users convert to): the model is described
  with CTranslate2's own specification API (``ctranslate2.specs.TransformerSpec``) and written by its
  converter, the SentencePiece model beside it. Every aiayn variant is expressible: post-norm and pre-norm,
  every tie mode, sinusoidal and learned positions (the position table is stored as it is).
- **Argos Translate** (what LibreTranslate installs): the CTranslate2 export packed as a ``.argosmodel`` (argos.py).
- **Hugging Face transformers**: post-norm models become ``MarianMTModel`` (post-norm, scaled embeddings,
  sinusoidal positions, separate or shared vocabularies); pre-norm models ``PegasusForConditionalGeneration``
  (pre-norm with a final LayerNorm per stack, as aiayn's). Marian computes its sinusoids with the sines in the
  first half of the vector and the cosines in the second, where aiayn interleaves them; the model's
  dimensions are permuted accordingly, which changes nothing it computes. Not expressible, and refused:
  post-norm with learned positions (Marian always recomputes its sinusoids) and pre-norm without shared
  embeddings (Pegasus has one embedding matrix). The tokenizer is a ``MarianTokenizer`` around the run's
  SentencePiece model, so ``AutoTokenizer`` loads it.

:func:`check` translates a file with aiayn and with the export (greedy and beam 4) and counts identical lines.
Both extras are optional: ``pip install 'aiayn[export]'``.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from ..confidence import FILE as CALIBRATION
from ..config import ModelConfig, Precision
from ..engines.base import Engine, one_line
from ..engines.ctranslate2 import COMPUTE, EXPORT_SPM, EXPORT_TGT_SPM, INFO, CTranslate2Engine
from ..engines.torch import TorchEngine, Trained, load_trained
from ..evaluate import score
from ..hypotheses import max_length
from ..model import Transformer, sinusoids
from ..rundir import RunDir
from ..shortlist import Shortlist, write_vmap
from ..tokenizer import table_of

log = logging.getLogger(__name__)

FORMATS = ("ctranslate2", "huggingface", "argos")
CT2_QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
NEVER = -1e4                        # the output bias of the tokens no export may produce (PAD, BOS)
VMAP = "vmap.txt"                   # in a CTranslate2 export of a run with a shortlist: its vocabulary map


class ExportError(ValueError):
    """The export cannot be made (a variant the target cannot express, a missing library, an occupied --out)."""


def export(path: str | Path, fmt: str, out: str | Path, quantization: str | None = None, force: bool = False) -> Path:
    """Write the model of run dir (or checkpoint) ``path`` to ``out`` in ``fmt`` (see :data:`FORMATS`)."""
    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if quantization is not None and (fmt == "huggingface" or quantization not in CT2_QUANTIZATIONS):
        raise ExportError(f"--quantization {quantization!r}: CTranslate2 exports (and Argos packages) take one of "
                          f"{', '.join(CT2_QUANTIZATIONS)}; Hugging Face exports are written in fp32")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise ExportError(f"{out} exists and is not empty; choose another --out or pass --force")
    t = load_trained(path)
    v = t.vocab
    if not (v.shared_ids and v.src.kind == v.tgt.kind == "sentencepiece"):
        raise ExportError(f"{t.run} uses {'separate vocabularies' if not v.shared_ids else 'a tokenizers file'}: "
                          "export supports runs whose two sides number their SentencePiece pieces alike (one joint "
                          "vocabulary, `aiayn prepare`'s default, or an imported Marian model's piece table)")
    d, m = t.config.decode, t.config.model
    info = {"source": str(t.checkpoint), "format": fmt, "quantization": quantization or "float32", "beam": d.beam,
            "lenpen": d.lenpen,
            "length_norm": d.length_norm, "max_len_a": d.max_len_a, "max_len_b": d.max_len_b, "min_len": d.min_len,
            "max_positions": m.max_positions, "languages": t.run.languages(), "norms": t.run.norms().to_dict(),
            "suppress": [v.tgt.piece(m.pad_id), v.tgt.piece(m.bos_id)],     # the pieces aiayn never produces
            "piece_table": getattr(v.tgt, "table", None) is not None,      # decoded as MarianTokenizer decodes
            "model": m.to_dict(),                                          # (CTranslate2Engine.from_export)
            "parameters": sum(p.numel() for p in t.model.parameters())}
    if (multi := t.run.multilingual()) is not None:                # its directions and tags (multilingual.py)
        info["multilingual"] = multi.to_dict()
    if fmt == "argos":
        return _to_argos(t, out, quantization, info)
    if fmt == "ctranslate2":
        _to_ctranslate2(t, out, quantization, info)
    else:
        _to_huggingface(t, out, info)
    if (t.run.path / CALIBRATION).is_file():                # its confidence, read by CTranslate2Engine.from_export
        shutil.copyfile(t.run.path / CALIBRATION, out / CALIBRATION)
    return out


def _to_argos(t: Trained, out: Path, quantization: str | None, info: dict[str, Any]) -> Path:
    """An Argos package (argos.py) of the run's CTranslate2 export, written in folder ``out``; its path."""
    from .argos import write_package

    if not t.vocab.joint:
        raise ExportError(f"{t.run} has a SentencePiece model per side; an Argos package holds one for both")
    if t.run.multilingual() is not None:
        raise ExportError(f"{t.run} is a multilingual run, its target named by a tag before each source line, which an "
                          "Argos package cannot put there (argostranslate gives CTranslate2 a target prefix only); "
                          "serve it with `aiayn serve`, or export it with --format ctranslate2")
    langs = t.run.languages()
    if not langs:
        raise ExportError(f"{t.run} records no languages; an Argos package is named by them (train on a data dir "
                          "prepared with --src and --tgt)")
    with tempfile.TemporaryDirectory() as tmp:
        _to_ctranslate2(t, Path(tmp), quantization, info, never=True)
        if (t.run.path / CALIBRATION).is_file():
            shutil.copyfile(t.run.path / CALIBRATION, Path(tmp) / CALIBRATION)
        out.mkdir(parents=True, exist_ok=True)
        readme = (f"# {langs[0]} to {langs[1]}\n\nExported by aiayn from {t.checkpoint} "
                  f"({info['parameters'] / 1e6:.1f}M parameters, {info['quantization']}).\n")
        return write_package(Path(tmp), out, (langs[0], langs[1]), readme=readme)


def _require(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise ExportError(f"this export needs the {module} library: pip install 'aiayn[export]'") from None


# --- CTranslate2 ------------------------------------------------------------------------------------------------


def _to_ctranslate2(t: Trained, out: Path, quantization: str | None, info: dict[str, Any], never: bool = False) -> None:
    _require("ctranslate2")
    from ctranslate2.converters.converter import Converter

    class _Spec(Converter):
        def _load(self) -> Any:
            return _ct2_spec(t, info_file, never)

    with tempfile.TemporaryDirectory() as tmp:                                 # the files are copied at save time
        info_file = Path(tmp) / INFO
        info_file.write_text(json.dumps(info, indent=2) + "\n")
        _Spec().convert(str(out), quantization=quantization, force=True)


def _ct2_spec(t: Trained, info_file: Path, never: bool = False) -> Any:
    """The run's model as a CTranslate2 ``TransformerSpec``, its vocabulary and files registered."""
    from ctranslate2.specs import common_spec, transformer_spec

    from ..align import method

    m, w = t.config.model, {k: v.float().numpy() for k, v in t.model.state_dict().items()}
    layer, _, heads = method(t.model)          # the attention its word alignments read (align.py): return_attention's
    spec = transformer_spec.TransformerSpec.from_config(
        (m.encoder_layers, m.decoder_layers), m.n_heads, pre_norm=m.norm == "pre",
        activation=getattr(common_spec.Activation, m.activation.upper()), alignment_layer=layer,
        alignment_heads=heads or m.n_heads)
    spec.config.layer_norm_epsilon = 1e-5                                  # torch.nn.LayerNorm's
    spec.config.add_source_eos = True                                      # aiayn's sources end with EOS
    spec.config.bos_token = spec.config.decoder_start_token = t.vocab.tgt.piece(m.bos_id)
    spec.config.eos_token, spec.config.unk_token = t.vocab.tgt.piece(m.eos_id), t.vocab.tgt.piece(m.unk_id)
    for side, embed, pos in ((spec.encoder, "src_embed", t.model.src_pos), (spec.decoder, "tgt_embed", t.model.tgt_pos)):
        embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings  # encoder: a list
        embeddings.weight = w[f"{embed}.lut.weight"]
        side.scale_embeddings = True                                           # §3.4: x sqrt(d_model)
        # sinusoids are written for at least 1,024 positions: engines that do not bound the length as aiayn does (Argos
        # Translate lets CTranslate2 decode 256 tokens) must not run out of them
        positions = pos.table() if pos.learned is not None else sinusoids(max(m.max_positions, 1024), m.d_model)
        side.position_encodings.encodings = positions.detach().float().numpy()
    if m.norm == "pre":
        _ct2_norm(spec.encoder.layer_norm, w, "enc_norm")
        _ct2_norm(spec.decoder.layer_norm, w, "dec_norm")
    for i, layer in enumerate(spec.encoder.layer):
        p = f"encoder.{i}"
        _ct2_linear(layer.self_attention.linear[0], w, f"{p}.self_attn.qkv_proj")     # [W^Q; W^K; W^V], fused
        _ct2_linear(layer.self_attention.linear[1], w, f"{p}.self_attn.out_proj")
        _ct2_norm(layer.self_attention.layer_norm, w, f"{p}.res_attn.norm")
        _ct2_ffn(layer.ffn, w, p)
    for i, layer in enumerate(spec.decoder.layer):
        p = f"decoder.{i}"
        _ct2_linear(layer.self_attention.linear[0], w, f"{p}.self_attn.qkv_proj")
        _ct2_linear(layer.self_attention.linear[1], w, f"{p}.self_attn.out_proj")
        _ct2_norm(layer.self_attention.layer_norm, w, f"{p}.res_self.norm")
        for j, name in enumerate(("q_proj", "kv_proj", "out_proj")):                 # [W^K; W^V] fused
            _ct2_linear(layer.attention.linear[j], w, f"{p}.cross_attn.{name}")
        _ct2_norm(layer.attention.layer_norm, w, f"{p}.res_cross.norm")
        _ct2_ffn(layer.ffn, w, p)
    _ct2_output(spec.decoder.projection, w, m, never)
    spec.register_source_vocabulary([t.vocab.src.piece(i) for i in range(t.vocab.src.vocab_size)])
    spec.register_target_vocabulary([t.vocab.tgt.piece(i) for i in range(t.vocab.tgt.vocab_size)])
    sides = ((t.vocab.src, t.vocab.src_file, EXPORT_SPM), (t.vocab.tgt, t.vocab.tgt_file, EXPORT_TGT_SPM))
    for tok, path, name in sides[: 1 if t.vocab.joint else 2]:
        spec.register_file(str(path), name)
        table = getattr(tok, "table_file", None)           # a piece table (Marian's): aiayn's tokenizer reads it beside
        if table is not None:
            spec.register_file(str(table), table_of(name).name)
    spec.register_file(str(info_file), INFO)
    shortlist = Shortlist.load(t.run.path)
    if shortlist is not None:                                  # CTranslate2's use_vmap decodes over its candidates
        spec.register_vocabulary_mapping(str(write_vmap(shortlist, info_file.parent / VMAP, t.vocab.src.piece,
                                                        t.vocab.tgt.piece)))
    return spec


def _ct2_output(spec: Any, w: dict[str, Any], m: ModelConfig, never: bool) -> None:
    """The output projection; ``never``: PAD and BOS are no output. aiayn's engines suppress them; a bias of -10^4 does
    so for engines that cannot be told (Argos Translate and LibreTranslate call CTranslate2 without
    suppress_sequences). It takes their probability out of the softmax's sum, so it is only for those (an untrained
    model gives them some)."""
    spec.weight = w["out_proj.weight"]
    if "out_proj.bias" in w or never:
        bias = w["out_proj.bias"].copy() if "out_proj.bias" in w else np.zeros(m.tgt_vocab_size, dtype=np.float32)
        if never:
            bias[[m.pad_id, m.bos_id]] = NEVER
        spec.bias = bias


def _ct2_linear(spec: Any, w: dict[str, Any], name: str) -> None:
    spec.weight = w[f"{name}.weight"]
    if f"{name}.bias" in w:
        spec.bias = w[f"{name}.bias"]


def _ct2_norm(spec: Any, w: dict[str, Any], name: str) -> None:
    spec.gamma, spec.beta = w[f"{name}.weight"], w[f"{name}.bias"]


def _ct2_ffn(spec: Any, w: dict[str, Any], prefix: str) -> None:
    _ct2_linear(spec.linear_0, w, f"{prefix}.ffn.w1")
    _ct2_linear(spec.linear_1, w, f"{prefix}.ffn.w2")
    _ct2_norm(spec.layer_norm, w, f"{prefix}.res_ffn.norm")


# --- Hugging Face -------------------------------------------------------------------------------------------------


def _hf_architecture(m: ModelConfig) -> str:
    """Which transformers class expresses the model exactly, or a clear refusal."""
    if m.norm == "post":
        if m.positions == "learned":
            raise ExportError("a post-norm model with learned positions has no exact Hugging Face equivalent "
                              "(MarianMTModel always recomputes sinusoidal positions); export to ctranslate2 instead")
        return "marian"
    if m.tie != "all":
        raise ExportError(f"a pre-norm model with tie={m.tie!r} has no exact Hugging Face equivalent "
                          "(PegasusForConditionalGeneration shares one embedding matrix); export to ctranslate2 instead")
    return "pegasus"


def _to_huggingface(t: Trained, out: Path, info: dict[str, Any]) -> None:
    _require("transformers")
    from transformers import (
        GenerationConfig,
        MarianConfig,
        MarianMTModel,
        MarianTokenizer,
        PegasusConfig,
        PegasusForConditionalGeneration,
    )

    m, d = t.config.model, t.config.decode
    arch = _hf_architecture(m)
    common: dict[str, Any] = dict(
        d_model=m.d_model, encoder_layers=m.encoder_layers, decoder_layers=m.decoder_layers,
        encoder_attention_heads=m.n_heads,
        decoder_attention_heads=m.n_heads, encoder_ffn_dim=m.d_ff, decoder_ffn_dim=m.d_ff, activation_function=m.activation,
        max_position_embeddings=m.max_positions, scale_embedding=True, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, pad_token_id=m.pad_id, eos_token_id=m.eos_id, bos_token_id=m.bos_id,
        decoder_start_token_id=m.bos_id, forced_eos_token_id=None, vocab_size=m.src_vocab_size,
        tie_word_embeddings=m.tie != "none",
    )
    if arch == "marian":
        hf: Any = MarianMTModel(MarianConfig(**common, decoder_vocab_size=m.tgt_vocab_size,
                                             share_encoder_decoder_embeddings=m.tie == "all"))
        perm = marian_order(m.d_model)                                                    # interleaved -> halves
    else:
        hf = PegasusForConditionalGeneration(PegasusConfig(**common))
        perm = torch.arange(m.d_model)
    _copy_weights(t.model, hf, perm, arch)
    hf.generation_config = GenerationConfig(
        decoder_start_token_id=m.bos_id, eos_token_id=m.eos_id, pad_token_id=m.pad_id, num_beams=d.beam,
        length_penalty=d.lenpen, early_stopping=True, bad_words_ids=[[m.pad_id], [m.bos_id]])
    hf.save_pretrained(out)
    with tempfile.TemporaryDirectory() as tmp:
        vocab = Path(tmp) / "vocab.json"
        vocab.write_text(json.dumps({t.vocab.src.piece(i): i for i in range(t.vocab.src.vocab_size)}))
        tgt = t.vocab.tgt
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Recommended: pip install sacremoses")
            tok = MarianTokenizer(str(t.vocab.src_file), str(t.vocab.tgt_file), str(vocab), unk_token=tgt.piece(m.unk_id),
                                  eos_token=tgt.piece(m.eos_id), pad_token=tgt.piece(m.pad_id),
                                  model_max_length=m.max_positions)
        tok.save_pretrained(out)
    (out / INFO).write_text(json.dumps({**info, "architecture": type(hf).__name__}, indent=2) + "\n")


def marian_order(d_model: int) -> torch.Tensor:
    """Marian's order of the d_model axis in aiayn's terms: position j of a Marian vector is aiayn's ``order[j]``
    (the sines of the even dimensions first, then the cosines of the odd ones; §3.5 interleaves them)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def layer_names(m: ModelConfig) -> Iterator[tuple[str, str, slice | None, bool, bool]]:
    """The per-layer weights of a post-norm model as (transformers name, aiayn name, rows of the aiayn matrix or
    None for all, input on the residual stream, output on it), without ``.weight``/``.bias``: the one table of
    the Marian / Pegasus layout, used by export and by import (pretrained.py). A LayerNorm is "output"."""
    D = m.d_model
    q, k, v = slice(0, D), slice(D, 2 * D), slice(2 * D, 3 * D)
    for side, n_layers in (("encoder", m.encoder_layers), ("decoder", m.decoder_layers)):
        for i in range(n_layers):
            h, o = f"model.{side}.layers.{i}", f"{side}.{i}"
            for name, part in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
                yield f"{h}.self_attn.{name}", f"{o}.self_attn.qkv_proj", part, True, False
            yield f"{h}.self_attn.out_proj", f"{o}.self_attn.out_proj", None, False, True
            yield f"{h}.self_attn_layer_norm", f"{o}.res_{'attn' if side == 'encoder' else 'self'}.norm", None, False, True
            if side == "decoder":
                yield f"{h}.encoder_attn.q_proj", f"{o}.cross_attn.q_proj", None, True, False
                yield f"{h}.encoder_attn.k_proj", f"{o}.cross_attn.kv_proj", q, True, False
                yield f"{h}.encoder_attn.v_proj", f"{o}.cross_attn.kv_proj", k, True, False
                yield f"{h}.encoder_attn.out_proj", f"{o}.cross_attn.out_proj", None, False, True
                yield f"{h}.encoder_attn_layer_norm", f"{o}.res_cross.norm", None, False, True
            yield f"{h}.fc1", f"{o}.ffn.w1", None, True, False
            yield f"{h}.fc2", f"{o}.ffn.w2", None, False, True
            yield f"{h}.final_layer_norm", f"{o}.res_ffn.norm", None, False, True


def _copy_weights(model: Transformer, hf: Any, perm: torch.Tensor, arch: str) -> None:
    """aiayn's weights into the transformers model, the d_model axis permuted by ``perm`` (the residual stream,
    embeddings, LayerNorms, output projection; never the heads' own dimensions)."""
    ours = model.state_dict()
    done: set[int] = set()

    def put(name: str, value: torch.Tensor) -> None:
        param = hf.get_parameter(name)
        if param.shape != value.shape:
            raise ExportError(f"internal: {name} is {tuple(param.shape)} in transformers, {tuple(value.shape)} here")
        with torch.no_grad():
            param.copy_(value)
        done.add(id(param))

    for hf_name, ours_name, part, d_in, d_out in layer_names(model.cfg):
        wt, b = ours[f"{ours_name}.weight"], ours[f"{ours_name}.bias"]
        if part is not None:
            wt, b = wt[part], b[part]
        wt = wt[:, perm] if d_in else wt
        put(f"{hf_name}.weight", wt[perm] if d_out else wt)
        put(f"{hf_name}.bias", b[perm] if d_out else b)
    put("model.encoder.embed_tokens.weight", ours["src_embed.lut.weight"][:, perm])
    put("model.decoder.embed_tokens.weight", ours["tgt_embed.lut.weight"][:, perm])
    put("lm_head.weight", ours["out_proj.weight"][:, perm])
    with torch.no_grad():
        hf.final_logits_bias.copy_(ours["out_proj.bias"] if "out_proj.bias" in ours else 0.0)
    if arch == "pegasus":
        for hf_name, ours_name in (("model.encoder.layer_norm", "enc_norm"), ("model.decoder.layer_norm", "dec_norm")):
            put(f"{hf_name}.weight", ours[f"{ours_name}.weight"])
            put(f"{hf_name}.bias", ours[f"{ours_name}.bias"])
        for side, pos in (("encoder", model.src_pos), ("decoder", model.tgt_pos)):
            put(f"model.{side}.embed_positions.weight", pos.table().detach())
    missing = [n for n, p in hf.named_parameters() if id(p) not in done and "embed_positions" not in n]
    if missing:
        raise ExportError(f"internal: no aiayn weight for {missing[:5]}")


# --- CTranslate2 as an engine: aiayn's conversion of a run, cached in it, and the engine on a conversion ------------


def convert(run: RunDir, ckpt: Path, out: Path, quantization: str | None) -> None:
    """Convert checkpoint ``ckpt`` of ``run`` for CTranslate2 into ``out`` (auto.converted's cache: older conversions
    of the same checkpoint removed, the new one checked on the run's validation lines)."""
    key = out.name.rsplit("-", 1)[0]
    for stale in out.parent.glob(f"{key}-*") if out.parent.is_dir() else ():
        log.info("the weights of %s changed since %s was converted: converting again", ckpt, stale.name)
        shutil.rmtree(stale)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log.info("converting %s for CTranslate2 (%s), once: cached in %s", ckpt, quantization or "float32", out)
    export(ckpt, "ctranslate2", tmp, quantization=quantization, force=True)
    _check(ckpt, run, tmp)
    tmp.rename(out)


def _check(ckpt: Path, run: RunDir, out: Path, lines: int = 64) -> None:
    """export.check on the first ``lines`` validation lines of the run's data dir, logged and kept as check.json."""
    from ..data import DataDir

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


# --- the check -----------------------------------------------------------------------------------------------------


def _limit_of(info: dict[str, Any]) -> Callable[[int], int]:
    """aiayn's length rule (search.max_length) with the export's recorded settings, for the other engines."""
    return lambda n: max_length(n, info["max_len_a"], info["max_len_b"], info["max_positions"])


def _groups(lines: Sequence[str], lengths: Sequence[int], limit: Callable[[int], int]) -> dict[int, list[int]]:
    """The non-blank lines' indices by their length limit (the engines take one limit per call)."""
    groups: dict[int, list[int]] = {}
    for i, (line, n) in enumerate(zip(lines, lengths, strict=True)):
        if line.strip():
            groups.setdefault(limit(n), []).append(i)
    return groups


def _placed(n: int, groups: dict[int, list[int]], texts: dict[int, list[str]]) -> list[str]:
    """Translations back in input order, blank lines blank, each one line (as aiayn's)."""
    out = [""] * n
    for limit, idx in groups.items():
        for i, text in zip(idx, texts[limit], strict=True):
            out[i] = one_line(text)
    return out


def engine_translate(engine: Engine, lines: Sequence[str], beam: int) -> list[str]:
    """Each line's best translation by ``engine`` through the pipeline, one line each (as ``aiayn translate``)."""
    from ..pipeline import Request, one_line_each, translate

    return one_line_each(translate(engine, Request(lines, decode={"beam": beam, "nbest": 1})).translations)


def ctranslate2_translate(out: Path, lines: Sequence[str], beam: int, compute_type: str = "float32") -> list[str]:
    """Translate with the CTranslate2 export in ``out`` (:meth:`CTranslate2Engine.from_export`)."""
    precision = {v: k for k, v in COMPUTE.items()}.get(compute_type, "fp32")
    return engine_translate(CTranslate2Engine.from_export(out, cast("Precision", precision)), lines, beam)


def huggingface_translate(out: Path, lines: Sequence[str], beam: int) -> list[str]:
    """Translate with the Hugging Face export in ``out``: ``AutoTokenizer`` + ``AutoModelForSeq2SeqLM.generate``."""
    _require("transformers")
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    info = json.loads((out / INFO).read_text())
    with warnings.catch_warnings():                  # MarianTokenizer recommends sacremoses, which it does not use here
        warnings.filterwarnings("ignore", "Recommended: pip install sacremoses")
        tok = AutoTokenizer.from_pretrained(str(out))
    model = AutoModelForSeq2SeqLM.from_pretrained(str(out)).eval()
    groups = _groups(lines, [len(ids) - 1 for ids in tok(list(lines))["input_ids"]], _limit_of(info))  # (EOS added)
    texts: dict[int, list[str]] = {}
    for limit, idx in groups.items():
        texts[limit] = []
        for start in range(0, len(idx), 32):
            enc = tok([lines[i] for i in idx[start : start + 32]], return_tensors="pt", padding=True)
            with torch.inference_mode():
                ids = model.generate(**enc, num_beams=beam, do_sample=False, max_new_tokens=limit)
            texts[limit] += tok.batch_decode(ids, skip_special_tokens=True)
    return _placed(len(lines), groups, texts)


ENGINES: dict[str, Callable[[Path, Sequence[str], int], list[str]]] = {
    "ctranslate2": ctranslate2_translate, "huggingface": huggingface_translate}
REQUIRED_IDENTICAL = 0.99    # the share of greedy translations a float32 export must translate identically


def check(path: str | Path, fmt: str, out: str | Path, lines: Sequence[str], refs: Sequence[str] | None = None,
          beams: Sequence[int] = (1, 4)) -> dict[str, Any]:
    """Translate ``lines`` with aiayn (fp32, CPU) and with the export in ``out``, greedy and beam 4. Per beam size:
    the identical lines (up to surrounding whitespace), and the BLEU of both against references ``refs`` (without
    them, the export's BLEU against aiayn's own translations, 100 when identical) with their difference.
    ``passed``: at least :data:`REQUIRED_IDENTICAL` of the greedy translations are identical; an export with
    quantized weights passes on any share (identity is expected of float32 exports only)."""
    if fmt not in ENGINES:
        raise ExportError(f"cannot check format {fmt!r}: expected one of {', '.join(ENGINES)}")
    out = Path(out)
    quantization = json.loads((out / INFO).read_text()).get("quantization", "float32")
    aiayn = TorchEngine.load(path, device="cpu", precision="fp32")
    # both engines rank finished hypotheses by log p / |Y| ** lenpen: aiayn's length_norm="length"
    result: dict[str, Any] = {"format": fmt, "sentences": len(lines), "quantization": quantization,
                              "length_norm": aiayn.decode.length_norm}
    lang = RunDir.locate(path)[0].target_language()
    for beam in beams:
        ours = engine_translate(aiayn, lines, beam)
        theirs = ENGINES[fmt](out, lines, beam)
        # identical up to surrounding whitespace, which Hugging Face's tokenizer strips when it decodes
        same = sum(a.strip() == b.strip() for a, b in zip(ours, theirs, strict=True))
        r: dict[str, Any] = {"identical": same, "identical_share": same / max(1, len(lines))}
        if refs is not None:
            r["bleu_aiayn"], r["bleu_export"] = score(ours, refs, lang)["bleu"], score(theirs, refs, lang)["bleu"]
        else:
            r["bleu_aiayn"], r["bleu_export"] = 100.0, score(theirs, ours, lang)["bleu"]
        r["bleu_difference"] = round(r["bleu_export"] - r["bleu_aiayn"], 2)
        result["greedy" if beam == 1 else f"beam{beam}"] = r
    greedy = result.get("greedy", {}).get("identical_share", 1.0)
    result["passed"] = quantization != "float32" or greedy >= REQUIRED_IDENTICAL
    return result
