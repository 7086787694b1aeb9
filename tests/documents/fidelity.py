"""What a document's translation must keep, measured on a (source, output) pair by the tools its users check with:
gettext's ``msgfmt -c --use-fuzzy`` and the directives of each entry's flags, GTK's and KDE's accelerators as
pofilter counts them, markdown-it's tree and link targets, subtitles' cues, timings and dialogue dashes, XLIFF's
units and OASIS's schemas, a page's tags, epubcheck. tests/documents/test_realfiles.py asserts them on real files
translated by the stand-in; ``python -m benchmarks realfiles`` records them with a model. Each function returns
counts (``*_kept`` of ``*``) and a list of what went wrong (``problems``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

from aiayn.documents import catalogs
from aiayn.translation import formatstrings


def catalogue(src: Path, out: Path) -> dict[str, Any]:
    """A PO file: entries to translate and translated, each flag's directives kept (every directive of the source
    in the translation, as often), accelerators kept, and what ``msgfmt -c --use-fuzzy`` says of the output."""
    from translate.storage import pypo

    before = {(u.getcontext(), str(u.source)): u for u in pypo.pofile.parsefile(str(src)).units
              if not u.isheader() and not u.isobsolete() and u.source}
    after = {(u.getcontext(), str(u.source)): u for u in pypo.pofile.parsefile(str(out)).units
             if not u.isheader() and not u.isobsolete() and u.source}
    todo = [k for k, u in before.items() if not any(str(s or "").strip() for s in _strings(u.target))
            and str(u.source).strip()]                    # (a msgid of spaces alone is its own translation)
    marker = catalogs.accelerator_marker([str(before[k].source) for k in todo])
    m: dict[str, Any] = Counter(entries=len(todo), translated=0, directives=0, directives_kept=0, accelerators=0,
                                accelerators_kept=0, msgfmt_errors=0)
    problems: list[str] = []
    for key in todo:
        u = after[key]
        targets = _strings(u.target)
        if not any(str(t or "").strip() for t in targets):
            continue
        m["translated"] += 1
        sources = [str(s) for s in u.source.strings] if u.hasplural() else [str(u.source)]
        pairs = [(sources[0] if i == 0 else sources[-1], str(t)) for i, t in enumerate(targets)]
        for flag in catalogs.formats(u):
            for s, t in pairs:
                want = Counter(d.text for d in formatstrings.directives(s, flag) if d.arg is not None)
                got = Counter(d.text for d in formatstrings.directives(t, flag) if d.arg is not None)
                m["directives"] += sum(want.values())
                m["directives_kept"] += sum(min(n, got[d]) for d, n in want.items())
                if want - got:
                    problems.append(f"{key[1][:60]!r}: {flag} {sorted(want - got)} lost in {t[:60]!r}")
        if marker:
            for s, t in pairs:
                if catalogs.accelerators(s, marker):
                    m["accelerators"] += 1
                    kept = len(catalogs.accelerators(t, marker)) == len(catalogs.accelerators(s, marker))
                    m["accelerators_kept"] += kept
                    if not kept:
                        problems.append(f"{s[:60]!r}: accelerator lost in {t[:60]!r}")
    tool = shutil.which("msgfmt")
    if tool:
        run = subprocess.run([tool, "-c", "--use-fuzzy", "-o", "/dev/null", str(out)], capture_output=True,
                             text=True)
        errors = [line for line in run.stderr.splitlines() if "warning:" not in line and line.strip()]
        m["msgfmt_errors"] = len(errors) if run.returncode else 0
        problems += errors[:10]
    return {**m, "problems": problems}


def _strings(target: Any) -> list[Any]:
    return list(target.strings) if hasattr(target, "strings") else [target]


_TIMING = re.compile(r"^\s*(?:\d+:)?\d{1,2}:\d{2}[,.]\d{1,3}\s*-->")
_DASH = re.compile(r"^\s*(?:[-‐–—]|>>|[♪♫])")
_STAMP = re.compile(r"<(?:\d+:)?\d{2}:\d{2}\.\d{3}>")


def subtitles(src: Path, out: Path, encoding: str | None = None) -> dict[str, Any]:
    """A subtitle file: its timing lines (the same, in order), the cue lines that start with a dialogue dash or
    another marker, karaoke timestamps, the byte-order mark and line ends."""
    a = src.read_bytes().decode(encoding or "utf-8-sig", "replace")
    b = out.read_bytes().decode("utf-8-sig")
    ta = [line.strip() for line in a.splitlines() if _TIMING.match(line)]
    tb = [line.strip() for line in b.splitlines() if _TIMING.match(line)]
    m: dict[str, Any] = {"cues": len(ta), "cues_kept": sum(x == y for x, y in zip(ta, tb, strict=True)) if len(ta) == len(tb)
                         else 0}
    m["dashes"] = sum(bool(_DASH.match(line)) for line in _cue_lines(a))
    m["dashes_kept"] = min(m["dashes"], sum(bool(_DASH.match(line)) for line in _cue_lines(b)))
    m["timestamps"] = len(_STAMP.findall(a))
    m["timestamps_kept"] = min(m["timestamps"], len(_STAMP.findall(b)))
    m["bom_kept"] = src.read_bytes()[:3] == out.read_bytes()[:3] if src.read_bytes()[:3] == b"\xef\xbb\xbf" else True
    m["crlf_kept"] = (b"\r\n" in src.read_bytes()) == (b"\r\n" in out.read_bytes())
    problems = [f"timing lines {len(ta)} -> {len(tb)}"] if len(ta) != len(tb) else []
    problems += [f"{m['dashes'] - m['dashes_kept']} dialogue dashes lost"] if m["dashes"] != m["dashes_kept"] else []
    return {**m, "problems": problems}


def _cue_lines(text: str) -> list[str]:
    out, inside = [], False
    for line in text.splitlines():
        if _TIMING.match(line):
            inside = True
        elif not line.strip():
            inside = False
        elif inside:
            out.append(line)
    return out


def markdown(src: Path, out: Path) -> dict[str, Any]:
    """A Markdown file as markdown-it reads it: its blocks (the same tree), its link and image targets (the same,
    references resolved; in any order, as a translation moves words), the start tags of its HTML, GitHub's alerts,
    links left with no text."""
    a, b = _tree(src.read_text(encoding="utf-8-sig")), _tree(out.read_text(encoding="utf-8-sig"))
    m = {"blocks": len(a["blocks"]), "blocks_kept": len(a["blocks"]) if a["blocks"] == b["blocks"] else 0,
         "links": len(a["links"]), "links_kept": sum((Counter(a["links"]) & Counter(b["links"])).values()),
         "tags": len(a["tags"]), "tags_kept": sum((Counter(a["tags"]) & Counter(b["tags"])).values()),
         "alerts": a["alerts"], "alerts_kept": min(a["alerts"], b["alerts"]),
         "empty_links": b["empty"] - a["empty"]}
    problems = [f"blocks differ at {_first_diff(a['blocks'], b['blocks'])}"] if a["blocks"] != b["blocks"] else []
    problems += [f"{k}: {Counter(a[k]) - Counter(b[k])} lost, {Counter(b[k]) - Counter(a[k])} added"
                 for k in ("links", "tags") if Counter(a[k]) != Counter(b[k])]   # (in any order: words move)
    problems += [f"{m['empty_links']} links emptied"] if m["empty_links"] > 0 else []
    return {**m, "problems": problems}


def _first_diff(x: list[Any], y: list[Any]) -> str:
    k = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
    return f"{k}: {x[k:k + 2]} -> {y[k:k + 2]} (of {len(x)} -> {len(y)})"


def _tree(text: str) -> dict[str, Any]:
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(text)
    links, tags = [], []
    for t in tokens:
        if t.type == "html_block":
            tags += re.findall(r"<[A-Za-z][\w-]*", t.content)
        for c in t.children or []:
            if c.type in ("link_open", "image"):
                links.append(c.attrs.get("href") or c.attrs.get("src"))
            elif c.type == "html_inline":
                tags += re.findall(r"<[A-Za-z][\w-]*", c.content)
    return {"blocks": [t.type for t in tokens if t.type != "inline"], "links": links, "tags": tags,
            "alerts": len(re.findall(r"^\s*>\s*\[!(?:NOTE|TIP|IMPORTANT|WARNING|CAUTION)\]", text, re.M)),
            "empty": len(re.findall(r"(?<!!)\[\]\(", text))}


def xliff(src: Path, out: Path, schemas: dict[str, Path | None] | None = None) -> dict[str, Any]:
    """An XLIFF file: its units (1.2's trans-units and segment markers, 2.0's segments) with no target before and
    one after, and whether the output is valid against OASIS's schema where the input was."""
    from lxml import etree

    def todo(path: Path) -> tuple[int, int]:
        root = etree.parse(str(path)).getroot()
        ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
        empty = total = 0
        for unit in root.iter(ns + "trans-unit", ns + "segment"):
            says = next((a.get("translate") for a in unit.iterancestors() if a.get("translate")), None)
            if (unit.get("translate") or says) == "no":
                continue                                # (translate="no": nothing to translate; the nearest wins)
            segs = unit.find(ns + "seg-source")
            target = unit.find(ns + "target")
            if segs is not None and segs.findall(".//" + ns + "mrk"):
                for mrk in segs.iter(ns + "mrk"):
                    if mrk.get("mtype") == "seg" and _words(mrk).strip():     # (one of codes alone: nothing)
                        total += 1
                        mine = [t for t in (target.iter(ns + "mrk") if target is not None else [])
                                if t.get("mid") == mrk.get("mid")]
                        empty += not mine or not "".join(mine[0].itertext()).strip()
            elif unit.find(ns + "source") is not None and _words(unit.find(ns + "source")).strip():
                total += 1                              # (a unit with an empty source has nothing to translate)
                empty += target is None or not "".join(target.itertext()).strip()
        return empty, total

    (empty, total), (left, _) = todo(src), todo(out)
    m: dict[str, Any] = {"units": total, "to_translate": empty, "translated": empty - left}
    problems = []
    for version, path in (schemas or {}).items():
        if path is None:
            continue
        root = etree.parse(str(src)).getroot()
        if not root.tag.endswith("xliff") or ("2.0" in root.tag) != (version == "2.0"):
            continue
        local = (path.parent / "xml.xsd").as_uri()          # (its import of xml.xsd from here, not the web)
        text = re.sub(r'schemaLocation="[^"]*xml\.xsd"', f'schemaLocation="{local}"', path.read_text(encoding="utf-8"))
        schema = etree.XMLSchema(etree.fromstring(text.encode("utf-8"), base_url=path.parent.as_uri() + "/"))
        before, after = schema.validate(etree.parse(str(src))), schema.validate(etree.parse(str(out)))
        m["valid_before"], m["valid_after"] = before, after
        if before and not after:
            problems.append(f"invalid against {path.name}: {[str(e) for e in schema.error_log][:3]}")
    return {**m, "problems": problems}


