"""Export a trained run to the engines translation is deployed with, and check that it still translates the same.

- **CTranslate2** (the C++ engine OpenNMT-py, fairseq and Marian users convert to): the conversion the CTranslate2
  engine makes of a run on first use (engines/conversion.py), written where the user says.
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

import torch

from ..config import ModelConfig, Precision
from ..decoding.hypotheses import FILE as CALIBRATION
from ..decoding.hypotheses import max_length
from ..engines.base import Engine, one_line
from ..engines.conversion import ExportError, exportable, info_of, require, write
from ..engines.ctranslate2 import COMPUTE, INFO, CTranslate2Engine
from ..engines.torch import TorchEngine, Trained, load_trained
from ..model import Transformer
from ..rundir import RunDir
from ..training.evaluate import score

log = logging.getLogger(__name__)

FORMATS = ("ctranslate2", "huggingface", "argos")
CT2_QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def export(path: str | Path, fmt: str, out: str | Path, quantization: str | None = None, force: bool = False,
           directions: Sequence[tuple[str, str]] | None = None) -> Path:
    """Write the model of run dir (or checkpoint) ``path`` to ``out`` in ``fmt`` (see :data:`FORMATS`);
    ``directions``: a multilingual run's Argos packages (default: one per direction it was trained on)."""
    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if quantization is not None and (fmt == "huggingface" or quantization not in CT2_QUANTIZATIONS):
        raise ExportError(f"--quantization {quantization!r}: CTranslate2 exports (and Argos packages) take one of "
                          f"{', '.join(CT2_QUANTIZATIONS)}; Hugging Face exports are written in fp32")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise ExportError(f"{out} exists and is not empty; choose another --out or pass --force")
    t = load_trained(path)
    exportable(t)
    info = info_of(t, fmt, quantization)
    if fmt == "argos":
        return _to_argos(t, out, quantization, info, directions)
    if fmt == "ctranslate2":
        write(t, out, quantization, info)
    else:
        _to_huggingface(t, out, info)
    if (t.run.path / CALIBRATION).is_file():                # its confidence, read by CTranslate2Engine.from_export
        shutil.copyfile(t.run.path / CALIBRATION, out / CALIBRATION)
    return out


def _to_argos(t: Trained, out: Path, quantization: str | None, info: dict[str, Any],
              directions: Sequence[tuple[str, str]] | None = None) -> Path:
    """An Argos package (argos.py) of the run's CTranslate2 export, written in folder ``out``; its path. A
    multilingual run whose tag is the target's gives one package per direction (``directions``, default every one it
    was trained on), each with its tag as Argos's ``target_prefix``; ``out`` is then returned."""
    from .argos import write_package

    if not t.vocab.joint:
        raise ExportError(f"{t.run} has a SentencePiece model per side; an Argos package holds one for both")
    multi = t.run.multilingual()
    if multi is not None and multi.position == "source":
        raise ExportError(f"{t.run} is a multilingual run, its target named by a tag before each source line, which an "
                          "Argos package cannot put there (argostranslate gives CTranslate2 a target prefix only): "
                          "train on data prepared with --tag-position target for Argos packages, serve this one with "
                          "`aiayn serve`, or export it with --format ctranslate2")
    pairs = _argos_pairs(t, directions)
    with tempfile.TemporaryDirectory() as tmp:
        write(t, Path(tmp), quantization, info, never=True)
        if (t.run.path / CALIBRATION).is_file():
            shutil.copyfile(t.run.path / CALIBRATION, Path(tmp) / CALIBRATION)
        out.mkdir(parents=True, exist_ok=True)
        made = [write_package(Path(tmp), out, (a, b), readme=(
            f"# {a} to {b}\n\nExported by aiayn from {t.checkpoint} ({info['parameters'] / 1e6:.1f}M parameters, "
            f"{info['quantization']}{', one direction of a multilingual model' if multi else ''}).\n"),
            target_prefix=multi.tag(b) if multi is not None else "") for a, b in pairs]
    return made[0] if len(made) == 1 else out


def _argos_pairs(t: Trained, directions: Sequence[tuple[str, str]] | None) -> Sequence[tuple[str, str]]:
    """The directions of a run's Argos packages: a bilingual run's one, or those of a multilingual run asked for
    (default: every one it was trained on), each checked."""
    multi, langs = t.run.multilingual(), t.run.languages()
    if multi is None:
        if not langs:
            raise ExportError(f"{t.run} records no languages; an Argos package is named by them (train on a data dir "
                              "prepared with --src and --tgt)")
        if directions and tuple(directions) != (langs,):
            raise ExportError(f"{t.run} translates {langs[0]} into {langs[1]} only")
        return [langs]
    for a, b in directions or ():
        try:
            multi.check(a, b)
        except ValueError as e:
            raise ExportError(f"--source {a} --target {b}: {e}") from None
    return directions or multi.directions


# --- CTranslate2 ------------------------------------------------------------------------------------------------


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
    require("transformers")
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
    from ..translation.pipeline import Request, one_line_each, translate

    return one_line_each(translate(engine, Request(lines, decode={"beam": beam, "nbest": 1})).translations)


def ctranslate2_translate(out: Path, lines: Sequence[str], beam: int, compute_type: str = "float32") -> list[str]:
    """Translate with the CTranslate2 export in ``out`` (:meth:`CTranslate2Engine.from_export`)."""
    precision = {v: k for k, v in COMPUTE.items()}.get(compute_type, "fp32")
    return engine_translate(CTranslate2Engine.from_export(out, cast("Precision", precision)), lines, beam)


def huggingface_translate(out: Path, lines: Sequence[str], beam: int) -> list[str]:
    """Translate with the Hugging Face export in ``out``: ``AutoTokenizer`` + ``AutoModelForSeq2SeqLM.generate``."""
    require("transformers")
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
