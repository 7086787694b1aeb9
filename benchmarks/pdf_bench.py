"""Real PDFs through ``aiayn translate --input X.pdf --output Y.pdf`` with a trained run, measured as the PDF issue
asks: the boxes (paragraphs) found and translated, those left as they were, the translated paragraphs a language
detector still finds in the source language, boxes overlapping before and after, ``qpdf --check``, fonts not embedded
(``pdffonts``' "emb" column) before and after, links and annotations before and after, pages, and the time.

    python -m benchmarks pdf-corpus --out build/pdf-corpus --class-notes class-notes    # (see pdf_corpus.py)
    python -m benchmarks pdf --model runs/demo/run-de-en --source de --corpus build/pdf-corpus [--pdf X.pdf ...]

With ``--corpus``: every PDF of its four kinds (real, libreoffice, latex, slides), formulas kept counted (read back
at their place, and drawn the same: their pixels in poppler's renders before and after), and the
whole-sentence comparison: each LibreOffice document translated as its .docx and as its PDF, the English text of each
scored against the English original (document BLEU, sacrebleu), and the PDF's against the .docx's.

With ``--libretranslate VENV`` as well: LibreTranslate's PDF path (argos-translate-files, its ``formats/pdf.py``:
PyMuPDF, each text span translated on its own and drawn over a redaction) run on the same PDFs from a virtualenv of
its own, serving the same run exported as an Argos package (``aiayn export --format argos``), measured the same way
beside aiayn's: paragraphs still in the source language, overlaps, ``qpdf --check``, fonts, and the whole-sentence
BLEU. Offline, Argos's sentence splitter (MiniSBD, whose German model it downloads on first use) is replaced by a split
after sentence punctuation; PDF spans are mostly shorter than a sentence, so it rarely has anything to split.

    python3 -m venv /tmp/ltvenv && /tmp/ltvenv/bin/pip install argos-translate-files==1.4.4
    python -m benchmarks pdf --model runs/demo/run-de-en --corpus build/pdf-corpus --libretranslate /tmp/ltvenv

Records benchmarks/results/pdf/pdf-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import record  # noqa: E402


def _annotations(path: Path) -> int:
    import pikepdf

    with pikepdf.open(path) as doc:
        return sum(len(page.obj.get("/Annots", [])) for page in doc.pages)


def _unembedded(path: Path) -> int:
    rows = subprocess.run(["pdffonts", str(path)], capture_output=True, text=True).stdout.splitlines()[2:]
    return sum(1 for r in rows if r.split()[-5:-4] == ["no"])


def _page_pixels(path: Path, page: int, dpi: int) -> Any:
    """One page of a PDF rendered by poppler (``pdftoppm -gray``) as a numpy array of grey levels, top row first."""
    import numpy as np

    pgm = subprocess.run(["pdftoppm", "-gray", "-r", str(dpi), "-f", str(page + 1), "-l", str(page + 1), str(path)],
                         capture_output=True, check=True).stdout
    width, height, rest = re.match(rb"P5\s+(\d+)\s+(\d+)\s+\d+\s(.*)", pgm, re.S).groups()   # type: ignore[union-attr]
    return np.frombuffer(rest, dtype=np.uint8)[:int(width) * int(height)].reshape(int(height), int(width))


def drawn_the_same(src: Path, out: Path, found: list, dpi: int = 100) -> int:
    """How many of the formula boxes ``found`` in ``src`` (:func:`formula_boxes`) look the same in ``out``: every pixel of
    their rectangle, less a pixel at each edge, equal when both pages are rendered by poppler. What the reader sees of
    a formula, whatever pdfminer's reading of the page around it (which a translated paragraph beside it may change)."""
    import pikepdf

    with pikepdf.open(src) as doc:
        heights = [float(page.mediabox[3]) for page in doc.pages]
    pages: dict[tuple[Path, int], Any] = {}
    same = 0
    for box in formula_boxes(found):
        for path in (src, out):
            if (path, box.page) not in pages:
                pages[(path, box.page)] = _page_pixels(path, box.page, dpi)
        scale, (x0, y0, x1, y1) = dpi / 72, box.rect
        top, bottom = int((heights[box.page] - y1) * scale) + 1, int((heights[box.page] - y0) * scale) - 1
        left, right = int(x0 * scale) + 1, int(x1 * scale) - 1
        before, after = (pages[(p, box.page)][max(0, top):bottom, max(0, left):right] for p in (src, out))
        same += before.shape == after.shape and bool((before == after).all())
    return same


