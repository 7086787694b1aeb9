"""Documents that come back whole, and a file door that holds, on real files from public projects (issue 67).

    python -m benchmarks files --model runs/demo/run-de-en [--data ../shared/data] [--parts catalogues,xliff,...]

The files are not in this repository: ``--data`` holds them, each folder with an ORIGIN.md naming the project,
path and commit (../shared/data here). Every part runs what a user runs (``aiayn translate`` in its own process, or
a real ``aiayn serve`` on a free port) and counts with the format's own tools:

- **catalogues**: each German catalogue of ``catalogues/`` made German-source (every translated entry's msgstr its
  msgid, a plural's forms its msgid and msgid_plural; a duplicate once), translated; placeholders and tags kept of
  those in the msgids (spans.py, each entry's kinds by its flags as catalogs.py reads them), ``msgfmt -c``'s verdict.
- **xliff**: ``xliff/validators.de.xlf`` (Symfony's, English source) made German-source in XLIFF 1.2 and as 2.0,
  and translate-toolkit's odf2xliff file with ``<g>`` tags: inline codes and placeholders kept, valid against
  OASIS's schemas (``xliff/*.xsd``).
- **subtitles**: ``subtitles/*.srt`` (pysrt's, one with every tag and font, one cp1252, one UTF-16): cues, each cue's
  line count, tags kept.
- **markdown**: ``markdown/*.md``: markdown-it's tree of the output against the input's, the number of lines.
- **html**: ``html/*.html`` (the Apache manual in German, ISO-8859-1 XHTML): well-formed, links none empty or
  nested, every byte outside the text kept.
- **epub**: ``epub/*.epub`` through ``/translate_file`` with the server's default limits: status and seconds.
- **burst**: 40 uploads at once (a Markdown file with bold words and links) to a server with one decoding worker:
  the statuses, the slowest answer against ``--file-timeout``, SIGTERM's exit status and time, files left behind.
- **bombs**: a docx holding a 2 GB image, a pptx holding 6 GB, a docx of 3 million paragraphs (bzip2 packs each to
  kilobytes): status, seconds, the server's peak memory over its idle.
- **laughs**: a 5 KB billion-laughs XLIFF, once and six at once: statuses, seconds, the server's memory.
- **sigterm**: SIGTERM 8 s into a 4,000-line document's translation: its answer, the server's exit status and time,
  tracebacks and CancelledErrors in its log.

Records ``results/files/files-<date>.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402

PARTS = ("catalogues", "xliff", "subtitles", "markdown", "html", "epub", "burst", "bombs", "laughs", "sigterm")


def cli(model: str, src: Path, dst: Path, *flags: str) -> tuple[float, str]:
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", model, "--input", str(src),
                          "--output", str(dst), "--quiet", *flags], capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"aiayn translate failed on {src.name}: {run.stderr[-2000:]}")
    return round(time.perf_counter() - start, 2), run.stderr.strip().splitlines()[-1]


# --- catalogues ---------------------------------------------------------------------------------------------------


def german_source(po: Path, out: Path) -> int:
    """``po``'s translated entries as a German-source catalogue (the module's docstring); returns its entries."""
    from translate.misc.multistring import multistring
    from translate.storage import pypo

    src = pypo.pofile.parsefile(str(po))
    made = pypo.pofile()
    made.units = []
    seen: set[tuple[str | None, str]] = set()
    for u in src.units:
        if u.isheader() or u.isobsolete():
            made.addunit(u)
            continue
        if not u.istranslated() or u.isfuzzy():
            continue
        forms = [str(s) for s in u.target.strings] if u.hasplural() else [str(u.target)]
        if (u.getcontext(), forms[0]) in seen:
            continue
        seen.add((u.getcontext(), forms[0]))
        v = pypo.pounit()
        v.source = multistring([forms[0], forms[1] if len(forms) > 1 else forms[0]]) if u.hasplural() else forms[0]
        v.target = multistring(["", ""]) if u.hasplural() else ""
        v.typecomments, v.sourcecomments, v.automaticcomments = u.typecomments, u.sourcecomments, u.automaticcomments
        if u.getcontext():
            v.setcontext(u.getcontext())
        made.addunit(v)
    out.write_bytes(bytes(made))
    return len(seen)


def span_counts(po: Path) -> dict[str, int]:
    """Placeholders and tags of every translated entry's msgid kept in its msgstr (each plural form against the
    msgid_plural), by spans.py with the entry's kinds."""
    from translate.storage import pypo

    from aiayn.documents.catalogs import kinds
    from aiayn.translation import spans

    base = (*spans.DEFAULT, "tags")
    kept = total = entries = 0
    for u in pypo.pofile.parsefile(str(po)).units:
        if u.isheader() or u.isobsolete() or not str(u.target):
            continue
        entries += 1
        pairs = [(str(u.source.strings[-1]), str(t)) for t in u.target.strings[1:]] + \
            [(str(u.source.strings[0]), str(u.target.strings[0]))] if u.hasplural() else [(str(u.source), str(u.target))]
        for source, target in pairs:
            k, n = spans.kept(source, target, kinds(u, base))
            kept, total = kept + k, total + n
    return {"entries": entries, "kept": kept, "total": total}


