"""Word alignments from attention (aiayn/decoding/align.py) against eflomal's, on the model's own translations; for a model
trained with guided alignment (``aiayn align`` + ``--set guided_alignment=0.1``), also the heads it trained.

    python -m benchmarks alignments --model runs/demo/run-de-en --data runs/demo/data \\
        [--train aiayn/bundled/multi30k/train] [--lines 1000] [--sample 20]

The model translates the validation and test sources (the run's decoding settings). eflomal (``pip install
'.[align]'``) aligns the words of the training pairs together with those (source, translation) pairs, lowercased,
in both directions, symmetrized by grow-diag-final-and: the reference. For every decoder layer and both shifts
(a target word read where it is the decoder's input, shift 1, or its output, shift 0), the attention's word links are
scored against it (precision, recall, AER); the best on the validation lines is reported on the test lines, with
``--sample`` test lines printed word by word for a reader to check. Records ``results/alignments/alignments-<date>.json``.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402


def eflomal_reference(pairs: list[tuple[str, str]]) -> list[list[tuple[int, int]]]:
    import eflomal

    from aiayn.decoding.align import parse_links
    from aiayn.decoding.lexicon import symmetrize

    src = [s.lower() + "\n" for s, _ in pairs]
    tgt = [t.lower() + "\n" for _, t in pairs]
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        eflomal.Aligner().align(src, tgt, links_filename_fwd=str(fwd), links_filename_rev=str(rev), quiet=True)
        f, r = fwd.read_text().splitlines(), rev.read_text().splitlines()
    return [symmetrize(parse_links(a), parse_links(b)) for a, b in zip(f, r, strict=True)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True, help="a prepared data dir with valid.SRC and test.SRC")
    ap.add_argument("--train", default=str(HERE.parent / "aiayn" / "bundled" / "multi30k" / "train"))
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--sample", type=int, default=20)
    a = ap.parse_args(argv)

    from aiayn import Translator
    from aiayn.decoding.align import align, format_links, method
    from aiayn.rundir import RunDir

    t = Translator.load(a.model, "torch", device="cpu")
    s, g = RunDir.locate(a.model)[0].languages() or ("de", "en")
    split: dict[str, tuple[list[str], list[list[int]], list[str]]] = {}
    for name in ("valid", "test"):
        src = Path(a.data, f"{name}.{s}").read_text(encoding="utf-8").splitlines()[: a.lines]
        hyps = [h[0].tokens for h in t.engine.translate_hypotheses(src)]
        split[name] = (src, hyps, t.engine.detokenize(hyps))
    with gzip.open(f"{a.train}.{s}.gz", "rt", encoding="utf-8") as fs, \
            gzip.open(f"{a.train}.{g}.gz", "rt", encoding="utf-8") as ft:
        train = [(x.strip(), y.strip()) for x, y in zip(fs, ft, strict=True)]
    ours = [(x, y) for name in ("valid", "test") for x, y in zip(split[name][0], split[name][2], strict=True)]
    reference = eflomal_reference(train + ours)[len(train):]
    refs = {"valid": reference[: len(split["valid"][0])], "test": reference[len(split["valid"][0]):]}
    pieces = (t.engine.vocab.src.piece, t.engine.vocab.tgt.piece)
    rows: list[dict[str, Any]] = []
    links: dict[tuple[str, int, int], list[list[tuple[int, int]]]] = {}
    n_layers = len(t.engine.model.decoder)
    for name in ("valid", "test"):
        src_ids = t.engine.vocab.src.encode(split[name][0])
        for layer in range(n_layers):
            for shift in (0, 1):
                links[(name, layer, shift)] = align(t.engine.model, pieces, src_ids, split[name][1], layer, shift,
                                                    t.engine.device)
                rows.append({"split": name, "layer": layer, "shift": shift,
                             **agreement(links[(name, layer, shift)], refs[name])})
    layer, shift, heads = method(t.engine.model)
    if heads:      # a model trained with guided alignment: the heads it trained, which translate --alignments reads
        for name in ("valid", "test"):
            links[(name, "trained", shift)] = align(t.engine.model, pieces, t.engine.vocab.src.encode(split[name][0]),
                                                    split[name][1], layer, shift, t.engine.device, heads=heads)
            rows.append({"split": name, "layer": "trained", "shift": shift, "heads": heads,
                         **agreement(links[(name, "trained", shift)], refs[name])})
    print("| layer (all heads) | shift | valid P | valid R | valid AER | test P | test R | test AER |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for key in sorted({(r["layer"], r["shift"]) for r in rows}, key=str):
        v, te = (next(r for r in rows if (r["split"], r["layer"], r["shift"]) == (n, *key)) for n in ("valid", "test"))
        name = f"{layer}, heads 0..{heads - 1} trained to align" if key[0] == "trained" else key[0]
        print(f"| {name} | {key[1]} | {v['precision']} | {v['recall']} | {v['aer']} | {te['precision']} | "
              f"{te['recall']} | {te['aer']} |")
    attention = min((r for r in rows if r["split"] == "valid" and r["layer"] != "trained"), key=lambda r: r["aer"])
    best = next(r for r in rows if r["split"] == "valid" and r["layer"] == "trained") if heads else attention
    test = next(r for r in rows if r["split"] == "test" and (r["layer"], r["shift"]) == (best["layer"], best["shift"]))
    print(f"\nattention of all heads, chosen on the validation lines: layer {attention['layer']}, shift "
          f"{attention['shift']} (AER {attention['aer']})")
    print(f"what translate --alignments reads: layer {best['layer']}, shift {best['shift']}; "
          f"test: P {test['precision']} R {test['recall']} AER {test['aer']}")
    sample = []
    chosen = links[("test", best["layer"], best["shift"])]
    for i in range(min(a.sample, len(chosen))):
        sw, tw = split["test"][0][i].split(), split["test"][2][i].split()
        pairs = [f"{sw[x]}={tw[y]}" if x < len(sw) and y < len(tw) else f"{x}-{y}?" for x, y in chosen[i]]
        sample.append({"source": split["test"][0][i], "translation": split["test"][2][i],
                       "links": format_links(chosen[i]), "eflomal": format_links(refs["test"][i]), "words": pairs})
        print(f"\n{split['test'][0][i]}\n{split['test'][2][i]}\n  model:     {' '.join(pairs)}\n  eflomal:   "
              f"{' '.join(f'{sw[x]}={tw[y]}' for x, y in refs['test'][i] if x < len(sw) and y < len(tw))}")
    out = record.write("alignments", {"model": a.model, "lines": a.lines, "rows": rows,
                                       "chosen": {"layer": best["layer"], "shift": best["shift"]}, "test": test,
                                       "attention_valid": attention, "sample": sample})
    print(f"\nrecorded in {out}")


if __name__ == "__main__":
    main()


Links = Sequence[tuple[int, int]]


def agreement(predicted: Sequence[Links], reference: Sequence[Links]) -> dict[str, float]:
    """Precision, recall and AER of ``predicted`` against ``reference`` links over a corpus (percent)."""
    a = g = both = 0
    for p, r in zip(predicted, reference, strict=True):
        ps, rs = set(p), set(r)
        a, g, both = a + len(ps), g + len(rs), both + len(ps & rs)
    return {"precision": round(100 * both / max(1, a), 2), "recall": round(100 * both / max(1, g), 2),
            "aer": round(100 * (1 - 2 * both / max(1, a + g)), 2)}
