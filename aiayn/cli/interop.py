"""``aiayn export`` and ``aiayn import``: a run to CTranslate2, Hugging Face or an Argos package, a Marian model into a
run.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .common import command

log = logging.getLogger("aiayn")


def cmd_export(a: argparse.Namespace) -> int:
    """Write a run's model in another engine's format."""
    from ..data.datadir import read_lines
    from ..interop.export import REQUIRED_IDENTICAL, check, export

    if a.check and a.format == "argos":
        raise ValueError("--check compares CTranslate2 and Hugging Face exports; an Argos package's model is the "
                         "CTranslate2 export: check that one (--format ctranslate2 --check FILE)")
    if (a.source is None) != (a.target is None) or (a.source and a.format != "argos"):
        raise ValueError("--source and --target go together, and choose the direction of a multilingual run's Argos "
                         "package (--format argos)")
    out = export(a.model, a.format, a.out, a.quantization, a.force,
                 [(a.source, a.target)] if a.source else None)
    log.info("exported %s to %s (%s)", a.model, out, a.format)
    if a.format == "argos":
        print(out)
    if not a.check:
        return 0
    lines = list(read_lines(a.check, "replace"))
    refs = list(read_lines(a.check_ref, "replace")) if a.check_ref else None
    if refs is not None and len(refs) != len(lines):
        raise ValueError(f"{a.check} has {len(lines)} lines but {a.check_ref} has {len(refs)}")
    r = check(a.model, a.format, out, lines, refs)
    against = "the references" if refs else "aiayn's translations"
    for name in ("greedy", "beam4"):
        x = r[name]
        print(f"{name:7s} identical {x['identical']}/{r['sentences']} ({100 * x['identical_share']:.1f}%)  BLEU against "
              f"{against}: aiayn {x['bleu_aiayn']:.2f}, export {x['bleu_export']:.2f} ({x['bleu_difference']:+.2f})")
    if r["length_norm"] != "length":
        print(f"(beam: this run ranks hypotheses with decode.length_norm={r['length_norm']}, the export by "
              "log p / |Y| ** lenpen; set decode.length_norm=length for the same beam search)")
    if r["quantization"] != "float32":
        print(f"(the export's weights are {r['quantization']}: identity is expected of float32 exports only)")
    if not r["passed"]:
        print(f"aiayn export: check failed: {100 * r['greedy']['identical_share']:.1f}% of greedy translations are "
              f"identical (at least {100 * REQUIRED_IDENTICAL:g}% expected)", file=sys.stderr)
        return 1
    return 0


def add_export(sub: argparse._SubParsersAction) -> None:
    from ..interop.export import CT2_QUANTIZATIONS, FORMATS, REQUIRED_IDENTICAL

    p = command(sub, cmd_export,
                 description=f"{cmd_export.__doc__} --check FILE translates FILE with aiayn and with the export (greedy "
                 f"and beam 4, fp32) and fails when fewer than {100 * REQUIRED_IDENTICAL:g}% of the greedy "
                 "translations are identical.")
    p.add_argument("--model", required=True, type=Path, help="a run dir (or a checkpoint dir inside one)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--out", required=True, type=Path, help="the directory to write (argos: the folder the "
                   ".argosmodel is written in)")
    p.add_argument("--quantization", choices=CT2_QUANTIZATIONS, help="CTranslate2 weight type (default float32)")
    p.add_argument("--check", type=Path, help="source sentences to translate with both and compare")
    p.add_argument("--check-ref", type=Path, help="references for --check: BLEU of both against them")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out")
    p.add_argument("--source", help="argos, a multilingual run: the package of this direction only (default: one "
                   "package per direction it was trained on)")
    p.add_argument("--target", help="argos, a multilingual run: see --source")


def cmd_import(a: argparse.Namespace) -> int:
    """Read a Hugging Face MarianMTModel with its MarianTokenizer (a local directory, or a hub name such as
    Helsinki-NLP/opus-mt-de-en) into a run directory that translate, evaluate, serve, export and train --init-from
    use."""
    from ..engines.torch import load_trained
    from ..interop.pretrained import import_model

    out = import_model(a.source, a.out, a.format, a.src, a.tgt, a.force)
    t = load_trained(out)
    m = t.config.model
    langs = t.run.languages()
    print(f"imported {a.source} into {out}: {sum(p.numel() for p in t.model.parameters()) / 1e6:.1f}M parameters, "
          f"{m.encoder_layers}+{m.decoder_layers} layers, d_model {m.d_model}, {m.activation}, vocabulary {m.tgt_vocab_size}"
          + (f", {langs[0]}->{langs[1]}" if langs else ""))
    return 0


def add_import(sub: argparse._SubParsersAction) -> None:
    from ..interop.pretrained import FORMATS

    p = command(sub, cmd_import)
    p.add_argument("source", help="a model directory or a Hugging Face hub name")
    p.add_argument("--from", dest="format", default="huggingface", choices=FORMATS, help="its format")
    p.add_argument("--out", required=True, type=Path, help="the run directory to write")
    p.add_argument("--src", help="source language code (default: the tokenizer's, or the opus-mt-SRC-TGT name's)")
    p.add_argument("--tgt", help="target language code (chooses sacreBLEU's tokenizer)")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out")
