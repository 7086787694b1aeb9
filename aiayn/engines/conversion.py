"""The CTranslate2 conversion: a run's model described with CTranslate2's own specification API
(``ctranslate2.specs.TransformerSpec``) and written by its converter, the SentencePiece model beside it, with what the
run knows of its decoding and its text (``aiayn-export.json``). Every aiayn variant is expressible: post-norm and
pre-norm, every tie mode, sinusoidal and learned positions (the position table is stored as it is).

Two users: the CTranslate2 engine, whose loader (engines/auto.py) converts a run once on first use (:func:`convert`,
checked on the run's validation lines and cached in the run dir), and ``aiayn export --format ctranslate2`` (or
``argos``: interop/export.py). It lives beside the engine so that the engines import nothing above them.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..config import ModelConfig
from ..data.tokenizer import table_of
from ..decoding.hypotheses import FILE as CALIBRATION
from ..decoding.shortlist import Shortlist, write_vmap
from ..model import sinusoids
from ..rundir import RunDir
from .ctranslate2 import EXPORT_SPM, EXPORT_TGT_SPM, INFO, CTranslate2Engine
from .torch import TorchEngine, Trained, load_trained

log = logging.getLogger(__name__)

NEVER = -1e4                        # the output bias of the tokens no export may produce (PAD, BOS)
VMAP = "vmap.txt"                   # in a CTranslate2 export of a run with a shortlist: its vocabulary map


class ExportError(ValueError):
    """The export cannot be made (a variant the target cannot express, a missing library, an occupied --out)."""


def require(module: str) -> Any:
    """Library ``module``, imported; an ExportError saying how to install it where it is missing."""
    try:
        return __import__(module)
    except ImportError:
        raise ExportError(f"this export needs the {module} library: pip install 'aiayn[export]'") from None


def exportable(t: Trained) -> None:
    """An ExportError where the run's vocabulary cannot be exported (the two sides numbered apart, or not
    SentencePiece)."""
    v = t.vocab
    if not (v.shared_ids and v.src.kind == v.tgt.kind == "sentencepiece"):
        raise ExportError(f"{t.run} uses {'separate vocabularies' if not v.shared_ids else 'a tokenizers file'}: "
                          "export supports runs whose two sides number their SentencePiece pieces alike (one joint "
                          "vocabulary, `aiayn prepare`'s default, or an imported Marian model's piece table)")


def info_of(t: Trained, fmt: str, quantization: str | None) -> dict[str, Any]:
    """What an export carries of the run (``aiayn-export.json``): its decoding, its languages and text norms, the
    pieces it never produces, its model (read by CTranslate2Engine.from_export)."""
    v, d, m = t.vocab, t.config.decode, t.config.model
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
    return info


def write(t: Trained, out: Path, quantization: str | None, info: dict[str, Any], never: bool = False) -> None:
    """The CTranslate2 model of ``t`` written to ``out`` with ``info``; ``never``: PAD and BOS given a bias that
    keeps engines that cannot be told from producing them (:func:`_ct2_output`)."""
    require("ctranslate2")
    from ctranslate2.converters.converter import Converter

    class _Spec(Converter):
        def _load(self) -> Any:
            return _spec(t, info_file, never)

    with tempfile.TemporaryDirectory() as tmp:                                 # the files are copied at save time
        info_file = Path(tmp) / INFO
        info_file.write_text(json.dumps(info, indent=2) + "\n")
        _Spec().convert(str(out), quantization=quantization, force=True)


def _spec(t: Trained, info_file: Path, never: bool = False) -> Any:
    """The run's model as a CTranslate2 ``TransformerSpec``, its vocabulary and files registered."""
    from ctranslate2.specs import common_spec, transformer_spec

    from ..decoding.align import method

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
        _norm(spec.encoder.layer_norm, w, "enc_norm")
        _norm(spec.decoder.layer_norm, w, "dec_norm")
    for i, layer in enumerate(spec.encoder.layer):
        p = f"encoder.{i}"
        _linear(layer.self_attention.linear[0], w, f"{p}.self_attn.qkv_proj")     # [W^Q; W^K; W^V], fused
        _linear(layer.self_attention.linear[1], w, f"{p}.self_attn.out_proj")
        _norm(layer.self_attention.layer_norm, w, f"{p}.res_attn.norm")
        _ffn(layer.ffn, w, p)
    for i, layer in enumerate(spec.decoder.layer):
        p = f"decoder.{i}"
        _linear(layer.self_attention.linear[0], w, f"{p}.self_attn.qkv_proj")
        _linear(layer.self_attention.linear[1], w, f"{p}.self_attn.out_proj")
        _norm(layer.self_attention.layer_norm, w, f"{p}.res_self.norm")
        for j, name in enumerate(("q_proj", "kv_proj", "out_proj")):                 # [W^K; W^V] fused
            _linear(layer.attention.linear[j], w, f"{p}.cross_attn.{name}")
        _norm(layer.attention.layer_norm, w, f"{p}.res_cross.norm")
        _ffn(layer.ffn, w, p)
    _output(spec.decoder.projection, w, m, never)
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


