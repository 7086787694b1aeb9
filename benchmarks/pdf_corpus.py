"""The real PDFs the PDF benchmark reads, of four kinds, German all, built again from public sources by the tools that
made them (none is committed; ``python -m benchmarks pdf --corpus DIR`` reads them):

- **real**: PDFs as Debian ships them (bookworm): DBLaTeX with xdvipdfmx (the Debian FAQ, the Debian Edu manual,
  LinuxCNC's guide, the New Maintainers' Guide, the Debian Reference), Sphinx with pdfTeX (the Ubuntu Packaging Guide,
  the Developer's Reference), Texinfo with Ghostscript (LilyPond's essay: music set in its own fonts, TeX's OT1
  accents), each cut to 8 pages with qpdf (the Debian Reference to 100, the long one);
- **libreoffice**: German HTML documentation from the same packages opened in LibreOffice Writer, saved as .docx and
  that .docx exported to PDF (``soffice --headless``): the pairs the whole-sentence comparison reads, with the
  English original of each (english/NAME.txt: these documents were written in English and translated);
- **latex**: chapters of Julian Valentin's German class notes (github.com/valentjn/class-notes, CC BY-SA 4.0: analysis,
  algebra, numerics; formulas on every line) set in two columns by pdfTeX (benchmarks/pdf/class-notes-preamble.tex);
- **slides**: the same HTML's sections as slides (each heading a slide, its first sentences bullets), written by
  pandoc as .pptx and exported by LibreOffice Impress.

    apt-get install qpdf texlive-latex-base texlive-latex-recommended texlive-lang-german pandoc \\
        libreoffice-writer-nogui libreoffice-impress-nogui
    git clone https://github.com/valentjn/class-notes
    python -m benchmarks pdf-corpus --out build/pdf-corpus --class-notes class-notes
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = ("debian-faq", "maint-guide", "debian-reference-en", "debian-faq-de",
            "debian-edu-doc-de", "linuxcnc-doc-de", "maint-guide-de", "debian-reference-de",
            "ubuntu-packaging-guide-pdf-de", "developers-reference-de", "lilypond-doc-pdf-de")
REAL = {  # name: (path in the packages, pages)
    "debian-faq": ("usr/share/doc/debian/FAQ/debian-faq.de.pdf", "5-12"),
    "debian-edu": ("usr/share/doc/debian-edu-doc-de/debian-edu-bookworm-manual.pdf", "5-12"),
    "linuxcnc": ("usr/share/doc/linuxcnc/LinuxCNC_Getting_Started_de.pdf", "5-12"),
    "maint-guide": ("usr/share/doc/maint-guide-de/maint-guide.de.pdf", "5-12"),
    "ubuntu-packaging": ("usr/share/doc/ubuntu-packaging-guide-pdf-de/ubuntu-packaging-guide.pdf", "5-12"),
    "developers-reference": ("usr/share/developers-reference/de/developers-reference.pdf", "10-17"),
    "lilypond-essay": ("usr/share/doc/lilypond/html/Documentation/essay.de.pdf", "5-12"),
    "debian-reference-100": ("usr/share/debian-reference/debian-reference.de.pdf", "25-124"),
}
HTML = {  # name: German HTML in the packages
    "faq-basic-defs": "usr/share/doc/debian/FAQ/de/basic-defs.de.html",
    "maint-first": "usr/share/doc/maint-guide-de/html/first.de.html",
    "debref-ch01": "usr/share/debian-reference/ch01.de.html",
}
ENGLISH = {  # name: the English original of each German HTML (the documents were written in English, then translated)
    "faq-basic-defs": "usr/share/doc/debian/FAQ/basic-defs.en.html",
    "maint-first": "usr/share/doc/maint-guide/html/first.en.html",
    "debref-ch01": "usr/share/debian-reference/ch01.en.html",
}
NOTES = {  # name: (lecture, chapter) of the class notes
    "analysis-1-differentialrechnung": ("analysis-1", "03_differentialrechnung"),
    "algebra-gruppen": ("algebra", "01_gruppen"),
    "analysis-2-reihen": ("analysis-2", "01_reihen_uneigentliche_integrale"),
}


def run(*cmd: str, cwd: Path | None = None) -> None:
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def debian(out: Path) -> Path:
    """The packages downloaded (apt-get download) and unpacked into out/x."""
    debs, x = out / "debs", out / "x"
    debs.mkdir(parents=True, exist_ok=True)
    missing = [p for p in PACKAGES if not list(debs.glob(f"{p}_*.deb"))]
    if missing:
        run("apt-get", "download", *missing, cwd=debs)
    for deb in debs.glob("*.deb"):
        run("dpkg-deb", "-x", str(deb), str(x))
    for gz in x.rglob("*.pdf.gz"):
        run("gunzip", "-kf", str(gz))
    return x


def real(x: Path, out: Path) -> None:
    for name, (path, pages) in REAL.items():
        run("qpdf", str(x / path), "--pages", ".", pages, "--", str(out / f"{name}.pdf"))


def slides_markdown(html: Path) -> str:
    """A document's sections as slides: each heading a slide, the first sentence of up to five of its paragraphs and
    list items its bullets."""
    import lxml.html

    doc = lxml.html.parse(str(html)).getroot()
    for bad in doc.xpath('//div[contains(@class,"navheader") or contains(@class,"navfooter") or '
                         'contains(@class,"toc")]|//pre|//table'):
        bad.getparent().remove(bad)
    md, bullets = [], 0
    for el in doc.iter("h1", "h2", "h3", "p", "li"):
        text = re.sub(r"\s+", " ", el.text_content()).strip()
        if el.tag in ("h1", "h2", "h3") and text:
            md.append(f"\n# {text}\n")
            bullets = 0
        elif text and bullets < 5 and (el.tag == "li" or el.getparent().tag != "li"):
            first = re.split(r"(?<=[.!?])\s+", text)[0]
            if len(first) > 15:
                md.append(f"- {first[:160]}")
                bullets += 1
    return "\n".join(md) + "\n"


def office(x: Path, out: Path, docx: Path) -> None:
    """LibreOffice's PDFs (and the .docx each was exported from) and the slides."""
    work = out.parent / "work"
    work.mkdir(exist_ok=True)
    for name, path in HTML.items():
        shutil.copy(x / path, work / f"{name}.html")
        run("soffice", "--headless", "--infilter=HTML (StarWriter)", "--convert-to", "docx:MS Word 2007 XML",
            f"{name}.html", cwd=work)
        run("soffice", "--headless", "--convert-to", "pdf", f"{name}.docx", cwd=work)
        shutil.copy(work / f"{name}.docx", docx / f"{name}.docx")
        shutil.copy(work / f"{name}.pdf", out / "libreoffice" / f"{name}.pdf")
        (work / f"slides-{name}.md").write_text(slides_markdown(work / f"{name}.html"), encoding="utf-8")
        run("pandoc", f"slides-{name}.md", "-o", f"slides-{name}.pptx", cwd=work)
        run("soffice", "--headless", "--convert-to", "pdf", f"slides-{name}.pptx", cwd=work)
        shutil.copy(work / f"slides-{name}.pdf", out / "slides" / f"{name}.pdf")


