"""Known parallel corpora: Multi30k (bundled, offline), IWSLT14 de-en and WMT14 en-de (downloaded).

``fetch(name, src, tgt, cache_dir)`` returns the train/valid/test :class:`~aiayn.data.datadir.Source` of a
corpus as plain text files under ``cache_dir/<name>/``, downloading and checking the archives the
first time (or using archives already placed in ``cache_dir``, for machines without internet).
Splits follow the standard recipes so that BLEU is comparable with published figures:

- multi30k: task 1, train (29,000) / val (1,014) / test_2016_flickr (1,000), raw text.
- iwslt14: fairseq's prepare-iwslt14.sh split: every 23rd line of the TED training talks is
  validation, the rest training; test = dev2010 + TEDX dev2012 + tst2010-2012.
- wmt14: Europarl v7 + CommonCrawl + News Commentary v9 for training (4.5M pairs, as in the
  paper), newstest2013 for validation, newstest2014 (full) for test.

:func:`hf_dataset` reads any Hugging Face dataset with a ``translation`` column (IWSLT2017, WMT14, ...) from
the hub or from a directory written by ``save_to_disk``; :func:`hf_tokenizer_file` finds a ``tokenizer.json``
on disk or on the hub. Both need the optional ``datasets`` / ``tokenizers`` packages (``aiayn[hf]``).
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
import shutil
import tarfile
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .datadir import DataError, Source, find_source, read_lines
from .tokenizer import Vocab

log = logging.getLogger(__name__)

BUNDLED = Path(__file__).parents[1] / "bundled"


@dataclass(frozen=True)
class Archive:
    url: str
    checksum: str | None = None   # "sha1:<hex>", "md5:<hex>" or "sha256:<hex>"; None where none is published
    size: int | None = None

    @property
    def filename(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


def _digest(path: Path, algo: str) -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: Path, archive: Archive) -> None:
    if archive.size is not None and path.stat().st_size != archive.size:
        raise DataError(f"{path}: {path.stat().st_size} bytes, expected {archive.size}; delete it and retry")
    if archive.checksum:
        algo, want = archive.checksum.split(":", 1)
        got = _digest(path, algo)
        if got != want:
            raise DataError(f"{path}: {algo} {got} does not match the published {want}; delete it and retry")


def download(archive: Archive, cache_dir: Path) -> Path:
    """The archive in ``cache_dir`` — downloaded (to a .part file, then renamed) unless already there."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / archive.filename
    if not path.exists():
        part = path.with_name(path.name + ".part")
        log.info("downloading %s", archive.url)
        try:
            with urllib.request.urlopen(archive.url, timeout=60) as r, open(part, "wb") as f:
                shutil.copyfileobj(r, f, 1 << 20)
        except OSError as e:
            part.unlink(missing_ok=True)
            raise DataError(f"cannot download {archive.url}: {e}. Without internet, place {archive.filename} in "
                            f"{cache_dir} yourself") from None
        part.rename(path)
    verify(path, archive)
    if archive.checksum is None:
        _trust_on_first_use(path)
    return path


def _trust_on_first_use(path: Path) -> None:
    """For archives without a published checksum: record the sha256 at the first use (``NAME.sha256`` beside
    it) and check it at every later use, so a cached copy that changed (truncated, corrupted, replaced) is
    caught. The first download itself cannot be checked: nobody publishes its hash."""
    record = path.with_name(path.name + ".sha256")
    got = _digest(path, "sha256")
    if not record.exists():
        record.write_text(got + "\n")
        log.info("%s: no published checksum; recorded its sha256 %s in %s and will check it on every later use",
                 path.name, got, record.name)
        return
    want = record.read_text().strip()
    if got != want:
        raise DataError(f"{path}: sha256 {got} differs from the {want} recorded at its first download "
                        f"({record}); delete both files and download again")


def extract(tar_path: Path, member: str, out: Path) -> Path:
    """Copy one member of a tar archive to ``out`` (streamed; member paths never touch the filesystem)."""
    try:
        with tarfile.open(tar_path) as tar:
            f = tar.extractfile(member)
            if f is None:
                raise KeyError(member)
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "wb") as g:
                shutil.copyfileobj(f, g, 1 << 20)
    except KeyError:
        raise DataError(f"{tar_path} has no member {member!r}; is it the right archive?") from None
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"{tar_path}: cannot read ({e}); delete it and retry") from None
    return out


