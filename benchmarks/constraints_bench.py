"""Lexically constrained decoding (aiayn/decoding/constraints.py) on a test set: constraints drawn from the reference, and a
glossary built from the training data.

    python -m benchmarks constraints --model runs/demo/run-de-en --src runs/demo/data/test.de \\
        --ref runs/demo/data/test.en --train aiayn/bundled/multi30k/train [--lines 1000] [--beam 4] [--workers 1 2]

**From the reference**: each line gets 1-2 phrases of 1-3 consecutive words of its reference (a seeded draw; words
with letters or digits only, punctuation stripped; phrases do not overlap). Reports the share of phrases found in
the output (as whole words, case-sensitive), BLEU with and without, and sentences/s of both at each --workers
(unconstrained beam search against constrained, the same lines, one process, after a warm-up); and a mixed run in
which only every other line has its phrases: the lines without must equal the unconstrained run's.

**A glossary**: --glossary-size entries built from --train (``.de.gz``/``.en.gz`` pairs, the source and target
suffixes taken from the run): the most frequent capitalised source words that are not a line's first word (German
nouns), each with the target word of highest Dice coefficient over the sentence pairs. Reports, over the test lines
that contain a term, how often the output uses the term's target (the term-use rate), with and without the
glossary, and BLEU of the whole set with and without. Records ``results/constraints/constraints-<date>.json``.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402

WORD = re.compile(r"^\w+$")
PUNCT = ".,;:!?\"')"


def draw(refs: list[str], seed: int = 0) -> list[list[str]]:
    """1-2 non-overlapping phrases of 1-3 words from each reference (seeded)."""
    rng = random.Random(seed)
    out = []
    for ref in refs:
        raw = ref.split()
        words = [w.rstrip(PUNCT) for w in raw]
        spans: list[tuple[int, int]] = []
        for _ in range(rng.randint(1, 2)):
            for n in range(rng.randint(1, 3), 0, -1):          # shorter where no phrase of n words fits
                starts = [i for i in range(len(words) - n + 1)   # words only, punctuation after the last at most
                          if all(WORD.match(w) for w in words[i : i + n]) and all(raw[j] == words[j] for j in
                                                                                 range(i, i + n - 1)) and
                          all(i + n <= a or i >= b for a, b in spans)]
                if starts:
                    i = rng.choice(starts)
                    spans.append((i, i + n))
                    break
        out.append([" ".join(words[a:b]) for a, b in sorted(spans)])
    return out


def found(text: str, phrase: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", text) is not None


def glossary(train: str, src: str, tgt: str, size: int) -> list[tuple[str, str]]:
    """--glossary-size (source noun, target word) pairs by Dice coefficient over the training pairs."""
    def read(lang: str) -> list[str]:
        with gzip.open(f"{train}.{lang}.gz", "rt", encoding="utf-8") as f:
            return [line.strip() for line in f]

    pairs = list(zip(read(src), read(tgt), strict=True))
    tokens = lambda s: set(re.findall(r"\w+(?:-\w+)*", s))  # noqa: E731   (t-shirt is one word)
    nouns: collections.Counter[str] = collections.Counter()
    for s, _ in pairs:
        words = re.findall(r"\w+", s)
        nouns.update({w for w in words[1:] if w[:1].isupper() and len(w) > 2})
    terms = [w for w, _ in nouns.most_common(size)]
    f_src = {w: 0 for w in terms}
    f_tgt: collections.Counter[str] = collections.Counter()
    joint: dict[str, collections.Counter[str]] = {w: collections.Counter() for w in terms}
    for s, t in pairs:
        ws, wt = tokens(s), {w.lower() for w in tokens(t)}
        f_tgt.update(wt)
        for w in ws & joint.keys():
            f_src[w] += 1
            joint[w].update(wt)
    return [(w, max(joint[w], key=lambda e: 2 * joint[w][e] / (f_src[w] + f_tgt[e]))) for w in terms]


def timed(fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--train", default=str(HERE.parent / "aiayn" / "bundled" / "multi30k" / "train"),
                    help="training pairs for the glossary: PREFIX.SRC.gz and PREFIX.TGT.gz")
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--glossary-size", type=int, default=50)
    a = ap.parse_args(argv)

    import torch

    from aiayn import Translator
    from aiayn.rundir import RunDir
    from aiayn.training.evaluate import score

    src = Path(a.src).read_text(encoding="utf-8").splitlines()[: a.lines]
    ref = Path(a.ref).read_text(encoding="utf-8").splitlines()[: a.lines]
    langs = RunDir.locate(a.model)[0].languages() or ("de", "en")
    phrases = draw(ref)
    t = Translator.load(a.model, "torch", precision=a.precision, device="cpu", beam=a.beam)
    t.translate(src[-50:])                                                              # warm-up
    speed: list[dict[str, Any]] = []
    plain: list[str] = []
    constrained: dict[bool, list[str]] = {}
    for w in a.workers:
        torch.set_num_threads(w)
        plain, s_plain = timed(lambda w=w: t.translate(src, workers=w))
        row: dict[str, Any] = {"workers": w, "plain_sentences_per_s": round(len(src) / s_plain, 1)}
        for keep in (True, False):
            constrained[keep], s_con = timed(lambda w=w, keep=keep: t.translate(src, workers=w, constraints=phrases,
                                                                                 keep_plain=keep))
            name = "keep_plain" if keep else "search_all"
            row |= {f"{name}_sentences_per_s": round(len(src) / s_con, 1), f"{name}_slowdown": round(s_con / s_plain, 3)}
            print(f"workers {w}: unconstrained {len(src) / s_plain:.1f} sent/s, constrained (keep_plain={keep}) "
                  f"{len(src) / s_con:.1f} sent/s = {s_con / s_plain:.2f}x slower", flush=True)
        speed.append(row)
    total = sum(len(p) for p in phrases)
    kept = {keep: sum(found(out, p) for out, ps in zip(outs, phrases, strict=True) for p in ps)
            for keep, outs in constrained.items()}
    mixed = t.translate(src, constraints=[p if i % 2 == 0 else None for i, p in enumerate(phrases)], keep_plain=False)
    unchanged = sum(mixed[i] == plain[i] for i in range(1, len(src), 2))
    b_plain = score(plain, ref, lang=langs[1])
    b_con = {keep: score(outs, ref, lang=langs[1]) for keep, outs in constrained.items()}
    figures = {
        "model": a.model, "lines": len(src), "beam": a.beam, "precision": a.precision,
        "reference_constraints": {"phrases": total, "found": kept[True],
                                  "found_pct": round(100 * kept[True] / max(1, total), 2),
                                  "found_search_all": kept[False],
                                  "found_unconstrained": sum(found(o, p) for o, ps in zip(plain, phrases, strict=True)
                                                             for p in ps),
                                  "lines_kept_plain": sum(a == b for a, b in zip(constrained[True], plain, strict=True)),
                                  "bleu_lc_plain": b_plain["bleu_lc"], "bleu_lc_constrained": b_con[True]["bleu_lc"],
                                  "bleu_lc_search_all": b_con[False]["bleu_lc"],
                                  "bleu_plain": b_plain["bleu"], "bleu_constrained": b_con[True]["bleu"],
                                  "mixed_unconstrained_lines": len(src) // 2, "mixed_unchanged": unchanged},
        "speed": speed,
        "glossary": glossary_figures(t, a, langs, src, ref, plain, score),
    }
    r, gl = figures["reference_constraints"], figures["glossary"]
    print(f"\n| {len(src)} lines, beam {a.beam} | phrases found | BLEU (lc) |")
    print("|---|---:|---:|")
    print(f"| unconstrained | {r['found_unconstrained']}/{total} | {r['bleu_lc_plain']:.2f} |")
    print(f"| 1-2 phrases from the reference (keep_plain) | {kept[True]}/{total} ({r['found_pct']:.2f}%) | "
          f"{r['bleu_lc_constrained']:.2f} |")
    print(f"| the same, constrained search on every line | {kept[False]}/{total} | {r['bleu_lc_search_all']:.2f} |")
    print(f"unconstrained lines of a mixed batch unchanged: {unchanged}/{len(src) // 2}")
    for keep in (True, False):
        g = gl["keep_plain" if keep else "search_all"]
        print(f"\nglossary of {len(gl['entries'])} entries (keep_plain={keep}): {gl['terms_in_lines']} terms in "
              f"{gl['lines_with_a_term']} lines; term use {gl['term_use_plain_pct']:.2f}% -> "
              f"{g['term_use_glossary_pct']:.2f}%, BLEU (lc) {gl['bleu_lc_plain']:.2f} -> {g['bleu_lc_glossary']:.2f}; "
              f"the references use {gl['term_use_reference_pct']:.2f}% of the terms; {g['lines_changed']} lines "
              f"changed, {g['of_those_changed']} of the {gl['lines_with_every_term_already']} whose translation had "
              "every term already")
    print(f"recorded in {record.write('constraints', figures)}")


def glossary_figures(t: Any, a: argparse.Namespace, langs: tuple[str, str], src: list[str], ref: list[str],
                     plain: list[str], score: Any) -> dict[str, Any]:
    """The glossary built from the training data applied to the test lines, with and without keep_plain."""
    from aiayn.decoding.constraints import Glossary

    entries = glossary(a.train, langs[0], langs[1], a.glossary_size)
    g = Glossary(entries)
    terms = [g.constraints(line) for line in src]
    hits = [(i, term) for i, ts in enumerate(terms) for term in ts]
    use = lambda outs: sum(found(outs[i].lower(), term.lower()) for i, term in hits)  # noqa: E731
    already = [i for i, ts in enumerate(terms) if ts and all(found(plain[i].lower(), x.lower()) for x in ts)]
    out: dict[str, Any] = {"entries": entries, "lines_with_a_term": len({i for i, _ in hits}), "terms_in_lines": len(hits),
                           "used_plain": use(plain), "used_reference": use(ref),
                           "term_use_reference_pct": round(100 * use(ref) / max(1, len(hits)), 2),
                           "term_use_plain_pct": round(100 * use(plain) / max(1, len(hits)), 2),
                           "lines_with_every_term_already": len(already),
                           "bleu_lc_plain": score(plain, ref, lang=langs[1])["bleu_lc"]}
    for keep in (True, False):
        with_g = t.translate(src, constraints=terms, keep_plain=keep)
        out["keep_plain" if keep else "search_all"] = {
            "used_glossary": use(with_g), "term_use_glossary_pct": round(100 * use(with_g) / max(1, len(hits)), 2),
            "lines_changed": sum(with_g[i] != plain[i] for i in {i for i, _ in hits}),
            "of_those_changed": sum(with_g[i] != plain[i] for i in already),
            "bleu_lc_glossary": score(with_g, ref, lang=langs[1])["bleu_lc"]}
    return out


if __name__ == "__main__":
    main()