def formula_boxes(found: list) -> list:
    """The boxes of formulas (or music) among a PDF's boxes: no words to translate, a formula marked in them."""
    from aiayn.documents import pdf

    return [b for b in found if not b.letters and pdf.OPEN in b.marked]


def formulas(found: list) -> list[tuple[str, tuple[int, ...]]]:
    """The boxes of formulas (or music) a PDF holds: their text and place."""
    return [(b.text, tuple(round(v) for v in b.rect)) for b in formula_boxes(found)]


# LibreTranslate's PDF path: argos-translate-files run by the virtualenv's Python on (source, output) pairs, the
# package installed in a folder of the benchmark's, each file's seconds printed as JSON
LIBRETRANSLATE = r"""
import re, sys
import argostranslate.package as package, argostranslate.sbd as sbd, argostranslate.translate as translate
import argostranslatefiles
sbd.MiniSBDSentencizer.split_sentences = lambda self, text: [s for s in re.split(r"(?<=[.!?])\s+", text) if s] or [text]
if sys.argv[1] != "-":
    package.install_from_path(sys.argv[1])
else:
    translation = translate.get_translation_from_codes(sys.argv[2], sys.argv[3])
    argostranslatefiles.translate_file(translation, sys.argv[4], lambda _, __: sys.argv[5])
"""


def libretranslate(venv: Path, model: str, source: str, target: str, files: list[tuple[Path, Path]],
                   home: Path, limit: int) -> dict[str, dict[str, Any]]:
    """Translate each (source, output) PDF by LibreTranslate's PDF path with ``model`` exported as an Argos package,
    each in a process of its own, stopped after ``limit`` seconds; the seconds each took (and its error), by output
    (two kinds of the corpus hold PDFs of one name)."""
    package = home / "package"
    subprocess.run([sys.executable, "-m", "aiayn", "export", "--model", model, "--format", "argos", "--out",
                    str(package)], check=True, capture_output=True, env=record.user_env())
    [argos] = package.glob("*.argosmodel")
    env = {**record.user_env(), "HOME": str(home), "ARGOS_PACKAGES_DIR": str(home / "packages"),
           "ARGOS_DEVICE_TYPE": "cpu", "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache")}
    (home / "packages").mkdir(exist_ok=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-c", LIBRETRANSLATE, str(argos)], check=True, capture_output=True, env=env)
    done: dict[str, dict[str, Any]] = {}
    for src, out in files:
        t0 = time.perf_counter()
        try:
            run = subprocess.run([python, "-c", LIBRETRANSLATE, "-", source, target, str(src), str(out)],
                                 capture_output=True, text=True, env=env, timeout=limit)
            error = run.stderr.strip().splitlines()[-1] if run.returncode else None
        except subprocess.TimeoutExpired:
            out.unlink(missing_ok=True)
            error = f"stopped after {limit} s"
        done[str(out)] = {"seconds": round(time.perf_counter() - t0, 1), **({"error": error} if error else {})}
    return done


def measure(src: Path, out: Path, model: str, source: str, kind: str = "") -> dict[str, object]:
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", model, "--input", str(src),
                          "--output", str(out)], capture_output=True, text=True, env=record.user_env())
    seconds = time.perf_counter() - t0
    if run.returncode != 0:
        return {"file": src.name, "exit": run.returncode, "error": run.stderr[-500:]}
    notes = [line for line in run.stderr.splitlines() if "paragraph(s)" in line]
    return measured(src, out, source, kind, seconds, notes)


