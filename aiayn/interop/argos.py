"""Argos Translate packages in and out: what LibreTranslate and Argos Translate install and serve.

An Argos package (``.argosmodel``) is a zip archive of one folder holding ``metadata.json`` (its languages and
version), ``model/`` (a CTranslate2 model), ``sentencepiece.model`` (one SentencePiece model for both sides) and
optionally a ``README.md`` and a sentence splitter's model (``minisbd/``, ``stanza/``).

- **Out**: ``aiayn export --format argos --out DIR`` writes ``DIR/translate-SRC_TGT-VERSION.argosmodel``, which
  ``argostranslate.package.install_from_path`` installs and LibreTranslate then serves: the run's CTranslate2 export
  (export.py, float32 or int8) as ``model/``, its joint SentencePiece model, and metadata from the run's languages. No
  sentence splitter is packed: Argos fetches MiniSBD's for the source language on first use (online).
- **In**: ``aiayn serve --model PATH`` takes a ``.argosmodel`` (unpacked into the cache, once per file content), a
  package's folder, or a folder of installed packages (``~/.local/share/argos-translate/packages``); each is served by
  aiayn's CTranslate2 engine with aiayn's sentence splitting and text handling (pipeline.py), not Argos's. A package
  aiayn wrote carries its run's length rule, length penalty and calibration (``model/aiayn-export.json``); any other
  is decoded as Argos decodes it (beam 4, length penalty 0.2, at most 256 tokens).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from ..engines.ctranslate2 import EXPORT_SPM, INFO
from ..languages import language_name

SUFFIX = ".argosmodel"
METADATA = "metadata.json"
SPM = "sentencepiece.model"
MOST_BYTES = 8 << 30            # what an archive may unpack to (a large Argos model is about 300 MB)


def cache_dir() -> Path:
    """Where a ``.argosmodel`` served is unpacked: ``$AIAYN_CACHE/argos`` (default ``~/.cache/aiayn/argos``)."""
    return Path(os.environ.get("AIAYN_CACHE", Path.home() / ".cache" / "aiayn")) / "argos"


def package_name(source: str, target: str, version: str) -> str:
    """Argos's name for a package (and its folder): ``translate-de_en-1_0``."""
    return f"translate-{source}_{target}-{version.replace('.', '_')}"


def write_package(ct2_dir: Path, out: Path, languages: tuple[str, str], version: str = "1.0",
                  readme: str = "") -> Path:
    """The ``.argosmodel`` in folder ``out`` made of the CTranslate2 export ``ct2_dir`` (aiayn's, with its joint
    SentencePiece model) for ``languages``."""
    src, tgt = languages
    name = package_name(src, tgt, version)
    metadata = {"package_version": version, "argos_version": "1.9", "from_code": src, "from_name": language_name(src),
                "to_code": tgt, "to_name": language_name(tgt), "type": "translate", "links": [],
                "source_languages": [{"code": src, "name": language_name(src)}],
                "target_languages": [{"code": tgt, "name": language_name(tgt)}]}
    path = out / f"{name}{SUFFIX}"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{name}/{METADATA}", json.dumps(metadata, indent=2) + "\n")
        z.write(ct2_dir / EXPORT_SPM, f"{name}/{SPM}")
        z.writestr(f"{name}/README.md", readme or f"# {language_name(src)} to {language_name(tgt)}\n\nMade with aiayn.\n")
        for f in sorted(ct2_dir.rglob("*")):
            if f.is_file():
                z.write(f, f"{name}/model/{f.relative_to(ct2_dir).as_posix()}")
    return path


def is_package(path: str | Path) -> bool:
    """Whether ``path`` is an Argos package (a ``.argosmodel`` file, or a folder with metadata.json and model/) or a
    folder of them."""
    p = Path(path)
    return (p.is_file() and p.suffix == SUFFIX) or (p / METADATA).is_file() or \
        (p.is_dir() and any((d / METADATA).is_file() and (d / "model").is_dir() for d in p.iterdir() if d.is_dir()))


def packages(path: str | Path, cache: Path | None = None) -> list[Path]:
    """The package folders ``path`` stands for (the module's docstring): a ``.argosmodel`` is unpacked under
    ``cache`` (default :func:`cache_dir`)."""
    p = Path(path)
    if p.is_file():
        return [unpack(p, cache or cache_dir())]
    if (p / METADATA).is_file():
        return [p]
    found = sorted(d for d in p.iterdir() if (d / METADATA).is_file() and (d / "model").is_dir())
    if not found:
        raise ValueError(f"{p}: no Argos package in it (a folder with metadata.json and model/)")
    return found


def unpack(archive: Path, cache: Path) -> Path:
    """The folder of package ``archive``, unpacked (once per content: named by its hash) under ``cache``; every entry
    is checked first (names within the folder, the total size), so that an archive cannot write elsewhere."""
    h = hashlib.sha256()
    with open(archive, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    where = cache / h.hexdigest()[:16]
    try:
        z = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as e:
        raise ValueError(f"{archive}: not an Argos package (not a zip archive: {e})") from None
    with z:
        names = [i.filename for i in z.infolist()]
        roots = {n.split("/", 1)[0] for n in names}
        if len(roots) != 1 or any(n.startswith("/") or ".." in n.split("/") or "\\" in n for n in names):
            raise ValueError(f"{archive}: not an Argos package (its entries must all lie in one folder)")
        if sum(i.file_size for i in z.infolist()) > MOST_BYTES:
            raise ValueError(f"{archive}: unpacks to more than {MOST_BYTES >> 30} GiB")
        folder = where / roots.pop()
        if not (folder / METADATA).is_file():
            where.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=where.parent))
            try:
                z.extractall(tmp)
                shutil.rmtree(where, ignore_errors=True)
                tmp.rename(where)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    if not (folder / METADATA).is_file() or not (folder / "model").is_dir():
        raise ValueError(f"{archive}: not an Argos package (no {METADATA} and model/ in {folder.name})")
    return folder


def metadata(package: Path) -> dict[str, Any]:
    try:
        meta = json.loads((package / METADATA).read_text(encoding="utf-8"))
        src, tgt = str(meta["from_code"]), str(meta["to_code"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{package / METADATA}: not an Argos package's metadata ({e})") from None
    return {**meta, "from_code": src, "to_code": tgt}


def load(package: Path, **settings: Any) -> Any:
    """Package folder ``package`` as a CTranslate2Engine (``settings``: DecodeConfig fields, precision, workers)."""
    from ..engines.ctranslate2 import CTranslate2Engine

    meta, model = metadata(package), package / "model"
    if not (model / INFO).is_file():                  # a package aiayn did not write: decoded as Argos decodes it
        info = {"lenpen": 0.2, "length_norm": "length", "max_len_a": 0.0, "max_len_b": 256, "min_len": 0,
                "max_positions": 1024, "languages": [meta["from_code"], meta["to_code"]], "argos": True}
        staged = Path(tempfile.mkdtemp(prefix="aiayn-argos-"))
        for f in model.iterdir():                     # (the model's files linked, not copied; aiayn's beside them)
            (staged / f.name).symlink_to(f.resolve())
        shutil.copyfile(package / SPM, staged / EXPORT_SPM)
        (staged / INFO).write_text(json.dumps(info))
        model = staged
    return CTranslate2Engine.from_export(model, languages=(meta["from_code"], meta["to_code"]), **settings)