def english(x: Path, out: Path) -> None:
    """Each English original's text, a paragraph (heading, list item, cell) a line: the reference the whole-sentence
    comparison scores both translations against."""
    import lxml.html

    for name, path in ENGLISH.items():
        doc = lxml.html.parse(str(x / path)).getroot()
        lines = [re.sub(r"\s+", " ", el.text_content()).strip() for el in doc.iter("h1", "h2", "h3", "p", "li", "td", "dt")]
        (out / f"{name}.txt").write_text("\n".join(t for t in lines if t) + "\n", encoding="utf-8")


def latex(notes: Path, out: Path) -> None:
    """Chapters of the class notes in two columns: the preamble, the lecture's own commands, the chapter."""
    work = out.parent / "work"
    preamble = (HERE / "pdf" / "class-notes-preamble.tex").read_text(encoding="utf-8")
    for name, (lecture, chapter) in NOTES.items():
        include = (notes / "src" / "lectures" / lecture / "include.tex").read_text(encoding="utf-8")
        commands = include.split("begin-mathjax-commands", 1)[-1].split("% class-notes: end-mathjax-commands")[0]
        commands = commands.replace("\\renewcommand*", "\\providecommand*").replace("\\newcommand*", "\\providecommand*")
        body = (notes / "src" / "lectures" / lecture / f"{chapter}.tex").read_text(encoding="utf-8")
        tex = preamble.replace("\\begin{document}", commands + "\n\\begin{document}") + body + "\n\\end{document}\n"
        (work / f"{name}.tex").write_text(tex, encoding="utf-8")
        subprocess.run(["pdflatex", "-interaction=nonstopmode", f"{name}.tex"], cwd=work, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=300)
        if not (work / f"{name}.pdf").is_file():
            sys.exit(f"pdflatex made no PDF of {name}: see {work / name}.log")
        pages = int(subprocess.run(["qpdf", "--show-npages", str(work / f"{name}.pdf")], capture_output=True,
                                   text=True, check=True).stdout)
        run("qpdf", str(work / f"{name}.pdf"), "--pages", ".", f"1-{min(8, pages)}", "--",
            str(out / "latex" / f"{name}.pdf"))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=HERE.parent / "build" / "pdf-corpus")
    p.add_argument("--class-notes", type=Path, required=True, help="a checkout of github.com/valentjn/class-notes")
    a = p.parse_args(argv)
    for tool in ("apt-get", "dpkg-deb", "qpdf", "soffice", "pandoc", "pdflatex"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is needed (see this module's docstring)")
    corpus, docx = a.out / "corpus", a.out / "docx"
    for d in (corpus / "real", corpus / "libreoffice", corpus / "latex", corpus / "slides", docx, a.out / "english"):
        d.mkdir(parents=True, exist_ok=True)
    x = debian(a.out)
    real(x, corpus / "real")
    office(x, corpus, docx)
    english(x, a.out / "english")
    latex(a.class_notes, corpus)
    for kind in sorted(corpus.iterdir()):
        print(f"{kind.name}: {', '.join(sorted(f.name for f in kind.glob('*.pdf')))}")


if __name__ == "__main__":
    main()
