"""Real PDFs through ``aiayn translate --input X.pdf --output Y.pdf`` with a trained run, measured as the PDF issue
asks: the boxes (paragraphs) found and translated, those left as they were, the translated paragraphs a language
detector still finds in the source language, boxes overlapping before and after, ``qpdf --check``, fonts not embedded
(``pdffonts``' "emb" column) before and after, links and annotations before and after, pages, and the time.

    python -m benchmarks pdf-corpus --out build/pdf-corpus --class-notes class-notes    # (see pdf_corpus.py)
    python -m benchmarks pdf --model runs/demo/run-de-en --source de --corpus build/pdf-corpus [--pdf X.pdf ...]

With ``--corpus``: every PDF of its four kinds (real, libreoffice, latex, slides), formulas kept counted, and the
whole-sentence comparison: each LibreOffice document translated as its .docx and as its PDF, the English text of each
scored against the English original (document BLEU, sacrebleu), and the PDF's against the .docx's.

Records benchmarks/results/pdf/pdf-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def formulas(found: list) -> list[tuple[str, tuple[int, ...]]]:
    """The boxes of formulas (or music) a PDF holds: their text and place."""
    from aiayn.documents import pdf

    return [(b.text, tuple(round(v) for v in b.rect)) for b in found if not b.letters and pdf.OPEN in b.marked]


def measure(src: Path, out: Path, model: str, source: str, kind: str = "") -> dict[str, object]:
    from aiayn.documents import pdf
    from aiayn.serving.libretranslate import Detector

    every = pdf.boxes(src, src.name, every=True)
    before = [b for b in every if b.letters]
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", model, "--input", str(src),
                          "--output", str(out)], capture_output=True, text=True, env=record.user_env())
    seconds = time.perf_counter() - t0
    if run.returncode != 0:
        return {"file": src.name, "exit": run.returncode, "error": run.stderr[-500:]}
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
            "notes": [line for line in run.stderr.splitlines() if "paragraph(s)" in line],
            "paragraphs_of_4_words_or_more": len(wordy), "still_in_source_language": len(still),
            "still_share": round(len(still) / max(1, len(wordy)), 4), "still_sample": still[:5],
            "overlaps_before": pdf.overlaps(before), "overlaps_after": pdf.overlaps(after),
            "qpdf_check_clean": check.returncode == 0, "fonts_not_embedded_before": _unembedded(src),
            "fonts_not_embedded_after": _unembedded(out), "annotations_before": _annotations(src),
            "annotations_after": _annotations(out), "formulas": len(formulas(every)),
            "formulas_kept": sum(1 for f in formulas(every) if f in kept)}


def _docx_text(path: Path) -> str:
    """A .docx's text, a paragraph a line."""
    import re
    import zipfile
    from html import unescape

    xml = zipfile.ZipFile(path).read("word/document.xml").decode("utf-8")
    paragraphs = re.findall(r"<w:p[ >].*?</w:p>", xml, flags=re.S)
    return "\n".join(t for t in (unescape("".join(re.findall(r"<w:t(?: [^>]*)?>([^<]*)</w:t>", p)))
                                 for p in paragraphs) if t.strip())


def whole_sentences(corpus: Path, outputs: Path, model: str) -> list[dict[str, object]]:
    """Each LibreOffice document translated as its .docx (the PDF's own translation already in ``outputs``): the
    English of each scored against the English original, as one document (sacrebleu's BLEU over all its words), and
    the PDF's against the .docx's."""
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
        rows.append({"document": name, "bleu_docx": round(sacrebleu.corpus_bleu([from_docx], [[ref]]).score, 2),
                     "bleu_pdf": round(sacrebleu.corpus_bleu([from_pdf], [[ref]]).score, 2),
                     "bleu_pdf_against_docx": round(sacrebleu.corpus_bleu([from_pdf], [[from_docx]]).score, 2),
                     "words_docx": len(from_docx.split()), "words_pdf": len(from_pdf.split()),
                     "words_reference": len(ref.split())})
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--source", default="de", help="the PDFs' language (what the detector must no longer find)")
    p.add_argument("--pdf", type=Path, action="append", default=[])
    p.add_argument("--corpus", type=Path, help="a folder pdf-corpus built: its corpus/KIND/*.pdf, docx/, english/")
    a = p.parse_args(argv)
    record.COMMAND[:] = ["python", "-m", "benchmarks", "pdf", "--model", a.model, "--source", a.source,
                         *(["--corpus", str(a.corpus)] if a.corpus else []), *[x for f in a.pdf for x in ("--pdf", str(f))]]
    files = [(f, "") for f in a.pdf] + ([(f, f.parent.name) for f in sorted((a.corpus / "corpus").glob("*/*.pdf"))]
                                        if a.corpus else [])
    if not files:
        sys.exit("no PDFs: give --pdf or --corpus")
    if not (shutil.which("qpdf") and shutil.which("pdffonts")):
        sys.exit("qpdf and pdffonts are needed (make tools)")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(f, Path(tmp) / f"{kind or 'pdf'}-{f.name}", a.model, a.source, kind) for f, kind in files]
        pairs = whole_sentences(a.corpus, Path(tmp), a.model) if a.corpus else []
    report = {"model": a.model, "source": a.source, "files": rows, "whole_sentences": pairs}
    print(json.dumps(report, indent=2, ensure_ascii=False))
    print(f"recorded in {record.write('pdf', report)}")


if __name__ == "__main__":
    main()
