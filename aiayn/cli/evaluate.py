"""``aiayn evaluate`` and ``aiayn calibrate``: a test set translated and scored, a run's confidence fitted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .common import add_decode_flags, add_processes_flag, add_request_flags, command, given, number
from .translate import loaded


def cmd_evaluate(a: argparse.Namespace) -> int:
    from ..data.datadir import read_lines
    from ..rundir import RunDir
    from ..training.evaluate import evaluate
    from ..translation.route import Route
    from ..translator import Translator

    src = list(read_lines(a.src, "replace"))
    refs = [list(read_lines(r, "replace")) for r in a.ref]
    for path, ref in zip(a.ref, refs, strict=True):
        if len(src) != len(ref):
            raise ValueError(f"{a.src} has {len(src)} lines but {path} has {len(ref)}")
    with loaded(a, given(a, "decode")) as engines:
        translator = Translator(Route(tuple(engines)))          # (several: a pivot, each in turn)
        run = RunDir.locate(a.model[-1])[0]
        lang = a.lang or a.target or run.target_language()
        r = evaluate(translator, src, refs if len(refs) > 1 else refs[0], a.hyps or run.hypotheses(a.src.name),
                     lang=lang, tokenize=a.tokenize, ter=a.ter, **given(a, "request"))
    if a.json:
        print(json.dumps(r))
    else:
        ter = f"  TER {r['ter']:.2f}" if "ter" in r else ""
        print(f"BLEU {r['bleu']:.2f}  (lowercased {r['bleu_lc']:.2f})  chrF {r['chrf']:.2f}{ter}  "
              f"{r['sentences']} sentences in {r['seconds']:.1f} s")
        print(f"  {r['signature']}")
        if r.get("confidence"):
            c = r["confidence"]
            print(f"  confidence: Pearson r {number(c['pearson'])} with sentence chrF, ROC AUC "
                  f"{number(c['roc_auc'])} for the "
                  f"{c['below_threshold']:.1%} under chrF {c['threshold']:g} ({c['calibration']})")
        print(f"  hypotheses: {r['hypotheses']}")
    return 0


def cmd_calibrate(a: argparse.Namespace) -> int:
    from ..data.multilingual import for_direction
    from ..engines.auto import load
    from ..rundir import RunDir
    from ..training.evaluate import calibrate, calibrate_directions

    run = RunDir.locate(a.model)[0]
    fit_on, held = _calibration_lines(a, run)
    engine = load(a.model, a.engine)
    try:
        if fit_on is None:                      # a multilingual run on its validation split: each direction
            data = _data_dir(run)
            test = (data.raw_lines("test", "src"), data.raw_lines("test", "tgt")) if data.has_split("test") else None
            cal, report = calibrate_directions(engine, engine.multilingual, (data.raw_lines("valid", "src"),
                                                                             data.raw_lines("valid", "tgt")),
                                               a.threshold, test)
        else:
            cal, report = calibrate(for_direction(engine, a.source, a.target), fit_on[0], fit_on[1], a.threshold, held)
    finally:
        engine.close()
    out = run.path / "calibration.json"
    cal.save(out)
    for name, r in [("", report), *sorted(report.get("directions", {}).items())]:
        for part, what in (("fitted", "fitted on"), ("held_out", "held out")):
            if part in r:
                x = r[part]
                print(f"{name + ': ' if name else ''}{what}: {x['sentences']} sentences, Pearson r "
                      f"{number(x['pearson'])} with sentence chrF, ROC AUC {number(x['roc_auc'])} for the "
                      f"{x['below_threshold']:.1%} under chrF {a.threshold:g}")
    print(f"calibration: {out}")
    return 0


def _data_dir(run: Any) -> Any:
    from ..data.datadir import DataDir

    info = run.data_info()
    if "data_dir" not in info or not DataDir(info["data_dir"]).has_split("valid"):
        raise ValueError(f"{run.path}: its data dir (data.json's data_dir) is not here; give --src and --ref")
    return DataDir(info["data_dir"])


def _calibration_lines(a: argparse.Namespace, run: Any) -> tuple[Any, Any]:
    """What ``aiayn calibrate`` fits on and holds out: --src/--ref (nothing held out), else the run's validation and
    test splits (None for a multilingual run: each direction's lines are its own)."""
    from ..data.datadir import read_lines

    if a.src or a.ref:
        if not (a.src and a.ref):
            raise ValueError("--src and --ref go together: the lines to calibrate on and their references")
        return (list(read_lines(a.src, "replace")), list(read_lines(a.ref, "replace"))), None
    data = _data_dir(run)
    if data.multilingual is not None:
        return None, None
    held = (data.raw_lines("test", "src"), data.raw_lines("test", "tgt")) if data.has_split("test") else None
    return (data.raw_lines("valid", "src"), data.raw_lines("valid", "tgt")), held


def add_calibrate(sub: argparse._SubParsersAction) -> None:
    from ..decoding.hypotheses import THRESHOLD

    p = command(sub, cmd_calibrate)
    p.add_argument("--model", required=True, type=Path, help="the run dir (its calibration.json is written there)")
    p.add_argument("--engine", default="auto",
                   help="the engine whose translations are calibrated (default: %(default)s, as translate)")
    p.add_argument("--threshold", type=float, default=THRESHOLD,
                   help="sentence chrF at or above which a translation is acceptable (default %(default)s)")
    p.add_argument("--src", type=Path, help="lines to calibrate on (default: the run's validation split)")
    p.add_argument("--ref", type=Path, help="their references")
    p.add_argument("--source", help="a multilingual run with --src/--ref: the direction they are (default without "
                                    "them: every direction, each on its own validation lines)")
    p.add_argument("--target", help="see --source")


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = command(sub, cmd_evaluate)
    add_decode_flags(p, exclude=("nbest",))          # the best translation of each line is scored
    add_request_flags(p, exclude=("format", "alignments"))     # (a test set is plain text, scored as such)
    p.add_argument("--src", required=True, type=Path, help="source file (plain or .gz)")
    p.add_argument("--ref", required=True, type=Path, action="append",
                   help="raw reference file (plain or .gz); repeat for several references")
    p.add_argument("--source", metavar="LANG", help="with a multilingual model: the direction's source language")
    p.add_argument("--target", metavar="LANG", help="with a multilingual model: the direction's target language")
    p.add_argument("--hyps", type=Path, help="where to write the hypotheses (default RUN_DIR/hyps/SRC.hyp)")
    p.add_argument("--tokenize", help="sacreBLEU tokenizer for BLEU (13a, zh, ja-mecab, ko-mecab, char, intl, "
                   "flores200, none; default: chosen from the target language)")
    p.add_argument("--lang", help="target language code for choosing the tokenizer (default: the run's)")
    p.add_argument("--ter", action="store_true", help="also compute TER")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_processes_flag(p)
