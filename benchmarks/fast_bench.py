"""Speed against quality: a teacher and its distilled students, on aiayn's engine and on their CTranslate2 exports.

    python -m benchmarks fast --teacher runs/demo/run-de-en [--student runs/fast/student-de-en] \\
        --src runs/demo/data/test.de --ref runs/demo/data/test.en [--lines 1000] [--workers 1 2]

Every row translates the same ``--lines`` lines of --src and scores them against --ref (sacreBLEU, lowercased BLEU as
the headline, the run's target-language tokenizer): each model x engine (aiayn; its CTranslate2 export) x precision
(int8, fp32) x search (greedy, beam 4) x shortlist (off; on, where the run has one: ``aiayn shortlist``) x workers
(aiayn: batches decoded side by side, one core each, in worker processes as ``aiayn translate`` decodes them;
CTranslate2: ``inter_threads``, one core each). Each row is timed after a warm-up on 50 other lines, in this process
(and its workers), so every ratio compares rows of the same run on the same machine. Prints a Markdown table and the
issue-40 criteria (each a ratio of two rows; with --student) and issue 54's (aiayn's engine against CTranslate2 on
each model, int8, the most workers), writes the record ``results/fast/fast-<date>.json`` and a plot (sentences/s
on a log x axis, test BLEU on y) beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402


def _translate(decoder: Any, lines: list[str], beam: int, shortlist: bool) -> list[str]:
    """Translate with aiayn's Translator or CTranslate2 (ct2.CTranslate2Engine): the same call."""
    return list(decoder.translate(lines, beam=beam, shortlist=shortlist))


def _rows(models: dict[str, Path], src: list[str], ref: list[str], warm: list[str], workers: list[int],
          engines: list[str], lang: str | None, tmp: Path) -> list[dict[str, Any]]:
    import torch

    from aiayn import Translator
    from aiayn.decoding.shortlist import Shortlist
    from aiayn.engines.ctranslate2 import CTranslate2Engine
    from aiayn.interop.export import export
    from aiayn.training.evaluate import score

    rows = []
    for name, run in models.items():
        has_list = Shortlist.load(run) is not None
        for engine in engines:
            for precision in ("int8", "fp32"):
                if engine == "ctranslate2":
                    out = export(run, "ctranslate2", tmp / f"{name}-{precision}",
                                 quantization="int8" if precision == "int8" else None, force=True)
                for w in workers:
                    torch.set_num_threads(w)
                    if engine == "aiayn":
                        # as `aiayn translate` decodes: 2+ workers are processes
                        t = Translator.load(run, "torch", processes=True, precision=precision, device="cpu", workers=w)
                    else:
                        ct2 = Translator(CTranslate2Engine.from_export(out, "int8" if precision == "int8" else "fp32",
                                                                workers=w, threads=1))
                    for beam in (1, 4):
                        for shortlist in ((False, True) if has_list else (False,)):
                            decoder = t if engine == "aiayn" else ct2
                            _translate(decoder, warm, beam, shortlist)
                            t0 = time.perf_counter()
                            hyps = _translate(decoder, src, beam, shortlist)
                            seconds = time.perf_counter() - t0
                            s = score(hyps, ref, lang)
                            row = {"model": name, "engine": engine, "precision": precision, "beam": beam,
                                   "shortlist": shortlist, "workers": w, "seconds": round(seconds, 2),
                                   "sentences_per_s": round(len(src) / seconds, 1), "bleu": s["bleu"],
                                   "bleu_lc": s["bleu_lc"], "chrf": s["chrf"]}
                            rows.append(row)
                            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                    if engine == "aiayn":
                        t.close()
    return rows


def _find(rows: list[dict[str, Any]], **want: Any) -> dict[str, Any] | None:
    for r in rows:
        if all(r[k] == v for k, v in want.items()):
            return r
    return None


def criteria(rows: list[dict[str, Any]], teacher: str, student: str, workers: int) -> list[dict[str, Any]]:
    """Issue 40's targets, each from two rows of this run (int8 unless said; ``workers`` as given)."""
    out = []

    def add(what: str, a: dict[str, Any] | None, b: dict[str, Any] | None, speed: float, bleu: float) -> None:
        if a is None or b is None:
            return
        ratio, delta = a["sentences_per_s"] / b["sentences_per_s"], round(a["bleu_lc"] - b["bleu_lc"], 2)
        out.append({"criterion": what, "speed_ratio": round(ratio, 2), "bleu_lc_difference": delta,
                    "met": ratio >= speed and delta >= bleu, "needs": f">= {speed}x, >= {bleu:+} BLEU"})

    base = dict(precision="int8", workers=workers)
    for engine in ("aiayn", "ctranslate2"):
        add(f"student beam 4 vs teacher beam 4 ({engine})", _find(rows, model=student, engine=engine, beam=4,
            shortlist=False, **base), _find(rows, model=teacher, engine=engine, beam=4, shortlist=False, **base), 2.0,
            -0.5)
    add("student greedy + shortlist vs teacher beam 4 (aiayn)",
        _find(rows, model=student, engine="aiayn", beam=1, shortlist=True, **base),
        _find(rows, model=teacher, engine="aiayn", beam=4, shortlist=False, **base), 5.0, -1.0)
    for model in (teacher, student):
        for beam in (1, 4):
            add(f"shortlist alone: {model} beam {beam} (aiayn)",
                _find(rows, model=model, engine="aiayn", beam=beam, shortlist=True, **base),
                _find(rows, model=model, engine="aiayn", beam=beam, shortlist=False, **base), 1.25, -0.3)
    add("aiayn running the student vs CTranslate2 running the teacher (beam 4)",
        _find(rows, model=student, engine="aiayn", beam=4, shortlist=False, **base),
        _find(rows, model=teacher, engine="ctranslate2", beam=4, shortlist=False, **base), 2.0, -0.5)
    add("aiayn running the student with its shortlist vs CTranslate2 running the teacher (beam 4)",
        _find(rows, model=student, engine="aiayn", beam=4, shortlist=True, **base),
        _find(rows, model=teacher, engine="ctranslate2", beam=4, shortlist=False, **base), 2.0, -0.5)
    return out


