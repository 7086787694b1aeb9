"""HTML through translation (aiayn/translation/markup.py) on a test set with inline tags inserted reproducibly.

    python -m benchmarks markup --model runs/demo/run-de-en --src runs/demo/data/test.de \\
        [--train aiayn/bundled/multi30k/train] [--lines 1000]

Each source line gets 1-3 inline tags (``b``, ``i``, ``a href``, ``span``) around runs of 1-2 words, some nested
inside another, drawn with a fixed seed. The model translates the tagged lines (``Translator.translate_html``) and the
plain lines. Reports: the share of outputs that are well-formed with every input tag (a strict HTML parser checks);
BLEU of the tagged outputs' text (tags stripped) against the plain translations' BLEU (both against --ref); and tag
placement, for each tag around one source word: whether the target words it wraps are those eflomal aligns with that
word (eflomal over the training pairs and these (source, translation) pairs, grow-diag-final-and) — exactly, or
overlapping them. Records ``results/markup/markup-<date>.json``.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402
from alignments import eflomal_reference  # noqa: E402

TAGS = ["b", "i", 'a href="#t"', "span"]


def tag_line(line: str, rng: random.Random) -> tuple[str, list[tuple[str, int, int]]]:
    """``line`` with 1-3 tags around runs of 1-2 words (one nested inside another where it can be): the HTML, and
    each tag's (name, first word, last word + 1)."""
    words = line.split()
    spans: list[tuple[str, int, int]] = []
    for _ in range(rng.randint(1, 3)):
        n = rng.randint(1, 2)
        free = [i for i in range(len(words) - n + 1) if all(i + n <= a or i >= b or a <= i and i + n <= b
                                                            for _, a, b in spans)]
        if free:
            i = rng.choice(free)
            spans.append((rng.choice(TAGS), i, i + n))
    spans.sort(key=lambda s: (s[1], -s[2]))
    opens = collections.defaultdict(list)
    closes = collections.defaultdict(list)
    for name, a, b in spans:
        opens[a].append(f"<{name}>")
        closes[b - 1].insert(0, f"</{name.split()[0]}>")
    html = " ".join("".join(opens[i]) + w.replace("&", "&amp;").replace("<", "&lt;") + "".join(closes[i])
                    for i, w in enumerate(words))
    return html, spans


class Check(HTMLParser):
    """Well-formed (every element closed, in order), the tags seen, the text, and which words each tag wraps."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, int]] = []
        self.ok, self.text = True, ""
        self.tags: collections.Counter[str] = collections.Counter()
        self.wraps: list[tuple[str, int, int]] = []          # tag, first word, end word (word counts of self.text)

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags[tag] += 1
        self.stack.append((tag, len(self.text.split())))            # tags stand between whole words

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1][0] != tag:
            self.ok = False
            return
        _, start = self.stack.pop()
        self.wraps.append((tag, start, len(self.text.split())))

    def handle_data(self, data: str) -> None:
        self.text += data


def check(html: str) -> Check:
    c = Check()
    c.feed(html)
    c.close()
    c.ok = c.ok and not c.stack
    return c


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--train", default=str(HERE.parent / "aiayn" / "bundled" / "multi30k" / "train"))
    ap.add_argument("--lines", type=int, default=1000)
    a = ap.parse_args(argv)

    import gzip

    from aiayn import Translator
    from aiayn.rundir import RunDir
    from aiayn.training.evaluate import score

    s, g = RunDir.locate(a.model)[0].languages() or ("de", "en")
    src = Path(a.src).read_text(encoding="utf-8").splitlines()[: a.lines]
    ref = Path(a.ref).read_text(encoding="utf-8").splitlines()[: a.lines]
    rng = random.Random(0)
    tagged = [tag_line(line, rng) for line in src]
    t = Translator.load(a.model, "torch", device="cpu")
    t0 = time.perf_counter()
    plain = t.translate(src)
    s_plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    html = t.translate_html([h for h, _ in tagged])
    s_html = time.perf_counter() - t0
    checks = [check(h) for h in html]
    given = [check(h) for h, _ in tagged]
    whole = sum(c.ok and c.tags == gv.tags for c, gv in zip(checks, given, strict=True))
    texts = [" ".join(c.text.split()) for c in checks]
    b_plain, b_html = score(plain, ref, lang=g), score(texts, ref, lang=g)

    with gzip.open(f"{a.train}.{s}.gz", "rt", encoding="utf-8") as fs, \
            gzip.open(f"{a.train}.{g}.gz", "rt", encoding="utf-8") as ft:
        train = [(x.strip(), y.strip()) for x, y in zip(fs, ft, strict=True)]
    reference = eflomal_reference(train + list(zip(src, texts, strict=True)))[len(train):]
    exact = overlap = one_word = 0
    for (_, spans), c, links in zip(tagged, checks, reference, strict=True):
        placed = collections.defaultdict(list)
        for tag, start, end in sorted(c.wraps, key=lambda w: (w[1], -w[2])):     # in source order, as spans
            placed[tag].append((start, end))
        for name, i, j in spans:
            if j - i != 1:
                continue
            one_word += 1
            want = sorted(y for x, y in links if x == i)
            tag = name.split()[0]
            got = placed[tag].pop(0) if placed[tag] else (0, 0)
            exact += bool(want) and got == (want[0], want[-1] + 1)
            overlap += any(got[0] <= y < got[1] for y in want)
    figures = {"model": a.model, "lines": len(src), "tags": sum(len(sp) for _, sp in tagged),
               "well_formed_with_every_tag": whole, "well_formed_pct": round(100 * whole / len(src), 2),
               "bleu_lc_plain": b_plain["bleu_lc"], "bleu_lc_html_text": b_html["bleu_lc"],
               "text_identical_to_plain": sum(x == y for x, y in zip(texts, plain, strict=True)),
               "one_word_tags": one_word, "placed_exactly": exact, "placed_overlapping": overlap,
               "placed_exactly_pct": round(100 * exact / max(1, one_word), 2),
               "placed_overlapping_pct": round(100 * overlap / max(1, one_word), 2),
               "seconds_plain": round(s_plain, 2), "seconds_html": round(s_html, 2),
               "sample": [{"source": h, "translation": o} for (h, _), o in list(zip(tagged, html, strict=True))[:10]]}
    print(f"{len(src)} lines, {figures['tags']} tags: {whole} outputs well-formed with every tag "
          f"({figures['well_formed_pct']}%); BLEU (lc) of the text {b_html['bleu_lc']} against {b_plain['bleu_lc']} "
          f"plain ({figures['text_identical_to_plain']} texts identical); of {one_word} one-word tags "
          f"{figures['placed_exactly_pct']}% around exactly eflomal's words, {figures['placed_overlapping_pct']}% "
          f"overlapping them; {s_html:.1f} s against {s_plain:.1f} s plain")
    for x in figures["sample"][:5]:
        print(f"  {x['source']}\n  {x['translation']}")
    print(f"recorded in {record.write('markup', figures)}")


if __name__ == "__main__":
    main()
