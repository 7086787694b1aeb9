"""A trained model exported to CTranslate2 against aiayn itself, in one run, on a real test set:

    python -m benchmarks export --model runs/demo/run-de-en --src runs/demo/data/test.de \\
        --ref runs/demo/data/test.en [--quantization int8] [--beam 4]

Exports the run (``aiayn export --format ctranslate2 --quantization Q``), then translates --src with
aiayn (``--precision int8`` for an int8 export, else fp32) and with CTranslate2 (compute type Q), greedy and
beam, 1 and 2 workers (aiayn's ``--workers``, CTranslate2's ``inter_threads``); each figure the faster of 2
passes after a warm-up. Both decode with aiayn's length rule (source length + 50, ct2.CTranslate2Engine.from_export).
Prints sentences/s, BLEU of each, and the share of identical lines as a Markdown table, and records the
same rows as ``results/export/export-<date>.json`` (record.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent


def best_of(fn, passes: int = 2) -> tuple[float, list[str]]:  # type: ignore[no-untyped-def]
    out: list[str] = []
    best = float("inf")
    for _ in range(passes):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--quantization", default="int8")
    ap.add_argument("--beam", type=int, default=4)
    a = ap.parse_args(argv)
    import ctranslate2
    import torch

    from aiayn import Translator, configure
    from aiayn.engines.ctranslate2 import CTranslate2Engine
    from aiayn.interop.export import export
    from aiayn.training.evaluate import score

    configure()
    sys.path.insert(0, str(HERE))
    import record

    rows: list[dict] = []
    src = Path(a.src).read_text(encoding="utf-8").splitlines()
    ref = Path(a.ref).read_text(encoding="utf-8").splitlines()
    precision = "int8" if a.quantization.startswith("int8") else "fp32"
    with tempfile.TemporaryDirectory() as tmp:
        out = export(a.model, "ctranslate2", Path(tmp) / "ct2", quantization=a.quantization)
        ours = Translator.load(a.model, "torch", device="cpu", precision=precision)
        cores = torch.get_num_threads()
        print(f"{len(src)} sentences, aiayn {precision} vs CTranslate2 {ctranslate2.__version__} {a.quantization}, "
              f"{cores} cores")
        print("| decoding | workers | aiayn sentences/s | CTranslate2 sentences/s | aiayn ÷ CTranslate2 | BLEU aiayn | "
              "BLEU CTranslate2 | identical |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for beam in (1, a.beam):
            for workers in (1, 2):
                # the same length rule as aiayn (source length + 50), the same forbidden tokens and length penalty
                ct = Translator(CTranslate2Engine.from_export(out, "int8" if a.quantization == "int8" else "fp32",
                                                              workers=workers, threads=max(1, cores // workers)))

                def run_ct2(ct: Translator = ct, beam: int = beam) -> list[str]:
                    return ct.translate(src, beam=beam)

                def run_ours(beam: int = beam, workers: int = workers) -> list[str]:
                    return ours.translate(src, beam=beam, workers=workers)

                run_ct2(), run_ours()                                   # warm-up
                t_ours, hyp_ours = best_of(run_ours)
                t_ct2, hyp_ct2 = best_of(run_ct2)
                same = sum(x.strip() == y.strip() for x, y in zip(hyp_ours, hyp_ct2, strict=True))
                rows.append({"beam": beam, "workers": workers, "aiayn_sentences_per_s": len(src) / t_ours,
                             "ct2_sentences_per_s": len(src) / t_ct2, "ratio": t_ct2 / t_ours,
                             "bleu_aiayn": score(hyp_ours, ref)["bleu"], "bleu_ct2": score(hyp_ct2, ref)["bleu"],
                             "identical": same, "sentences": len(src)})
                print(f"| {'greedy' if beam == 1 else f'beam {beam}'} | {workers} | {len(src) / t_ours:.1f} | "
                      f"{len(src) / t_ct2:.1f} | {t_ct2 / t_ours:.2f}× | {score(hyp_ours, ref)['bleu']:.2f} | "
                      f"{score(hyp_ct2, ref)['bleu']:.2f} | {same}/{len(src)} |", flush=True)
    kept = record.write("export", {"aiayn": precision, "ctranslate2": f"{ctranslate2.__version__} {a.quantization}",
                                   "rows": rows})
    print(f"recorded in {kept}")


if __name__ == "__main__":
    main()
