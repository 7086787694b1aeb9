"""Real PDFs through ``aiayn translate --input X.pdf --output Y.pdf`` with a trained run, measured as the PDF issue
asks: the boxes (paragraphs) found and translated, those left as they were, the translated paragraphs a language
detector still finds in the source language, boxes overlapping before and after, ``qpdf --check``, fonts not embedded
(``pdffonts``' "emb" column) before and after, links and annotations before and after, pages, and the time.

    apt-get download debian-reference-de bash-doc && dpkg-deb -x debian-reference-de_*.deb x && dpkg-deb -x bash-doc_*.deb x
    qpdf x/usr/share/debian-reference/debian-reference.de.pdf --pages . 1-12 -- debref-de.pdf
    python -m benchmarks pdf --model runs/demo/run-de-en --source de --pdf debref-de.pdf [--pdf ...]

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


def measure(src: Path, out: Path, model: str, source: str) -> dict[str, object]:
    from aiayn.documents import pdf
    from aiayn.serving.libretranslate import Detector

    before = pdf.boxes(src, src.name)
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", model, "--input", str(src),
                          "--output", str(out)], capture_output=True, text=True, env=record.user_env())
    seconds = time.perf_counter() - t0
    if run.returncode != 0:
        return {"file": src.name, "exit": run.returncode, "error": run.stderr[-500:]}
    after = pdf.boxes(out, out.name)
    detector = Detector()
    wordy = [b.text for b in after if len(b.text.split()) >= 4]
    still = [t for t in wordy if detector.rank(t, best=1)[0]["language"] == source]
    check = subprocess.run(["qpdf", "--check", str(out)], capture_output=True, text=True)
    pages = int(subprocess.run(["qpdf", "--show-npages", str(src)], capture_output=True, text=True).stdout)
    return {"file": src.name, "pages": pages, "seconds": round(seconds, 1), "seconds_per_page": round(seconds / pages, 2),
            "boxes": len(before), "boxes_after": len(after),
            "notes": [line for line in run.stderr.splitlines() if "paragraph(s)" in line],
            "paragraphs_of_4_words_or_more": len(wordy), "still_in_source_language": len(still),
            "still_share": round(len(still) / max(1, len(wordy)), 4), "still_sample": still[:5],
            "overlaps_before": pdf.overlaps(before), "overlaps_after": pdf.overlaps(after),
            "qpdf_check_clean": check.returncode == 0, "fonts_not_embedded_before": _unembedded(src),
            "fonts_not_embedded_after": _unembedded(out), "annotations_before": _annotations(src),
            "annotations_after": _annotations(out)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--source", default="de", help="the PDFs' language (what the detector must no longer find)")
    p.add_argument("--pdf", type=Path, action="append", required=True)
    a = p.parse_args(argv)
    record.COMMAND[:] = ["python", "-m", "benchmarks", "pdf", "--model", a.model, "--source", a.source,
                         *[x for f in a.pdf for x in ("--pdf", str(f))]]
    if not (shutil.which("qpdf") and shutil.which("pdffonts")):
        sys.exit("qpdf and pdffonts are needed (make tools)")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(f, Path(tmp) / f"out-{f.name}", a.model, a.source) for f in a.pdf]
    report = {"model": a.model, "source": a.source, "files": rows}
    print(json.dumps(report, indent=2, ensure_ascii=False))
    print(f"recorded in {record.write('pdf', report)}")


if __name__ == "__main__":
    main()