def engine_ratios(rows: list[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    """Issue 54's targets: aiayn's engine against CTranslate2 on the same model, int8, ``workers``, no shortlist."""
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        for beam, needs in ((1, 0.9), (4, 1.0)):
            base = dict(model=model, precision="int8", beam=beam, shortlist=False, workers=workers)
            a, b = _find(rows, engine="aiayn", **base), _find(rows, engine="ctranslate2", **base)
            if a is not None and b is not None:
                ratio = round(a["sentences_per_s"] / b["sentences_per_s"], 3)
                out.append({"criterion": f"aiayn vs CTranslate2: {model} {'greedy' if beam == 1 else 'beam 4'}",
                            "speed_ratio": ratio, "bleu_lc_difference": round(a["bleu_lc"] - b["bleu_lc"], 2),
                            "met": ratio >= needs, "needs": f">= {needs}x"})
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = "| model | engine | precision | search | shortlist | workers | sentences/s | BLEU (lc) | BLEU | chrF |"
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['engine']} | {r['precision']} | {'greedy' if r['beam'] == 1 else 'beam 4'} "
                     f"| {'yes' if r['shortlist'] else 'no'} | {r['workers']} | {r['sentences_per_s']:.1f} | "
                     f"{r['bleu_lc']:.2f} | {r['bleu']:.2f} | {r['chrf']:.2f} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], out: Path, title: str, made_by: str = "") -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 5.5))
    markers = {"aiayn": "o", "ctranslate2": "s"}
    models = sorted({r["model"] for r in rows})
    colors = dict(zip(models, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for r in rows:
        if r["workers"] != max(x["workers"] for x in rows):
            continue
        ax.scatter(r["sentences_per_s"], r["bleu_lc"], marker=markers[r["engine"]], color=colors[r["model"]],
                   facecolors="none" if r["precision"] == "fp32" else colors[r["model"]], s=60 if r["beam"] == 4 else 30)
        if r["precision"] == "int8":
            ax.annotate(("g" if r["beam"] == 1 else "b4") + ("+sl" if r["shortlist"] else ""),
                        (r["sentences_per_s"], r["bleu_lc"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("sentences/s (log scale)")
    ax.set_ylabel("test BLEU (lowercased)")
    for m in models:
        ax.scatter([], [], color=colors[m], label=m)
    for e, mk in markers.items():
        ax.scatter([], [], marker=mk, color="gray", label=e)
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="gray", label="fp32 (filled: int8)")
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120, metadata={"Description": made_by})        # the command, commit and machine
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", required=True, type=Path)
    ap.add_argument("--student", type=Path, action="append", default=[],
                    help="a student run (repeatable; none: the teacher's rows and the engines' ratios alone)")
    ap.add_argument("--src", required=True, type=Path)
    ap.add_argument("--ref", required=True, type=Path)
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--engines", nargs="+", default=["aiayn", "ctranslate2"])
    ap.add_argument("--name", default="fast", help="the record's name (default %(default)s)")
    a = ap.parse_args(argv)
    from aiayn.rundir import RunDir

    src = a.src.read_text(encoding="utf-8").splitlines()
    ref = a.ref.read_text(encoding="utf-8").splitlines()
    if len(src) < a.lines + 50 and len(src) < a.lines:
        raise SystemExit(f"{a.src} has {len(src)} lines, fewer than --lines {a.lines}")
    warm = (src[a.lines:a.lines + 50] or src[:50])
    models = {"teacher": a.teacher, **{(f"student{i}" if len(a.student) > 1 else "student"): s
                                       for i, s in enumerate(a.student, 1)}}
    lang = RunDir.locate(a.teacher)[0].target_language()
    with tempfile.TemporaryDirectory() as tmp:
        rows = _rows(models, src[:a.lines], ref[:a.lines], warm, a.workers, a.engines, lang, Path(tmp))
    checks = [c for s in models if s != "teacher" for c in criteria(rows, "teacher", s, max(a.workers))]
    checks += engine_ratios(rows, max(a.workers))
    print()
    print(table(rows))
    print()
    for c in checks:
        print(f"{'met' if c['met'] else 'NOT met'}: {c['criterion']}: {c['speed_ratio']}x, "
              f"{c['bleu_lc_difference']:+.2f} BLEU (needs {c['needs']})")
    path = record.write(a.name, {"models": {k: str(v) for k, v in models.items()}, "src": str(a.src),
                                 "lines": a.lines, "rows": rows, "criteria": checks})
    png = plot(rows, path.with_suffix(".png"), f"{a.lines} lines of {a.src.name}, {record.describe(record.machine())}"
               f", {max(a.workers)} workers", made_by=json.dumps({k: record.header(a.name)[k] for k in ("command",
                                                                                                              "commit")}))
    print(f"recorded in {path}" + (f" and {png}" if png else ""))


if __name__ == "__main__":
    main()