def _write(path: Path, lines: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


_SEG = re.compile(r"<seg[^>]*>(.*)</seg>")


def sgm_segments(path: Path) -> list[str]:
    """Segments of a WMT/IWSLT SGML or XML file, cleaned as sacreBLEU does (entities unescaped, spaces collapsed)."""
    out = []
    for line in read_lines(path):
        m = _SEG.search(line)
        if m:
            out.append(re.sub(r"\s+", " ", html.unescape(m.group(1)).strip()))
    return out


# --- the corpora ------------------------------------------------------------------------------------------------


def _multi30k(cache: Path, src: str, tgt: str) -> dict[str, Source]:
    base = BUNDLED / "multi30k"
    return {split: Source(base / f"{name}.{src}.gz", base / f"{name}.{tgt}.gz")
            for split, name in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr"))}


def _copy(cache: Path, src: str, tgt: str) -> dict[str, Source]:
    """The seeds' synthetic copy task: random strings of the letters a-j (length 4-24); the target is the source."""
    import random

    rng = random.Random(1234)
    splits: dict[str, dict[str, list[str]]] = {}
    for split, n in (("train", 20000), ("valid", 500), ("test", 500)):
        lines = [" ".join(rng.choice("abcdefghij") for _ in range(rng.randint(4, 24))) for _ in range(n)]
        splits[split] = {src: lines, tgt: lines}
    return _write_splits(cache, splits, src, tgt)


IWSLT14_ARCHIVE = Archive("http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz")
_IWSLT_SKIP = ("<url>", "<talkid>", "<keywords>", "<speaker>", "<reviewer", "<translator")
_IWSLT_TEST = ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012")


def _iwslt_train_lines(path: Path) -> list[str]:
    out = []
    for line in read_lines(path):
        if line.lstrip().startswith(_IWSLT_SKIP):
            continue
        out.append(re.sub(r"</?(title|description)>", "", line).strip())
    return out


def _iwslt14(cache: Path, src: str, tgt: str, archive: Archive = IWSLT14_ARCHIVE) -> dict[str, Source]:
    tgz = download(archive, cache.parent)
    out: dict[str, dict[str, list[str]]] = {"train": {}, "valid": {}, "test": {}}
    for lang in (src, tgt):
        raw = extract(tgz, f"de-en/train.tags.de-en.{lang}", cache / f"raw.train.{lang}")
        lines = _iwslt_train_lines(raw)
        out["train"][lang] = [x for i, x in enumerate(lines, 1) if i % 23]
        out["valid"][lang] = [x for i, x in enumerate(lines, 1) if i % 23 == 0]
        test: list[str] = []
        for name in _IWSLT_TEST:
            xml = extract(tgz, f"de-en/IWSLT14.{name}.de-en.{lang}.xml", cache / f"raw.{name}.{lang}.xml")
            test += sgm_segments(xml)
        out["test"][lang] = test
    return _write_splits(cache, out, src, tgt)


WMT14_TRAIN = (
    Archive("http://www.statmt.org/europarl/v7/de-en.tgz", "sha1:53bb5408d22977c89284bd755717e6bbb5b12bc5", 197785698),
    Archive("http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
            "sha1:1c0ad85f0ebaf1d543acb009607205f5dae6627d", 918311367),
    Archive("http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
            "sha1:c7ae7f50cd45c2f3014d78ddba25a4a8a851e27a", 80418416),
)
WMT14_TRAIN_MEMBERS = (
    "europarl-v7.de-en.{lang}", "commoncrawl.de-en.{lang}", "training/news-commentary-v9.de-en.{lang}",
)
# checksums as published in sacreBLEU's dataset list
WMT13_TEST = Archive("https://statmt.org/wmt13/test.tgz", "md5:48eca5d02f637af44e85186847141f67")
WMT14_TEST = Archive("https://statmt.org/wmt14/test-full.tgz", "md5:a8cd784e006feb32ac6f3d9ec7eb389a")


def _wmt14(cache: Path, src: str, tgt: str, train: tuple[Archive, ...] = WMT14_TRAIN,
           dev: Archive = WMT13_TEST, test: Archive = WMT14_TEST) -> dict[str, Source]:
    for lang in (src, tgt):
        with open(cache / f"train.{lang}", "wb") as out:
            for archive, member in zip(train, WMT14_TRAIN_MEMBERS, strict=True):
                part = extract(download(archive, cache.parent), member.format(lang=lang), cache / "part")
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
                part.unlink()
    dev_tgz, test_tgz = download(dev, cache.parent), download(test, cache.parent)
    splits: dict[str, dict[str, list[str]]] = {"valid": {}, "test": {}}
    for lang in (src, tgt):
        splits["valid"][lang] = sgm_segments(extract(dev_tgz, f"test/newstest2013-src.{lang}.sgm", cache / "part"))
        # newstest2014 full, as sacreBLEU reads it: the source language from "-src", the target from "-ref"
        role = "src" if lang == src else "ref"
        splits["test"][lang] = sgm_segments(
            extract(test_tgz, f"test-full/newstest2014-deen-{role}.{lang}.sgm", cache / "part"))
    (cache / "part").unlink(missing_ok=True)
    sources = _write_splits(cache, splits, src, tgt)
    sources["train"] = Source(cache / f"train.{src}", cache / f"train.{tgt}")
    return sources


def _write_splits(cache: Path, splits: dict[str, dict[str, list[str]]], src: str, tgt: str) -> dict[str, Source]:
    sources = {}
    for split, by_lang in splits.items():
        if len(by_lang[src]) != len(by_lang[tgt]):
            raise DataError(f"{split}: {len(by_lang[src])} {src} vs {len(by_lang[tgt])} {tgt} segments in the archive")
        for lang in (src, tgt):
            _write(cache / f"{split}.{lang}", by_lang[lang])
        sources[split] = Source(cache / f"{split}.{src}", cache / f"{split}.{tgt}")
    return sources


@dataclass(frozen=True)
class Corpus:
    name: str
    langs: tuple[str, str]
    build: Callable[[Path, str, str], dict[str, Source]]
    about: str


CORPORA = {
    "copy": Corpus("copy", ("in", "out"), _copy, "synthetic copy task (the seeds' first experiment): 20k/500/500"),
    "multi30k": Corpus("multi30k", ("de", "en"), _multi30k,
                       "Multi30k task 1 (Elliott et al., 2016), bundled: 29k train, 1,014 val, 1,000 test_2016_flickr"),
    "iwslt14": Corpus("iwslt14", ("de", "en"), _iwslt14,
                      "IWSLT14 German-English TED talks (fairseq's split), ~160k pairs"),
    "wmt14": Corpus("wmt14", ("de", "en"), _wmt14,
                    "WMT14 English-German (the paper's data): 4.5M pairs, newstest2013 valid, newstest2014 test"),
}


def fetch(name: str, src: str, tgt: str, cache_dir: str | Path) -> dict[str, Source]:
    """The splits of a known corpus for the direction src -> tgt (either direction of its language pair)."""
    if name not in CORPORA:
        raise DataError(f"unknown corpus {name!r}; known: {', '.join(CORPORA)}")
    corpus = CORPORA[name]
    if {src, tgt} != set(corpus.langs):
        raise DataError(f"{name} has languages {corpus.langs}; got --src {src} --tgt {tgt}")
    cache = Path(cache_dir) / name
    cache.mkdir(parents=True, exist_ok=True)
    return corpus.build(cache, src, tgt)


# --- Hugging Face datasets and tokenizers -------------------------------------------------------------------------

HF_SPLITS = {"train": "train", "valid": "validation", "test": "test"}


def _load_hf(name: str, config: str | None) -> object:
    try:
        import datasets
    except ImportError:
        raise DataError("--hf-dataset needs the datasets package: pip install 'aiayn[hf]'") from None
    p = Path(name)
    try:
        if p.exists():
            return datasets.load_from_disk(str(p))
        return datasets.load_dataset(name, config)
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds (missing config, no network, bad files)
        where = "directory" if p.exists() else "dataset"
        raise DataError(f"cannot load the Hugging Face {where} {name!r}"
                        f"{f' (config {config!r})' if config else ''}: {type(e).__name__}: {str(e).strip()[:300]}"
                        ) from None


def hf_dataset(name: str, src: str, tgt: str, cache_dir: str | Path, config: str | None = None,
               split_map: dict[str, str] | None = None) -> dict[str, Source]:
    """The train/valid/test splits of a Hugging Face dataset as line-aligned text files under ``cache_dir``.

    ``name``: a hub id (``IWSLT/iwslt2017`` with ``config="iwslt2017-zh-en"``, ``wmt14`` with ``de-en``, ...) or a
    directory written by ``DatasetDict.save_to_disk``. Rows are read from a ``translation`` column of
    ``{src: ..., tgt: ...}`` dicts, or from columns named ``src`` and ``tgt``. ``split_map`` maps aiayn's splits
    to the dataset's (default train / validation / test; test is optional). Line breaks inside a sentence become
    spaces (one sentence per line), and the count of such rows is logged.
    """
    ds = _load_hf(name, config)
    splits = {**HF_SPLITS, **(split_map or {})}
    have = list(ds.keys()) if hasattr(ds, "keys") else []
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{name}-{config or ''}").strip("_")[-100:]
    cache = Path(cache_dir) / "hf" / slug
    cache.mkdir(parents=True, exist_ok=True)
    sources: dict[str, Source] = {}
    for ours, theirs in splits.items():
        if theirs not in have:
            if ours == "test":
                continue
            raise DataError(f"{name}: no split {theirs!r} for {ours} (it has: {', '.join(have) or 'none'}); "
                            f"map one with --hf-split-map {ours}=NAME")
        split = ds[theirs]  # type: ignore[index]
        columns = list(split.column_names)
        if "translation" in columns:
            def pair(row: dict) -> tuple[object, object]:
                t = row["translation"]
                return t.get(src), t.get(tgt)
        elif src in columns and tgt in columns:
            def pair(row: dict) -> tuple[object, object]:
                return row[src], row[tgt]
        else:
            raise DataError(f"{name} [{theirs}]: no 'translation' column and no '{src}'/'{tgt}' columns "
                            f"(columns: {', '.join(columns)})")
        broken = 0
        with open(cache / f"{ours}.{src}", "w", encoding="utf-8") as fs, \
                open(cache / f"{ours}.{tgt}", "w", encoding="utf-8") as ft:
            for n, row in enumerate(split, 1):
                a, b = pair(row)
                if not isinstance(a, str) or not isinstance(b, str):
                    raise DataError(f"{name} [{theirs}] row {n}: no {src!r}/{tgt!r} text in {str(row)[:200]}")
                if any(c in a + b for c in "\n\r"):
                    broken += 1
                    a, b = (" ".join(x.splitlines()) for x in (a, b))
                fs.write(a + "\n")
                ft.write(b + "\n")
        if broken:
            log.info("%s [%s]: %d rows had line breaks inside a sentence; joined with spaces", name, theirs, broken)
        sources[ours] = Source(cache / f"{ours}.{src}", cache / f"{ours}.{tgt}")
    return sources


def hf_multilingual(name: str, pairs: Sequence[tuple[str, str]], cache_dir: str | Path, config: str | None = None,
                    split_map: dict[str, str] | None = None) -> dict[str, Path]:
    """A many-language corpus from Hugging Face datasets, one dataset (or configuration) per pair of languages
    (IWSLT 2017's ``iwslt2017-de-it``, ...): ``name`` and ``config`` may hold ``{src}`` and ``{tgt}``, filled with
    each pair (either order of it, whichever exists). Each pair's splits (:func:`hf_dataset`) are linked as
    fairseq's pair files, ``SPLIT.de-it.de`` / ``SPLIT.de-it.it``, into one folder; returns each split's PREFIX
    there, as ``aiayn prepare --langs`` reads them (multilingual.direction_source)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{name}-{config or ''}").strip("_")[-100:]
    folder = Path(cache_dir) / "hf" / f"{slug}-pairs"
    folder.mkdir(parents=True, exist_ok=True)
    done: set[frozenset[str]] = set()
    prefixes: dict[str, Path] = {}
    for a, b in pairs:
        if frozenset((a, b)) in done:
            continue
        done.add(frozenset((a, b)))
        sources, error = None, None
        for x, y in ((a, b), (b, a)):
            try:
                sources = hf_dataset(name.format(src=x, tgt=y), a, b, cache_dir,
                                     config.format(src=x, tgt=y) if config else None, split_map)
                break
            except DataError as e:
                error = error or e
        if sources is None:
            raise error or DataError(f"{name}: nothing for {a}-{b}")
        for split, source in sources.items():
            for lang, path in ((a, source.src_path), (b, source.tgt_path)):
                link = folder / f"{split}.{a}-{b}.{lang}"
                link.unlink(missing_ok=True)
                link.symlink_to(Path(str(path)).resolve())
            prefixes[split] = folder / split
    return prefixes


def hf_tokenizer_file(name: str, cache_dir: str | Path) -> Path:
    """A ``tokenizer.json``: the file or directory ``name``, or the hub model ``name``'s (e.g.
    ``bert-base-chinese``), downloaded once into ``cache_dir``."""
    p = Path(name)
    if p.is_dir():
        p = p / "tokenizer.json"
    if p.is_file():
        return p
    if Path(name).exists() or name.endswith(".json"):
        raise DataError(f"{p}: no such tokenizer.json")
    out = Path(cache_dir) / "tokenizers" / (re.sub(r"[^A-Za-z0-9._-]+", "_", name) + ".json")
    if out.is_file():
        return out
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise DataError("--hf-tokenizer needs the tokenizers package: pip install 'aiayn[hf]'") from None
    try:
        tok = Tokenizer.from_pretrained(name)
    except Exception as e:  # noqa: BLE001 - network and hub errors of several kinds
        raise DataError(f"{name!r} is not a tokenizer.json file or directory, and the hub could not provide one: "
                        f"{type(e).__name__}: {str(e).strip()[:200]}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out))
    return out


# --- what `aiayn prepare` is given ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """The sentence pairs and languages one ``prepare`` call reads, from exactly one of: a known corpus, a Hugging
    Face dataset, or line-aligned files (PREFIX.src / PREFIX.tgt or a .tsv per split)."""

    sources: dict[str, Source]
    src: str
    tgt: str


def inputs(cache_dir: str | Path, *, corpus: str | None = None, hf_dataset_name: str | None = None,
           hf_config: str | None = None, hf_split_map: dict[str, str] | None = None, train: str | None = None,
           valid: str | None = None, test: str | None = None, src: str | None = None, tgt: str | None = None) -> Inputs:
    """Resolve what ``prepare`` was given into :class:`Inputs`; combinations that do not make sense are refused."""
    if corpus and hf_dataset_name:
        raise ValueError("give --corpus or --hf-dataset, not both")
    if corpus:
        if corpus not in CORPORA:
            raise ValueError(f"unknown corpus {corpus!r}: expected one of {', '.join(sorted(CORPORA))}")
        src, tgt = src or CORPORA[corpus].langs[0], tgt or CORPORA[corpus].langs[1]
        return Inputs(fetch(corpus, src, tgt, cache_dir), src, tgt)
    if hf_dataset_name:
        if not (src and tgt):
            raise ValueError("--hf-dataset needs --src LANG --tgt LANG (the keys of its translation column)")
        return Inputs(hf_dataset(hf_dataset_name, src, tgt, cache_dir, hf_config, hf_split_map), src, tgt)
    if not (train and valid and src and tgt):
        raise ValueError("prepare needs --train PREFIX --valid PREFIX --src LANG --tgt LANG (or --corpus NAME or "
                         "--hf-dataset NAME)")
    sources = {"train": find_source(train, src, tgt), "valid": find_source(valid, src, tgt)}
    if test:
        sources["test"] = find_source(test, src, tgt)
    return Inputs(sources, src, tgt)


def tokenizer_files(cache_dir: str | Path, *, spm_model: Sequence[str | Path] | None = None,
                    hf_tokenizer: Sequence[str] | None = None, vocab_from: str | Path | None = None) -> tuple[str, ...]:
    """The existing tokenizer files ``prepare`` is told to use (none: it trains SentencePiece): one (shared by both
    sides) or two (source, target), from SentencePiece models, Hugging Face tokenizers, or another data/run dir."""
    if len([x for x in (spm_model, hf_tokenizer, vocab_from) if x]) > 1:
        raise ValueError("give one of --spm-model, --hf-tokenizer and --vocab-from")
    files: tuple[str, ...] = ()
    if spm_model:
        files = tuple(str(p) for p in spm_model)
    elif hf_tokenizer:
        files = tuple(str(hf_tokenizer_file(n, cache_dir)) for n in hf_tokenizer)
    elif vocab_from:
        v = Vocab.load(vocab_from)
        files = (str(v.src_file),) if v.joint else (str(v.src_file), str(v.tgt_file))
    if len(files) > 2:
        raise ValueError(f"{len(files)} tokenizer files: give one (shared by both sides) or two (source, target)")
    return files
