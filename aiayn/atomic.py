"""Atomic directories: a directory is written under a hidden temporary name and renamed into place, so a
crash (even kill -9) leaves either the previous version or the new one, never a mix. Used for checkpoints
(checkpoint.py) and data directories (data.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

TMP_MARK = ".tmp-"


@contextlib.contextmanager
def atomic_dir(final: str | Path) -> Iterator[Path]:
    """Yield an empty hidden sibling of ``final`` to fill; when the block ends without error it replaces
    ``final``. On an error it is removed and ``final`` is left as it was."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}{TMP_MARK}{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def remove_debris(root: Path) -> None:
    """Clean up what a process killed in the middle of :func:`atomic_dir` left under ``root``: half-written
    directories are deleted; a previous version moved aside in the instant between the two renames is put
    back when no new version took its place (else deleted)."""
    for stale in root.glob(f"**/.*{TMP_MARK}*"):
        shutil.rmtree(stale, ignore_errors=True)
    for old in root.glob("**/.*.old-*"):
        final = old.parent / old.name[1:].rsplit(".old-", 1)[0]
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.rename(final)