def _output(spec: Any, w: dict[str, Any], m: ModelConfig, never: bool) -> None:
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


def _linear(spec: Any, w: dict[str, Any], name: str) -> None:
    spec.weight = w[f"{name}.weight"]
    if f"{name}.bias" in w:
        spec.bias = w[f"{name}.bias"]


def _norm(spec: Any, w: dict[str, Any], name: str) -> None:
    spec.gamma, spec.beta = w[f"{name}.weight"], w[f"{name}.bias"]


def _ffn(spec: Any, w: dict[str, Any], prefix: str) -> None:
    _linear(spec.linear_0, w, f"{prefix}.ffn.w1")
    _linear(spec.linear_1, w, f"{prefix}.ffn.w2")
    _norm(spec.layer_norm, w, f"{prefix}.res_ffn.norm")


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
    t = load_trained(ckpt)
    exportable(t)
    write(t, tmp, quantization, info_of(t, "ctranslate2", quantization))
    if (run.path / CALIBRATION).is_file():                  # its confidence, read by CTranslate2Engine.from_export
        shutil.copyfile(run.path / CALIBRATION, tmp / CALIBRATION)
    _check(t, run, tmp)
    tmp.rename(out)


def _check(t: Trained, run: RunDir, out: Path, lines: int = 64) -> None:
    """The first ``lines`` validation lines of the run's data dir translated by aiayn (fp32) and by the conversion,
    greedy and beam 4, each line as one sentence: the identical ones logged and kept in check.json."""
    from ..data.datadir import DataDir

    info = run.data_info()
    try:
        if info.get("data_dir") is None:            # a run made without one, or whose data dir was left out
            raise ValueError("none recorded")
        data = DataDir(info["data_dir"])
        src = data.raw_file("valid", data.src).read_text(encoding="utf-8").splitlines()[:lines]
    except (KeyError, OSError, ValueError):
        log.warning("the run's validation lines were not found (data dir %s): the conversion is not checked",
                    info.get("data_dir"))
        return
    src = [line for line in src if line.strip()]
    ours = TorchEngine.load(t.checkpoint, device="cpu", precision="fp32")
    theirs = CTranslate2Engine.from_export(out, "fp32")
    result: dict[str, Any] = {"sentences": len(src)}
    for name, beam in (("greedy", 1), ("beam4", 4)):
        a, b = ([engine.detokenize([h[0].tokens for h in engine.translate_hypotheses(src, beam=beam, nbest=1)])][0]
                for engine in (ours, theirs))
        same = sum(x.strip() == y.strip() for x, y in zip(a, b, strict=True))
        result[name] = {"identical": same, "identical_share": same / max(1, len(src))}
        log.info("CTranslate2 check, %s: %d/%d validation lines identical to aiayn's (fp32)", name, same, len(src))
    theirs.close()
    (out / "check.json").write_text(json.dumps(result, indent=2) + "\n")