def _words(el: Any) -> str:
    """An XLIFF element's text outside its codes (``<ph>``, ``<bpt>``, ``<ept>``, ``<it>`` hold native code)."""
    out = [el.text or ""]
    for child in el:
        if child.tag.split("}")[-1] not in ("ph", "bpt", "ept", "it"):
            out.append(_words(child))
        out.append(child.tail or "")
    return "".join(out)


def page(src: Path, out: Path) -> dict[str, Any]:
    """An HTML page: its start tags (the same, in order), ruby annotations and soft hyphens."""
    a, b = src.read_text(encoding="utf-8", errors="replace"), out.read_text(encoding="utf-8", errors="replace")
    ta, tb = re.findall(r"<([A-Za-z][\w-]*)", a), re.findall(r"<([A-Za-z][\w-]*)", b)
    m = {"tags": len(ta), "tags_kept": len(ta) if Counter(ta) == Counter(tb) else 0,
         "shy": a.count("&shy;") + a.count("\u00ad"), "shy_kept": b.count("&shy;") + b.count("\u00ad")}
    return {**m, "problems": [] if m["tags_kept"] == m["tags"] else [f"tags {Counter(ta) - Counter(tb)} lost, "
                                                                      f"{Counter(tb) - Counter(ta)} added"]}


