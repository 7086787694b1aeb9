"""Argos Translate packages written: ``aiayn export --format argos --out DIR`` makes
``DIR/translate-SRC_TGT-VERSION.argosmodel``, which ``argostranslate.package.install_from_path`` installs and
LibreTranslate then serves.

A package is a zip archive of one folder (engines/argos.py, which reads them, says what is in it): the run's CTranslate2
export (export.py, float32 or int8) as ``model/``, its joint SentencePiece model, and metadata from the run's
languages. No sentence splitter is packed: Argos fetches MiniSBD's for the source language on first use (online).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from ..engines.argos import METADATA, SPM, SUFFIX
from ..engines.ctranslate2 import EXPORT_SPM
from ..translation.route import language_name


def package_name(source: str, target: str, version: str) -> str:
    """Argos's name for a package (and its folder): ``translate-de_en-1_0``."""
    return f"translate-{source}_{target}-{version.replace('.', '_')}"


def write_package(ct2_dir: Path, out: Path, languages: tuple[str, str], version: str = "1.0",
                  readme: str = "", target_prefix: str = "") -> Path:
    """The ``.argosmodel`` in folder ``out`` made of the CTranslate2 export ``ct2_dir`` (aiayn's, with its joint
    SentencePiece model) for ``languages``; ``target_prefix``: the piece argostranslate starts every translation with
    and takes off again (a multilingual model's target-side tag)."""
    src, tgt = languages
    name = package_name(src, tgt, version)
    metadata = {"package_version": version, "argos_version": "1.9", "from_code": src, "from_name": language_name(src),
                "to_code": tgt, "to_name": language_name(tgt), "type": "translate", "links": [],
                "source_languages": [{"code": src, "name": language_name(src)}],
                "target_languages": [{"code": tgt, "name": language_name(tgt)}],
                **({"target_prefix": target_prefix} if target_prefix else {})}
    path = out / f"{name}{SUFFIX}"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{name}/{METADATA}", json.dumps(metadata, indent=2) + "\n")
        z.write(ct2_dir / EXPORT_SPM, f"{name}/{SPM}")
        z.writestr(f"{name}/README.md", readme or f"# {language_name(src)} to {language_name(tgt)}\n\nMade with aiayn.\n")
        for f in sorted(ct2_dir.rglob("*")):
            if f.is_file():
                z.write(f, f"{name}/model/{f.relative_to(ct2_dir).as_posix()}")
    return path