def measured(src: Path, out: Path, source: str, kind: str, seconds: float, notes: list[str]) -> dict[str, object]:
    """What the issue asks of a translated PDF ``out`` of ``src``, whoever translated it."""
    from aiayn.documents import pdf
    from aiayn.serving.api import Detector

    every = pdf.boxes(src, src.name, every=True)
    before = [b for b in every if b.letters]
    after_every = pdf.boxes(out, out.name, every=True)
    after = [b for b in after_every if b.letters]
    kept = set(formulas(after_every))
    detector = Detector()
    wordy = [b.text for b in after if len(b.text.split()) >= 4]
    still = [t for t in wordy if detector.rank(t, best=1)[0]["language"] == source]
    check = subprocess.run(["qpdf", "--check", str(out)], capture_output=True, text=True)
    pages = int(subprocess.run(["qpdf", "--show-npages", str(src)], capture_output=True, text=True).stdout)
    return {"file": src.name, "kind": kind, "pages": pages, "seconds": round(seconds, 1),
            "seconds_per_page": round(seconds / pages, 2),
            "boxes": len(before), "boxes_after": len(after),
            "notes": notes,
            "paragraphs_of_4_words_or_more": len(wordy), "still_in_source_language": len(still),
            "still_share": round(len(still) / max(1, len(wordy)), 4), "still_sample": still[:5],
            "overlaps_before": pdf.overlaps(before), "overlaps_after": pdf.overlaps(after),
            "qpdf_check_clean": check.returncode == 0, "fonts_not_embedded_before": _unembedded(src),
            "fonts_not_embedded_after": _unembedded(out), "annotations_before": _annotations(src),
            "annotations_after": _annotations(out), "formulas": len(formulas(every)),
            "formulas_kept": sum(1 for f in formulas(every) if f in kept),
            "formulas_drawn_the_same": drawn_the_same(src, out, every),
            "styled_words_before": styled_words(before), "styled_words_after": styled_words(after)}


def styled_words(found: list) -> int:
    """Words of the boxes with letters that are set in a face other than their box's own (a word's own bold, italic
    or code), as the marks of their faces say (documents/pdf.py: inline)."""
    from aiayn.documents import pdf
    from aiayn.translation import spans

    n = 0
    for box in found:
        inside = 0
        for piece in pdf.inline(box.marked, box.face):
            inside += isinstance(piece, spans.Open) - isinstance(piece, spans.Close)
            if inside and isinstance(piece, str):
                n += len(re.findall(r"[^\W\d_]{2,}", piece))
    return n


def _docx_text(path: Path) -> str:
    """A .docx's text, a paragraph a line."""
    import re
    import zipfile
    from html import unescape

    xml = zipfile.ZipFile(path).read("word/document.xml").decode("utf-8")
    paragraphs = re.findall(r"<w:p[ >].*?</w:p>", xml, flags=re.S)
    return "\n".join(t for t in (unescape("".join(re.findall(r"<w:t(?: [^>]*)?>([^<]*)</w:t>", p)))
                                 for p in paragraphs) if t.strip())


def whole_sentences(corpus: Path, outputs: Path, model: str, others: Path | None = None) -> list[dict[str, object]]:
    """Each LibreOffice document translated as its .docx (the PDF's own translation already in ``outputs``, and
    LibreTranslate's in ``others`` when given): the English of each scored against the English original, as one
    document (sacrebleu's BLEU over all its words), and the PDF's against the .docx's."""
    import sacrebleu

    from aiayn.documents import pdf

    rows = []
    for docx in sorted((corpus / "docx").glob("*.docx")):
        name, translated_pdf = docx.stem, outputs / f"libreoffice-{docx.stem}.pdf"
        reference = (corpus / "english" / f"{name}.txt").read_text(encoding="utf-8")
        out = outputs / f"{name}.docx"
        run = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", model, "--input", str(docx),
                              "--output", str(out)], capture_output=True, text=True, env=record.user_env())
        if run.returncode != 0 or not translated_pdf.is_file():
            rows.append({"document": name, "error": run.stderr[-300:]})
            continue
        from_docx = " ".join(_docx_text(out).split())
        from_pdf = " ".join(" ".join(b.text for b in pdf.boxes(translated_pdf, name)).split())
        ref = " ".join(reference.split())
        row = {"document": name, "bleu_docx": round(sacrebleu.corpus_bleu([from_docx], [[ref]]).score, 2),
               "bleu_pdf": round(sacrebleu.corpus_bleu([from_pdf], [[ref]]).score, 2),
               "bleu_pdf_against_docx": round(sacrebleu.corpus_bleu([from_pdf], [[from_docx]]).score, 2),
               "words_docx": len(from_docx.split()), "words_pdf": len(from_pdf.split()),
               "words_reference": len(ref.split())}
        theirs = others / f"libreoffice-{docx.stem}.pdf" if others else None
        if theirs and theirs.is_file():
            from_theirs = " ".join(" ".join(b.text for b in pdf.boxes(theirs, name)).split())
            row |= {"bleu_pdf_libretranslate": round(sacrebleu.corpus_bleu([from_theirs], [[ref]]).score, 2),
                    "bleu_pdf_libretranslate_against_docx":
                        round(sacrebleu.corpus_bleu([from_theirs], [[from_docx]]).score, 2),
                    "words_pdf_libretranslate": len(from_theirs.split())}
        rows.append(row)
    return rows


