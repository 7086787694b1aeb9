"""Confidence per sentence (aiayn/decoding/hypotheses.py): how well it finds the bad translations, what it costs, and a
cascade that hands the unsure ones to a stronger model.

    python -m benchmarks confidence --model runs/demo/run-de-en [--model runs/student/run-de-en ...] \\
        [--first runs/student/run-de-en --fallback runs/demo/run-de-en --thresholds 0.3 0.5 0.7] [--engine auto]

- **Quality**, on the held-out test split of the first model's data dir (not what ``aiayn calibrate`` fitted on, the
  validation split): Pearson's r of each sentence's confidence with its sentence chrF, and the ROC AUC of the
  confidence for finding the sentences under the calibration's chrF threshold, per ``--model``, each with its own
  calibration where its run has one and the package's otherwise (bundled/calibration.json, fitted on the demo
  model): a model it was not fitted on says how far a calibration carries.
- **Cost**, on the first model: CTranslate2's beam search of the test set asking for one hypothesis and for two (the
  runner-up the features read), interleaved, three times each, and the time of the features and the calibration
  for every sentence; aiayn's own beam search keeps the runner-up anyway, so its cost is the features' alone.
- **Cascade** (``--first`` and ``--fallback``): the test set translated by the first alone, by the fallback alone,
  and by the first with each line less sure than each ``--thresholds`` value translated again by the fallback
  (route.Route with a fallback, as ``aiayn translate --fallback``): BLEU, the share of lines sent on, and
  sentences/s, all in this process on this CPU.

Records ``results/confidence/confidence-<date>.json``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402


def quality(engine: Any, src: list[str], ref: list[str]) -> dict[str, Any]:
    from aiayn.training.evaluate import agreement, sentence_features

    x, chrf = sentence_features(engine, src, ref)
    cal = engine.calibration
    return {**agreement(cal(x), chrf, cal.threshold), "threshold": cal.threshold, "calibration": cal.source,
            "engine": engine.engine, "sentences": len(x)}


def cost(engine: Any, src: list[str]) -> dict[str, Any]:
    """The first model's decoding time with and without what the confidence adds (the module's docstring)."""
    from aiayn.translation.pipeline import feature_rows

    fast = getattr(engine, "fast", engine)
    out: dict[str, Any] = {"engine": fast.engine}
    ids = fast.encode(src)
    if fast.engine == "ctranslate2":
        d = fast.decode
        toks = [[fast.vocab.src.piece(t) for t in x] for x in ids]
        times: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(3):
            for n in (1, 2):
                t0 = time.perf_counter()
                fast.translator.translate_batch(toks, beam_size=d.beam, length_penalty=d.lenpen, num_hypotheses=n,
                                                return_scores=True, max_batch_size=max(1, d.batch_tokens // d.beam),
                                                batch_type="tokens")
                times[n].append(time.perf_counter() - t0)
        out["decode_s_one"], out["decode_s_two"] = min(times[1]), min(times[2])
        base = out["decode_s_one"]
    else:
        t0 = time.perf_counter()
        fast.hypotheses(ids, fast.decode, None)
        base = out["decode_s_one"] = time.perf_counter() - t0
    decode = fast.settings(nbest=1)
    hyps = [hs[0] for hs in fast.hypotheses(ids, decode, None)]
    texts = fast.detokenize([h.tokens for h in hyps])
    t0 = time.perf_counter()
    fast.calibration(feature_rows(fast, list(zip(src, ids, strict=True)), hyps, texts))
    out["features_s"] = time.perf_counter() - t0
    extra = out["features_s"] + max(0.0, out.get("decode_s_two", base) - base)
    out["share_of_decoding"] = round(extra / base, 4)
    return out


def cascade(first: Any, fallback: Any, src: list[str], ref: list[str], thresholds: list[float]) -> dict[str, Any]:
    from aiayn.training.evaluate import score
    from aiayn.translation.pipeline import Request, one_line_each
    from aiayn.translation.route import Route

    def run(name: str, engines: list[Any], back: list[Any], x: float) -> dict[str, Any]:
        t0 = time.perf_counter()
        route = Route(tuple(e.engine for e in engines), Route(tuple(e.engine for e in back)) if back else None, x)
        out, counts = route.follow(Request(src, decode={"nbest": 1}))
        seconds = time.perf_counter() - t0
        s = score(one_line_each(out), ref)
        row = {"bleu": s["bleu"], "chrf": s["chrf"], "seconds": round(seconds, 2),
               "sentences_per_s": round(len(src) / seconds, 1), "sent_on": round(counts["fallback.sent"] / len(src), 4)}
        print(f"  {name}: BLEU {row['bleu']:.2f}, {row['sentences_per_s']:.1f} sentences/s, "
              f"{row['sent_on']:.1%} sent on", flush=True)
        return row

    rows = {"teacher": run("fallback alone", [fallback], [], 0.0), "student": run("first alone", [first], [], 0.0)}
    for x in thresholds:
        rows[f"cascade_{x:g}"] = run(f"first, under {x:g} to the fallback", [first], [fallback], x)
    teacher = rows["teacher"]
    for name, row in rows.items():
        if name != "teacher":
            row["bleu_vs_teacher"] = round(row["bleu"] - teacher["bleu"], 2)
            row["speed_vs_teacher"] = round(row["sentences_per_s"] / teacher["sentences_per_s"], 2)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks confidence", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, action="append", help="a run dir (repeat for several)")
    p.add_argument("--first", help="the cascade's first (fast) model")
    p.add_argument("--fallback", help="the cascade's fallback (stronger) model")
    p.add_argument("--thresholds", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    p.add_argument("--first-beam", type=int, help="the first model's beam (default: its run's; 1: greedy)")
    p.add_argument("--engine", default="auto")
    a = p.parse_args(argv)
    from aiayn import Translator
    from aiayn.data.datadir import DataDir
    from aiayn.rundir import RunDir

    data = DataDir(RunDir.locate(a.model[0])[0].data_info()["data_dir"])
    src, ref = data.raw_lines("test", "src"), data.raw_lines("test", "tgt")
    out: dict[str, Any] = {"data": str(data.path), "split": "test", "cpu": platform.processor() or platform.machine(),
                           "quality": {}}
    for k, model in enumerate(a.model):
        engine = Translator.load(model, a.engine)
        try:
            out["quality"][model] = q = quality(engine, src, ref)
            print(f"{model}: Pearson r {q['pearson']:.3f}, ROC AUC {q['roc_auc']:.3f} ({q['calibration']})", flush=True)
            if k == 0:
                out["cost"] = c = cost(engine, src)
                print(f"  cost: {c['share_of_decoding']:.1%} of decoding time", flush=True)
        finally:
            engine.close()
    if a.first and a.fallback:
        first = Translator.load(a.first, a.engine, **({"beam": a.first_beam} if a.first_beam else {}))
        fallback = Translator.load(a.fallback, a.engine)
        try:
            out["cascade"] = {"first": a.first, "first_beam": first.engine.decode.beam, "fallback": a.fallback,
                              "fallback_beam": fallback.engine.decode.beam,
                              **cascade(first, fallback, src, ref, a.thresholds)}
        finally:
            first.close()
            fallback.close()
    path = record.write("confidence", out)
    print(f"recorded: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
