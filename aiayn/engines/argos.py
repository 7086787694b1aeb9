"""Argos Translate packages read: what LibreTranslate and Argos Translate install, served by aiayn's CTranslate2 engine.

An Argos package (``.argosmodel``) is a zip archive of one folder holding ``metadata.json`` (its languages and
version), ``model/`` (a CTranslate2 model), ``sentencepiece.model`` (one SentencePiece model for both sides) and
optionally a ``README.md`` and a sentence splitter's model (``minisbd/``, ``stanza/``).

``aiayn serve --model PATH`` (or ``aiayn translate --model PATH``) takes a ``.argosmodel`` (unpacked into the cache,
once per file content), a package's folder, or a folder of installed packages (``~/.local/share/argos-translate/
packages``); each is served by aiayn's CTranslate2 engine with aiayn's sentence splitting and text handling
(pipeline.py), not Argos's. A package aiayn wrote carries its run's length rule, length penalty and calibration
(``model/aiayn-export.json``); any other is decoded as Argos decodes it (beam 4, length penalty 0.2, at most 256
tokens).

An engine of its own only in how it is found and unpacked: the package's ``model/`` is a CTranslate2 model, decoded by
:class:`~aiayn.engines.ctranslate2.CTranslate2Engine`. Writing a package (``aiayn export --format argos``) is
interop/argos.py's.
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

from ..config import Multilingual
from .ctranslate2 import EXPORT_SPM, INFO

SUFFIX = ".argosmodel"
METADATA = "metadata.json"
SPM = "sentencepiece.model"
MOST_BYTES = 8 << 30            # what an archive may unpack to (a large Argos model is about 300 MB)


def cache_dir() -> Path:
    """Where a ``.argosmodel`` served is unpacked: ``$AIAYN_CACHE/argos`` (default ``~/.cache/aiayn/argos``)."""
    return Path(os.environ.get("AIAYN_CACHE", Path.home() / ".cache" / "aiayn")) / "argos"


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
    from .ctranslate2 import CTranslate2Engine

    meta, model = metadata(package), package / "model"
    src, tgt = meta["from_code"], meta["to_code"]
    if not (model / INFO).is_file():                  # a package aiayn did not write: decoded as Argos decodes it
        info = {"lenpen": 0.2, "length_norm": "length", "max_len_a": 0.0, "max_len_b": 256, "min_len": 0,
                "max_positions": 1024, "languages": [src, tgt], "argos": True}
        staged = Path(tempfile.mkdtemp(prefix="aiayn-argos-"))
        for f in model.iterdir():                     # (the model's files linked, not copied; aiayn's beside them)
            (staged / f.name).symlink_to(f.resolve())
        shutil.copyfile(package / SPM, staged / EXPORT_SPM)
        if meta.get("target_prefix"):                 # its translations start with this piece (a language tag)
            info["multilingual"] = Multilingual((src, tgt), ((src, tgt),), "target",
                                                tags={tgt: str(meta["target_prefix"])}).to_dict()
        (staged / INFO).write_text(json.dumps(info))
        model = staged
    engine = CTranslate2Engine.from_export(model, languages=(src, tgt), **settings)
    if engine.multilingual is None:
        return engine
    from ..data.multilingual import for_direction

    return for_direction(engine, src, tgt)              # one direction of a multilingual model (aiayn's, or tagged)