def _version(venv: Path, name: str) -> str:
    show = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "show", name], capture_output=True, text=True)
    return next((line.split(":", 1)[1].strip() for line in show.stdout.splitlines() if line.startswith("Version:")), "")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--source", default="de", help="the PDFs' language (what the detector must no longer find)")
    p.add_argument("--pdf", type=Path, action="append", default=[])
    p.add_argument("--corpus", type=Path, help="a folder pdf-corpus built: its corpus/KIND/*.pdf, docx/, english/")
    p.add_argument("--target", default="en", help="the model's target language (for LibreTranslate's path)")
    p.add_argument("--libretranslate", type=Path, metavar="VENV",
                   help="a virtualenv with argos-translate-files: LibreTranslate's PDF path measured beside aiayn's")
    p.add_argument("--libretranslate-kinds", default="libreoffice,slides",
                   help="the kinds of the corpus LibreTranslate's path is run on (comma-separated)")
    p.add_argument("--libretranslate-limit", type=int, default=300, metavar="SECONDS",
                   help="LibreTranslate's path stopped after this long on one PDF (it redacts span by span)")
    a = p.parse_args(argv)
    record.COMMAND[:] = ["python", "-m", "benchmarks", "pdf", "--model", a.model, "--source", a.source,
                         *(["--corpus", str(a.corpus)] if a.corpus else []), *[x for f in a.pdf for x in ("--pdf", str(f))],
                         *(["--libretranslate", str(a.libretranslate), "--libretranslate-kinds",
                            a.libretranslate_kinds, "--libretranslate-limit", str(a.libretranslate_limit)]
                           if a.libretranslate else [])]
    files = [(f, "") for f in a.pdf] + ([(f, f.parent.name) for f in sorted((a.corpus / "corpus").glob("*/*.pdf"))]
                                        if a.corpus else [])
    if not files:
        sys.exit("no PDFs: give --pdf or --corpus")
    if not (shutil.which("qpdf") and shutil.which("pdffonts")):
        sys.exit("qpdf and pdffonts are needed (make tools)")
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = Path(tmp) / "aiayn", Path(tmp) / "libretranslate"
        ours.mkdir(), theirs.mkdir()
        rows = [measure(f, ours / f"{kind or 'pdf'}-{f.name}", a.model, a.source, kind) for f, kind in files]
        others = []
        if a.libretranslate:
            kinds = [(f, kind) for f, kind in files if kind in a.libretranslate_kinds.split(",")]
            outs = [(f, theirs / f"{kind or 'pdf'}-{f.name}") for f, kind in kinds]
            done = libretranslate(a.libretranslate, a.model, a.source, a.target, outs, Path(tmp) / "argos",
                                  a.libretranslate_limit)
            others = [measured(f, out, a.source, kind, done[str(out)]["seconds"], [])
                      if out.is_file() and "error" not in done.get(str(out), {}) else
                      {"file": f.name, "kind": kind, **done.get(str(out), {"error": "no output"})}
                      for (f, kind), (_, out) in zip(kinds, outs, strict=True)]
        pairs = whole_sentences(a.corpus, ours, a.model, theirs if a.libretranslate else None) if a.corpus else []
    report = {"model": a.model, "source": a.source, "files": rows, "whole_sentences": pairs,
              **({"libretranslate": {"argos_translate_files": _version(a.libretranslate, "argos-translate-files"),
                                     "pymupdf": _version(a.libretranslate, "pymupdf"), "files": others}}
                 if a.libretranslate else {})}
    print(json.dumps(report, indent=2, ensure_ascii=False))
    print(f"recorded in {record.write('pdf', report)}")


if __name__ == "__main__":
    main()