def msgfmt(path: Path) -> str:
    run = subprocess.run(["msgfmt", "-c", "-o", "/dev/null", str(path)], capture_output=True, text=True)
    return "ok" if run.returncode == 0 else run.stderr.strip()[-500:]


def catalogues(model: str, data: Path, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for po in sorted((data / "catalogues").glob("*.po")):
        src, dst = tmp / f"{po.stem}.de.pot", tmp / f"{po.stem}.en.po"
        german_source(po, src)
        seconds, summary = cli(model, src, dst)
        out[po.stem] = {**span_counts(dst), "msgfmt_source": msgfmt(src), "msgfmt": msgfmt(dst), "seconds": seconds,
                        "summary": summary}
        print(po.stem, out[po.stem])
    out["all"] = {k: sum(v[k] for v in out.values()) for k in ("entries", "kept", "total")}
    return out


# --- xliff ------------------------------------------------------------------------------------------------------


def _schema(data: Path, version: str) -> Any:
    from lxml import etree

    folder = data / "xliff"
    name = "xliff-core-1.2-transitional.xsd" if version == "1.2" else "xliff-core-2.0.xsd"
    text = (folder / name).read_text(encoding="utf-8")
    local = (folder / "xml.xsd").as_uri()
    text = text.replace("http://www.w3.org/2001/xml.xsd", local).replace(
        "informativeCopiesOf3rdPartySchemas/w3c/xml.xsd", local)
    return etree.XMLSchema(etree.fromstring(text.encode(), base_url=folder.as_uri() + "/"))


def xliff(model: str, data: Path, tmp: Path) -> dict[str, Any]:
    from lxml import etree

    text = (data / "xliff" / "validators.de.xlf").read_text(encoding="utf-8")
    units = re.findall(r'<trans-unit id="([^"]+)">\s*<source>(.*?)</source>\s*<target>(.*?)</target>', text, re.S)
    v12 = re.sub(r'(<trans-unit id="[^"]+">\s*)<source>.*?</source>(\s*)<target>(.*?)</target>',
                 r"\1<source>\3</source>", text, flags=re.S).replace('source-language="en" target-language="de"',
                                                                      'source-language="de"')
    v20 = ('<?xml version="1.0" encoding="utf-8"?>\n<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" '
           'version="2.0" srcLang="de">\n  <file id="validators">\n' + "".join(
               f'    <unit id="u{k}">\n      <segment>\n        <source>{target}</source>\n      </segment>\n'
               f"    </unit>\n" for k, (_, _, target) in enumerate(units)) + "  </file>\n</xliff>\n")
    files = {"validators.de.xlf": (v12, "1.2"), "validators.de.2.0.xlf": (v20, "2.0"),
             "odf2xliff-inline.xlf": ((data / "xliff" / "odf2xliff-inline.xlf").read_text(encoding="utf-8"), None)}
    out: dict[str, Any] = {}
    for name, (content, version) in files.items():
        src, dst = tmp / name, tmp / f"en-{name}"
        src.write_text(content, encoding="utf-8")
        seconds, summary = cli(model, src, dst)
        m = re.search(r"(\d+) of (\d+) kept", summary)
        row: dict[str, Any] = {"units": len(units) if version else None, "kept": int(m.group(1)) if m else None,
                               "total": int(m.group(2)) if m else None, "seconds": seconds}
        if version:
            schema = _schema(data, version)
            row["valid"] = bool(schema.validate(etree.parse(str(dst))))
            row["errors"] = [str(e) for e in schema.error_log][:3]
        out[name] = row
        print(name, row)
    return out


# --- subtitles, markdown, html ------------------------------------------------------------------------------------


def _cues(text: str) -> list[list[str]]:
    blocks = re.split(r"\r?\n\r?\n", text.strip("\ufeff").strip())
    return [b.splitlines()[2:] for b in blocks if len(b.splitlines()) > 1 and "-->" in b.splitlines()[1]]


def subtitles(model: str, data: Path, tmp: Path) -> dict[str, Any]:
    from aiayn.documents.encoding import decode

    out: dict[str, Any] = {}
    for srt in sorted((data / "subtitles").glob("*.srt")):
        dst = tmp / f"en-{srt.name}"
        seconds, summary = cli(model, srt, dst)
        before = _cues(decode(srt.read_bytes(), srt.name)[0])
        after = _cues(dst.read_text(encoding="utf-8"))
        tags = re.compile(r"</?[A-Za-z][^<>]*>|\{\\[^}]*\}")                  # (not "2<3,5>1": text)
        out[srt.name] = {"cues": len(before), "cues_out": len(after),
                         "same_line_count": sum(len(a) == len(b) for a, b in zip(after, before, strict=False)),
                         "tags": sum(len(tags.findall("\n".join(c))) for c in before),
                         "tags_out": sum(len(tags.findall("\n".join(c))) for c in after), "seconds": seconds,
                         "summary": summary}
        print(srt.name, out[srt.name])
    return out


def _shape(text: str) -> list[tuple[Any, ...]]:
    from markdown_it import MarkdownIt

    out: list[tuple[Any, ...]] = []

    def walk(tokens: list[Any]) -> None:
        for t in tokens:
            if t.type not in ("text", "softbreak"):
                out.append((t.type, tuple(sorted((k, v) for k, v in (t.attrs or {}).items() if k != "alt"))))
                walk(t.children or [])

    walk(MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(text))
    return out


def markdown(model: str, data: Path, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for md in sorted((data / "markdown").glob("*.md")):
        dst = tmp / f"en-{md.name}"
        seconds, summary = cli(model, md, dst)
        a, b = md.read_text(encoding="utf-8"), dst.read_text(encoding="utf-8")
        sa, sb = _shape(a), _shape(b)
        refs = re.compile(r"^\[[^\]]+\]: .*$", re.M)
        out[md.name] = {"tokens": len(sa), "same_tree": sa == sb, "same_tokens": sorted(map(repr, sa)) ==
                        sorted(map(repr, sb)), "lines": len(a.split("\n")), "lines_out": len(b.split("\n")),
                        "reference_definitions_kept": refs.findall(a) == refs.findall(b), "seconds": seconds}
        print(md.name, out[md.name])
    return out


def _numeric(data: bytes) -> bytes:
    """XHTML's named entities (&nbsp;, &para;) as character references, for a parser that does not read the DTD."""
    from html.entities import name2codepoint

    return re.sub(rb"&(\w+);", lambda m: b"&#%d;" % name2codepoint[m.group(1).decode()] if m.group(1).decode() in
                  name2codepoint and m.group(1) not in (b"amp", b"lt", b"gt", b"quot", b"apos") else m.group(0), data)


def html(model: str, data: Path, tmp: Path) -> dict[str, Any]:
    from lxml import etree

    x = "{http://www.w3.org/1999/xhtml}"
    out: dict[str, Any] = {}
    for page in sorted((data / "html").glob("*.html")):
        dst = tmp / f"en-{page.name}"
        seconds, summary = cli(model, page, dst)
        root, before = (etree.fromstring(_numeric(p.read_bytes())) for p in (dst, page))
        links = [a for a in root.iter(x + "a") if a.get("href")]
        out[page.name] = {"links": len([a for a in before.iter(x + "a") if a.get("href")]), "links_out": len(links),
                          "links_empty": sum(not "".join(a.itertext()).strip() for a in links),
                          "links_empty_before": sum(not "".join(a.itertext()).strip() for a in before.iter(x + "a")
                                                    if a.get("href")),
                          "links_nested": sum(1 for a in links for b in a.iter(x + "a") if b is not a),
                          "head_kept": dst.read_bytes()[:dst.read_bytes().index(b"<title>")] ==
                          page.read_bytes()[:page.read_bytes().index(b"<title>")], "seconds": seconds}
        print(page.name, out[page.name])
    return out


# --- the server: EPUBs, a burst, bombs ----------------------------------------------------------------------------


class Server:
    """`aiayn serve` on a free port, its temp folder ``tmp``."""

    def __init__(self, model: str, tmp: Path, *flags: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = tempfile.TemporaryFile()
        self.tmp = tmp
        self.proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--model", model, "--port",
                                      str(self.port), *flags], stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "TMPDIR": str(tmp)})
        for _ in range(600):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2).status == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("the server did not start")

    def upload(self, name: str, data: bytes, timeout: float = 900) -> tuple[int, Any, float]:
        boundary = "b0undary"
        body = (f'--{boundary}\r\nContent-Disposition: form-data; name="source"\r\n\r\nde\r\n--{boundary}\r\n'
                f'Content-Disposition: form-data; name="target"\r\n\r\nen\r\n--{boundary}\r\nContent-Disposition: '
                f'form-data; name="file"; filename="{name}"\r\n\r\n').encode() + data + f"\r\n--{boundary}--\r\n".encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/translate_file", body, method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read()), time.perf_counter() - start
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}"), time.perf_counter() - start

    def rss(self, field: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> tuple[int, float]:
        start = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return code, round(time.perf_counter() - start, 2)

    def tracebacks(self) -> int:
        self.log.seek(0)
        return self.log.read().decode(errors="replace").count("Traceback")


def epub(model: str, data: Path, tmp: Path) -> dict[str, Any]:
    s = Server(model, tmp)
    out: dict[str, Any] = {}
    try:
        for book in sorted((data / "epub").glob("*.epub"), key=lambda p: p.stat().st_size):
            try:
                status, answer, seconds = s.upload(book.name, book.read_bytes())
            except OSError as e:                        # (past --max-body-bytes the server answers 413 and closes)
                status, answer, seconds = 0, {"error": str(e)}, 0.0
            out[book.name] = {"bytes": book.stat().st_size, "status": status, "seconds": round(seconds, 1),
                              "error": answer.get("error")}
            print(book.name, out[book.name])
    finally:
        out["stop"] = s.stop()
    return out


def burst(model: str, data: Path, tmp: Path, n: int = 40) -> dict[str, Any]:
    page = ("# Ein Bericht\n\n" + "\n\n".join(f"Ein **Hund** rennt über die [Wiese](https://x.org/{k}). Zwei Kinder "
                                              f"spielen im *Sand*." for k in range(30)) + "\n").encode()
    folder = tmp / "burst"
    folder.mkdir()
    s = Server(model, folder, "--workers", "1")
    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            results = list(pool.map(lambda k: s.upload(f"bericht-{k}.md", page, timeout=300), range(n)))
        took = time.perf_counter() - start
        health = urllib.request.urlopen(f"http://127.0.0.1:{s.port}/health", timeout=5).status
    finally:
        code, stopping = s.stop()
    statuses: dict[str, int] = {}
    for status, _, _ in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    out = {"uploads": n, "statuses": statuses, "slowest_s": round(max(t for _, _, t in results), 1),
           "all_s": round(took, 1), "health_after": health, "sigterm_exit": code, "sigterm_s": stopping,
           "files_left": [str(p) for p in folder.rglob("*")], "tracebacks": s.tracebacks()}
    print("burst", out)
    return out


def _docx_base() -> bytes:
    import docx

    b = io.BytesIO()
    d = docx.Document()
    d.add_paragraph("Ein Hund rennt über die Wiese.")
    d.save(b)
    with zipfile.ZipFile(io.BytesIO(b.getvalue())) as a:        # without its thumbnail: as small as Word's own
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            for info in a.infolist():
                if not info.filename.endswith(".jpeg"):
                    z.writestr(info.filename, a.read(info), zipfile.ZIP_DEFLATED, 9)
    return out.getvalue()


def packed(base: bytes, entries: dict[str, bytes | int]) -> bytes:
    """The archive ``base`` with ``entries`` (name -> its bytes, or a number of zero bytes written a block at a time)
    added or replaced, bzip2-packed: a bomb of a few kilobytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(base)) as a, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for info in a.infolist():
            if info.filename not in entries:
                z.writestr(info.filename, a.read(info), zipfile.ZIP_DEFLATED, 9)
        for name, content in entries.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_BZIP2
            with z.open(info, "w", force_zip64=True) as w:
                if isinstance(content, bytes):
                    w.write(content)
                    continue
                block = bytes(1 << 24)
                for _ in range(content >> 24):
                    w.write(block)
    return out.getvalue()


def bomb_files(image: int = 2 << 30, images: int = 3, paragraphs: int = 3_000_000) -> dict[str, bytes]:
    """A docx holding an image of ``image`` zero bytes, a pptx holding ``images`` of them, a docx of ``paragraphs``
    empty paragraphs: each a few tens of kilobytes (the tests make smaller ones)."""
    import pptx

    deck = io.BytesIO()
    p = pptx.Presentation()
    p.slides.add_slide(p.slide_layouts[6])
    p.save(deck)
    xml = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w="http://schemas.openxmlformats'
           '.org/wordprocessingml/2006/main"><w:body>' + "<w:p/>" * paragraphs + "</w:body></w:document>").encode()
    return {"image.docx": packed(_docx_base(), {"word/media/image1.png": image}),
            "deck.pptx": packed(deck.getvalue(), {f"ppt/media/image{k}.png": image for k in range(1, images + 1)}),
            "paragraphs.docx": packed(_docx_base(), {"word/document.xml": xml})}


def bombs(model: str, data: Path, tmp: Path) -> dict[str, Any]:
    made = bomb_files()
    s = Server(model, tmp)
    out: dict[str, Any] = {}
    try:
        time.sleep(2)
        idle = s.rss("VmRSS")
        for name, content in made.items():
            with zipfile.ZipFile(io.BytesIO(content)) as z:
                unpacked = sum(i.file_size for i in z.infolist())
            status, answer, seconds = s.upload(name, content)
            out[name] = {"bytes": len(content), "unpacks_to": unpacked, "status": status, "seconds": round(seconds, 3),
                         "error": answer.get("error")}
            print(name, out[name])
        out["idle_rss_mb"] = round(idle / 2**20)
        out["peak_rss_over_idle_mb"] = round((s.rss("VmHWM") - idle) / 2**20)
    finally:
        out["stop"] = s.stop()
    return out


def billion_laughs() -> bytes:
    """A 5 KB XLIFF whose one unit's source expands to 10^9 "lol"s (3 GB) through nine nested entities."""
    decls = ['<!ENTITY lol "lol">'] + [f'<!ENTITY lol{k} "{("&lol" + (str(k - 1) if k > 1 else "") + ";") * 10}">'
                                       for k in range(1, 10)]
    return (f'<?xml version="1.0"?>\n<!DOCTYPE xliff [{"".join(decls)}]>\n<xliff version="1.2" xmlns="urn:oasis:'
            'names:tc:xliff:document:1.2"><file source-language="de" datatype="plaintext" original="x"><body>'
            '<trans-unit id="1"><source>&lol9;</source></trans-unit></body></file></xliff>').encode()


def laughs(model: str, data: Path, tmp: Path, n: int = 6) -> dict[str, Any]:
    """One billion-laughs XLIFF, then ``n`` at once: statuses, seconds, the server's memory."""
    from concurrent.futures import ThreadPoolExecutor

    bomb = billion_laughs()
    s = Server(model, tmp)
    out: dict[str, Any] = {"bytes": len(bomb)}
    try:
        time.sleep(2)
        idle, peak = s.rss("VmRSS"), s.rss("VmHWM")
        status, answer, seconds = s.upload("lol.xlf", bomb)
        out["one"] = {"status": status, "seconds": round(seconds, 4), "error": answer.get("error")}
        start = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            statuses = [r[0] for r in pool.map(lambda k: s.upload(f"lol{k}.xlf", bomb), range(n))]
        out[f"{n}_at_once"] = {"statuses": statuses, "seconds": round(time.perf_counter() - start, 4)}
        out["rss_over_idle_mb"] = round((s.rss("VmRSS") - idle) / 2**20, 1)
        out["peak_growth_mb"] = round((s.rss("VmHWM") - peak) / 2**20, 1)
        print(out)
    finally:
        out["stop"] = s.stop()
    return out


def sigterm(model: str, data: Path, tmp: Path) -> dict[str, Any]:
    """A long document being translated when SIGTERM comes: its answer, how long the server takes to exit, and
    whether its log holds a traceback."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(5)
    words = "Hund Katze Wiese Kind spielt rennt über die eine der im Sand am Strand".split()
    text = "\n".join(" ".join(rng.choice(words) for _ in range(12)) + "." for _ in range(4000)).encode()
    s = Server(model, tmp, "--file-timeout", "600")
    out: dict[str, Any] = {"lines": 4000}
    try:
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(s.upload, "lang.txt", text, 600)
            time.sleep(8)                                   # (as the finding: 8 s into its translation)
            out["exit"] = s.stop()
            status, body, _ = answer.result(timeout=120)
        out.update(status=status, error=body.get("error"), tracebacks=s.tracebacks())
        s.log.seek(0)
        out["cancelled_errors"] = s.log.read().decode(errors="replace").count("CancelledError")
        print(out)
    finally:
        if s.proc.poll() is None:
            s.stop()
    return out


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks files", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", type=Path, default=HERE.parents[1] / "shared" / "data")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    a = ap.parse_args(argv)
    parts = [p for p in a.parts.split(",") if p]
    figures: dict[str, Any] = {"model": a.model, "data": str(a.data)}
    with tempfile.TemporaryDirectory() as tmp:
        for part in parts:
            folder = Path(tmp) / part
            folder.mkdir()
            try:
                figures[part] = RUNS[part](a.model, a.data, folder)
            except Exception as e:  # noqa: BLE001 - one part's failure recorded, the others still run
                figures[part] = {"error": f"{type(e).__name__}: {e}"}
                print(part, "failed:", figures[part]["error"])
    print(json.dumps(figures, indent=1, ensure_ascii=False))
    print(f"recorded {record.write('files', figures)}")


RUNS = {"catalogues": catalogues, "xliff": xliff, "subtitles": subtitles, "markdown": markdown, "html": html,
        "epub": epub, "burst": burst, "bombs": bombs, "laughs": laughs, "sigterm": sigterm}