def epubcheck(path: Path) -> int | None:
    """epubcheck's count of errors (fatal ones too) in an EPUB; None where epubcheck is not installed."""
    tool = shutil.which("epubcheck")
    if tool is None:
        return None
    # The JVM's quick compiler alone and one GC thread: a check of a small book takes half the CPU time it does with
    # the JVM's defaults, which compile for a long run.
    quick = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    with open(tool, "rb") as f:                           # (Debian's is a jar that binfmt_misc would run)
        command = ["java", *quick, "-jar", tool] if f.read(2) == b"PK" else [tool]
    env = {**os.environ, "JAVA_TOOL_OPTIONS": " ".join(quick)} if command == [tool] else None
    run = subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=300, env=env)
    found = re.search(r"Messages: (\d+) fatals? / (\d+) errors?", run.stdout + run.stderr)
    return int(found.group(1)) + int(found.group(2)) if found else (0 if run.returncode == 0 else 1)


def epub_errors_added(src: Path, out: Path) -> int | None:
    """How many more errors epubcheck finds in EPUB ``out`` than in ``src`` (at most 0 is as good); None where
    epubcheck is not installed. ``src`` is checked only where ``out`` has errors (a check is seconds of the JVM)."""
    after = epubcheck(out)
    if not after:
        return after
    before = epubcheck(src)
    return None if before is None else after - before


def archive(src: Path, out: Path) -> dict[str, Any]:
    """An office document or EPUB: the same entries, each XML part that was well-formed still so."""
    from lxml import etree

    def broken(z: zipfile.ZipFile, n: str) -> str | None:
        try:
            etree.fromstring(z.read(n), etree.XMLParser(resolve_entities=False))
            return None
        except etree.XMLSyntaxError as e:
            return f"{n}: {e}"

    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out) as b:
        names_a, names_b = a.namelist(), b.namelist()
        parts = [n for n in names_b if n.endswith((".xml", ".xhtml", ".opf", ".ncx", ".rels")) and n in names_a]
        broken = [e for n in parts if (e := broken(b, n)) and not broken(a, n)]    # (broken by the translation)
    return {"entries": len(names_a), "entries_kept": len(set(names_a) & set(names_b)), "broken_parts": len(broken),
            "problems": broken}
