"""Zip archives (docx, pptx, odt, odp, epub) read within limits and written back part by part.

A zip's central directory says what each entry unpacks to, so an archive that would expand past
:class:`~.common.Limits` (in all, in one entry, or by its compression ratio: a zip bomb) is refused before anything is
unpacked, and reading an entry never yields more than the directory said. The parts a format translates are parsed;
every other entry (images, fonts, styles) is copied into the output as a stream, a MiB at a time, never held in memory,
in the same order and with the same compression (an EPUB's or OpenDocument's ``mimetype`` stays first and stored).
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from .common import DocumentError, Limits

MIB = 1 << 20


class Archive:
    """A zip archive checked against ``limits`` as it is opened (DocumentError naming the file otherwise)."""

    def __init__(self, path: Path, limits: Limits, name: str | None = None) -> None:
        self.path, self.limits, self.name = path, limits, name or path.name
        try:
            self.zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as e:
            raise DocumentError(f"{self.name} is not a readable zip archive ({e})") from None
        self.infos = self.zip.infolist()
        if len(self.infos) > limits.entries:
            self.close()
            raise DocumentError(f"{self.name} has {len(self.infos)} entries; at most {limits.entries}")
        total = 0
        for info in self.infos:
            total += info.file_size
            packed = max(info.compress_size, 1)
            if info.file_size > MIB and info.file_size > limits.ratio * packed:
                self.close()
                raise DocumentError(f"{self.name}: {info.filename} unpacks to {info.file_size:,} bytes from "
                                    f"{info.compress_size:,} (more than {limits.ratio} times): refused as a zip bomb")
        if total > limits.expanded:
            self.close()
            raise DocumentError(f"{self.name} unpacks to {total:,} bytes; at most {limits.expanded:,}")
        self.names = [i.filename for i in self.infos]

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.zip.close()

    def has(self, name: str) -> bool:
        return name in self.names

    def read(self, name: str) -> bytes:
        """A part to parse, within :attr:`Limits.part` (DocumentError naming it otherwise, or if it is damaged)."""
        info = self.zip.getinfo(name)
        if info.file_size > self.limits.part:
            raise DocumentError(f"{self.name}: {name} is {info.file_size:,} bytes; a part that is translated may have "
                                f"at most {self.limits.part:,}")
        try:
            with self.zip.open(info) as f:
                return f.read(self.limits.part + 1)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:     # (zlib.error is an OSError's cousin)
            raise DocumentError(f"{self.name}: {name} is damaged ({e})") from None
        except Exception as e:  # noqa: BLE001 - zlib.error and the like: a damaged entry, named
            raise DocumentError(f"{self.name}: {name} is damaged ({type(e).__name__}: {e})") from None

    def write(self, dst: Path, replaced: dict[str, bytes]) -> None:
        """``dst``: this archive with the parts in ``replaced`` replaced, every other entry copied as it was."""
        try:
            with zipfile.ZipFile(dst, "w", allowZip64=True) as out:
                for info in self.infos:
                    new = zipfile.ZipInfo(info.filename, info.date_time)
                    new.compress_type, new.external_attr, new.comment = info.compress_type, info.external_attr, info.comment
                    new.create_system = info.create_system
                    if info.filename in replaced:
                        out.writestr(new, replaced[info.filename])
                        continue
                    with self.zip.open(info) as r, out.open(new, "w", force_zip64=info.file_size > 1 << 31) as w:
                        shutil.copyfileobj(r, w, MIB)
        except (zipfile.BadZipFile, EOFError) as e:
            raise DocumentError(f"{self.name}: an entry is damaged ({e})") from None
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001 - zlib.error: a damaged entry, named
            raise DocumentError(f"{self.name}: an entry is damaged ({type(e).__name__}: {e})") from None
