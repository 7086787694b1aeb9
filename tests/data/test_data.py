"""Data preparation, the tokenizer and token-bucketed batching (paper §5.1)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from aiayn.cli.main import main
from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.data.batches import TokenBatchSampler, collate
from aiayn.data.corpora import Archive, _iwslt14, _wmt14, download, fetch, sgm_segments
from aiayn.data.datadir import DataDir, DataError, Source, find_source, read_lines
from aiayn.data.prepare import PrepareOptions, prepare
from aiayn.data.tokenizer import Tokenizer

from ..helpers import cli_error

# --- tokenizer ----------------------------------------------------------------------------------------------


def test_multi30k_round_trip(multi30k_dir: DataDir) -> None:
    """decode(encode(line)) == line for >= 99.9% of Multi30k lines (in practice: all of them)."""
    tok = multi30k_dir.vocab().src
    lines = []
    for name in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            path = Path(__file__).parents[2] / "aiayn" / "bundled" / "multi30k" / f"{name}.{lang}.gz"
            lines += list(read_lines(path))
    decoded = tok.decode(tok.encode(lines))
    bad = [(a, b) for a, b in zip(lines, decoded, strict=True) if a != b]
    assert len(bad) / len(lines) <= 0.001, bad[:5]
    assert len(bad) == 0, bad[:5]  # identity normalization and kept whitespace: exact


def test_cjk_and_emoji_round_trip(tmp_path: Path) -> None:
    zh = ["我们今天去公园散步。", "这是一个测试句子。", "机器翻译很有意思。"] * 30
    ja = ["今日はいい天気ですね。", "東京で寿司を食べました。", "カタカナとひらがな。"] * 30
    en = ["We went for a walk in the park today.", "This is a test sentence.", "Machine translation."] * 30
    tok = Tokenizer.train(zh + ja + en, tmp_path / "spm.model", vocab_size=450)
    probes = zh[:3] + ja[:3] + ["未見の文字：鬱蒼 🦜 ✓ ÅÄÖ", "Ünïcödé ½ ﬁ — “quotes”"]
    assert tok.decode(tok.encode(probes)) == probes
    assert UNK_FREE(tok, probes)


def UNK_FREE(tok: Tokenizer, lines: list[str]) -> bool:  # noqa: N802 - reads as a predicate
    return all(3 not in ids for ids in tok.encode(lines))


def test_special_ids_are_fixed(multi30k_dir: DataDir) -> None:
    tok = multi30k_dir.vocab().src
    assert (tok.sp.pad_id(), tok.sp.bos_id(), tok.sp.eos_id(), tok.sp.unk_id()) == (0, 1, 2, 3)
    m = multi30k_dir.manifest["vocab"]
    assert (m["pad_id"], m["bos_id"], m["eos_id"], m["unk_id"]) == (0, 1, 2, 3)


# --- prepare ---------------------------------------------------------------------------------------------------


def test_prepare_multi30k_manifest(multi30k_dir: DataDir) -> None:
    m = multi30k_dir.manifest
    assert m["splits"]["train"]["pairs_in"] == 29000
    assert m["splits"]["train"]["pairs"] + sum(m["splits"]["train"]["dropped"].values()) == 29000
    assert m["splits"]["valid"]["pairs"] == 1014 and m["splits"]["test"]["pairs"] == 1000  # never filtered
    assert m["dtype"] == "uint16" and m["vocab"]["size"] == 8000
    src, tgt = multi30k_dir.split("valid")
    assert len(src) == len(tgt) == 1014
    tok = multi30k_dir.vocab().src
    raw_src = multi30k_dir.raw("valid", "src").read_text().splitlines()
    assert tok.decode([src[0].tolist()]) == [raw_src[0]]
    assert len(raw_src) == 1014


def _pair(write, name: str, src: str | bytes, tgt: str | bytes) -> Path:  # type: ignore[no-untyped-def]
    write(f"{name}.de", src)
    return write(f"{name}.en", tgt).with_suffix("")


def _opts(**kw) -> PrepareOptions:  # type: ignore[no-untyped-def]
    return PrepareOptions(**{"src": "de", "tgt": "en", "vocab_size": 300, **kw})


CORPUS = "".join(f"Satz Nummer {i} ist hier.\n" for i in range(40))
CORPUS_EN = "".join(f"Sentence number {i} is here.\n" for i in range(40))


def _sources(write) -> dict[str, Source]:  # type: ignore[no-untyped-def]
    p = _pair(write, "train", CORPUS, CORPUS_EN)
    return {"train": find_source(p, "de", "en"), "valid": find_source(p, "de", "en")}


def test_prepare_reuses_identical_build_and_force_rebuilds(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "d"
    prepare(_sources(write), out, _opts())
    stamp = (out / "manifest.json").stat().st_mtime_ns
    prepare(_sources(write), out, _opts())
    assert (out / "manifest.json").stat().st_mtime_ns == stamp
    with pytest.raises(DataError, match="--force"):
        prepare(_sources(write), out, _opts(vocab_size=310))
    prepare(_sources(write), out, _opts(vocab_size=310), force=True)
    assert DataDir(out).vocab_sizes == (310, 310)


def test_line_count_mismatch_names_both_files(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = _pair(write, "t", "a\nb\nc\n", "a\nb\n")
    with pytest.raises(DataError, match=r"t\.de has 3 lines, .*t\.en has 2"):
        prepare({"train": find_source(p, "de", "en"), "valid": find_source(p, "de", "en")}, tmp_path / "o", _opts())
    assert not (tmp_path / "o").exists()


def test_invalid_utf8_names_file_and_line(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = _pair(write, "t", CORPUS.encode() + b"caf\xe9\n", CORPUS_EN + "cafe\n")
    src = {"train": find_source(p, "de", "en"), "valid": find_source(p, "de", "en")}
    with pytest.raises(DataError, match=r"t\.de:41: invalid UTF-8.*--encoding-errors replace"):
        prepare(src, tmp_path / "o", _opts())
    assert not list(tmp_path.glob(".o.tmp*")) and not (tmp_path / "o").exists()
    prepare(src, tmp_path / "o", _opts(encoding_errors="replace"))
    assert "caf\ufffd" in (tmp_path / "o" / "valid.de").read_text()


def test_cr_only_line_ends_are_named(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write("t.de", "ein Hund\rzwei Katzen\r")
    write("t.en", "a dog\rtwo cats\r")
    with pytest.raises(DataError, match="t.de: .*old Mac line ends"):
        list(read_lines(tmp_path / "t.de"))
    write("ok.de", "one line with a lone \r inside\n")
    assert list(read_lines(tmp_path / "ok.de")) == ["one line with a lone \r inside"]


def test_missing_and_empty_files(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DataError, match="no file"):
        find_source(tmp_path / "nothing", "de", "en")
    p = _pair(write, "e", "", "")
    with pytest.raises(DataError, match="empty"):
        prepare({"train": find_source(p, "de", "en"), "valid": find_source(p, "de", "en")}, tmp_path / "o", _opts())


def test_empty_corpus_after_filtering(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = _sources(write)
    with pytest.raises(DataError, match="no sentence pairs left after filtering"):
        prepare(src, tmp_path / "o", _opts(max_len=2))
    assert not (tmp_path / "o").exists()


def test_vocabulary_too_large(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=r"--vocab-size 5000 is too large .* at most \d+ pieces"):
        prepare(_sources(write), tmp_path / "o", _opts(vocab_size=5000))


def test_out_dir_holding_other_files_is_refused(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    for force in (False, True):
        with pytest.raises(DataError, match="not an aiayn data directory"):
            prepare(_sources(write), out, _opts(), force=force)
    assert (out / "thesis.tex").read_text() == "precious"


def test_filters_are_counted(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    de = CORPUS + "\n" + "x " * 20 + "\n" + "kurz\n"
    en = CORPUS_EN + "empty on the left\n" + "y\n" + "short " * 100 + "\n"
    p = _pair(write, "f", de, en)
    out = prepare({"train": find_source(p, "de", "en"), "valid": find_source(p, "de", "en")}, tmp_path / "o",
                  _opts(max_len=60))
    m = json.loads((out / "manifest.json").read_text())
    assert m["splits"]["train"]["dropped"] == {"empty": 1, "too_long": 1, "ratio": 1}
    assert m["splits"]["valid"]["pairs"] == 43  # evaluation splits keep every line


def test_unicode_line_separators_keep_alignment(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    de = CORPUS + "eins\u2028zwei\x0bdrei\x1cvier\n"
    en = CORPUS_EN + "one two three four\n"
    p = _pair(write, "u", de, en)
    out = prepare({"train": find_source(p, "de", "en"), "valid": find_source(p, "de", "en")}, tmp_path / "o", _opts())
    assert json.loads((out / "manifest.json").read_text())["splits"]["valid"]["pairs"] == 41


def test_tsv_and_gzip_inputs(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tsv = "".join(f"{a}\t{b}\n" for a, b in zip(CORPUS.splitlines(), CORPUS_EN.splitlines(), strict=True))
    write("c.tsv.gz", gzip.compress(tsv.encode()))
    src = find_source(tmp_path / "c.tsv.gz", "de", "en")
    out = prepare({"train": src, "valid": src}, tmp_path / "o", _opts())
    assert DataDir(out).manifest["splits"]["train"]["pairs"] == 40
    write("bad.tsv", "one column only\n")
    with pytest.raises(DataError, match=r"bad\.tsv:1: expected 2 tab-separated columns"):
        prepare({"train": find_source(tmp_path / "bad.tsv", "de", "en"), "valid": src}, tmp_path / "o2", _opts())


def test_cli_prepare_errors_are_one_line(write, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = _pair(write, "t", "a\nb\n", "a\n")
    rc = main(["prepare", "--train", str(p), "--valid", str(p), "--src", "de", "--tgt", "en", "--out",
               str(tmp_path / "o")])
    assert rc == 2 and "line counts differ" in cli_error(capsys.readouterr().err, "prepare")


# --- batching ------------------------------------------------------------------------------------------------------


def test_batches_respect_max_tokens_and_cover_every_example(multi30k_dir: DataDir) -> None:
    """Guards seed 000's batch_size_fn, whose indentation bug only tracks the first source length."""
    src, tgt = multi30k_dir.split("train")
    for max_tokens in (512, 4096):
        sampler = TokenBatchSampler(src.lengths + 1, tgt.lengths + 1, max_tokens, seed=3)
        batches = sampler.epoch_batches(0)
        for b in batches:
            assert len(b) * (src.lengths[b] + 1).max() <= max_tokens
            assert len(b) * (tgt.lengths[b] + 1).max() <= max_tokens
        seen = np.sort(np.concatenate(batches))
        assert np.array_equal(seen, np.arange(len(src)))


def test_padding_under_five_percent_on_multi30k(multi30k_dir: DataDir) -> None:
    src, tgt = multi30k_dir.split("train")
    batches = TokenBatchSampler(src.lengths + 1, tgt.lengths + 1, 4096).epoch_batches(0)
    from benchmarks.prepare_bench import padding_fraction

    assert padding_fraction(batches, src.lengths, tgt.lengths) < 0.05


@pytest.mark.parametrize("world", [2, 3, 7])
def test_ranks_get_disjoint_equal_batches_covering_the_epoch(multi30k_dir: DataDir, world: int) -> None:
    src, tgt = multi30k_dir.split("valid")
    per_rank = [TokenBatchSampler(src.lengths + 1, tgt.lengths + 1, 1024, seed=5, rank=r, world=world).epoch_batches(1)
                for r in range(world)]
    assert len({len(b) for b in per_rank}) == 1
    every = np.concatenate([np.concatenate(b) for b in per_rank])
    assert len(every) == len(src) and len(np.unique(every)) == len(src)


def test_epochs_differ_and_resume_yields_exactly_the_rest(multi30k_dir: DataDir) -> None:
    src, tgt = multi30k_dir.split("train")
    s = TokenBatchSampler(src.lengths + 1, tgt.lengths + 1, 2048, seed=1)
    e0, e1 = s.epoch_batches(0), s.epoch_batches(1)
    assert [b.tolist() for b in e0] != [b.tolist() for b in e1]
    fresh = TokenBatchSampler(src.lengths + 1, tgt.lengths + 1, 2048, seed=1)
    rest = fresh.epoch_batches(1)[17:]
    assert [b.tolist() for b in rest] == [b.tolist() for b in e1[17:]]


def test_example_longer_than_max_tokens_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="max_tokens=8 is smaller than the longest example"):
        TokenBatchSampler(np.array([3, 12]), np.array([4, 5]), 8)


def test_collate_layout(multi30k_dir: DataDir) -> None:
    src, tgt = multi30k_dir.split("valid")
    idx = np.array([5, 0, 9])
    b = collate(src, tgt, idx)
    for row, i in enumerate(idx):
        n, m = len(src[i]), len(tgt[i])
        assert b.src[row, :n].tolist() == src[i].tolist() and b.src[row, n] == EOS_ID
        assert (b.src[row, n + 1 :] == PAD_ID).all()
        assert b.tgt_in[row, 0] == BOS_ID and b.tgt_in[row, 1 : m + 1].tolist() == tgt[i].tolist()
        assert b.tgt_out[row, :m].tolist() == tgt[i].tolist() and b.tgt_out[row, m] == EOS_ID
    assert b.n_tgt_tokens == int((b.tgt_out != PAD_ID).sum())
    assert b.n_src_tokens == int((b.src != PAD_ID).sum())


# --- corpora -------------------------------------------------------------------------------------------------------


def _tgz(path: Path, members: dict[str, str]) -> Archive:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    import hashlib

    return Archive(path.as_uri(), "sha256:" + hashlib.sha256(buf.getvalue()).hexdigest())


def test_multi30k_is_bundled_and_offline(tmp_path: Path) -> None:
    splits = fetch("multi30k", "en", "de", tmp_path)
    assert splits["train"].src_path.name == "train.en.gz" and splits["train"].src_path.is_file()
    with pytest.raises(DataError, match="languages"):
        fetch("multi30k", "fr", "en", tmp_path)


def test_download_verifies_checksums(tmp_path: Path) -> None:
    archive = _tgz(tmp_path / "a.tgz", {"x": "y"})
    got = download(archive, tmp_path / "cache")
    assert got.is_file()
    bad = Archive(archive.url, "sha256:" + "0" * 64)
    (tmp_path / "cache2").mkdir()
    with pytest.raises(DataError, match="does not match"):
        download(bad, tmp_path / "cache2")
    with pytest.raises(DataError, match="cannot download"):
        download(Archive((tmp_path / "missing.tgz").as_uri()), tmp_path / "cache3")


def test_archives_without_a_published_checksum_are_checked_against_the_first_download(tmp_path: Path) -> None:
    """IWSLT14's archive has no published hash: its sha256 is recorded at the first download and checked at
    every later use, so a cached copy that changed is caught."""
    archive = _tgz(tmp_path / "a.tgz", {"x": "y"})
    unpinned = Archive(archive.url)
    got = download(unpinned, tmp_path / "cache")
    record = got.with_name(got.name + ".sha256")
    assert record.read_text().strip() == hashlib.sha256(got.read_bytes()).hexdigest()
    assert download(unpinned, tmp_path / "cache") == got                  # unchanged: fine
    got.write_bytes(got.read_bytes()[:-10])                              # truncated in the cache
    with pytest.raises(DataError, match="recorded at its first download"):
        download(unpinned, tmp_path / "cache")


def test_sharded_training_data_reads_the_same(write, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pairs = [(f"satz nummer {i} " + "wort " * (i % 7), f"sentence number {i} " + "word " * (i % 5)) for i in range(230)]
    src = write("train.de", "".join(a + "\n" for a, _ in pairs))
    tgt = write("train.en", "".join(b + "\n" for _, b in pairs))
    sources = {"train": Source(src, tgt), "valid": Source(src, tgt)}
    one = DataDir(prepare(sources, tmp_path / "one", PrepareOptions(src="de", tgt="en", vocab_size=300)))
    many = DataDir(prepare(sources, tmp_path / "many", PrepareOptions(src="de", tgt="en", vocab_size=300,
                                                                      shard_size=50), chunk=32))
    assert many.manifest["splits"]["train"]["shards"] == [50, 50, 50, 50, 30]
    assert len(list(many.path.glob("train-*.de.bin"))) == 5 and not (many.path / "train.de.bin").exists()
    (a_src, a_tgt), (b_src, b_tgt) = one.split("train"), many.split("train")
    assert len(a_src) == len(b_src) == 230 and (a_src.lengths == b_src.lengths).all()
    for i in range(230):
        assert (a_src[i] == b_src[i]).all() and (a_tgt[i] == b_tgt[i]).all()
    idx = np.array([0, 49, 50, 51, 199, 229])
    assert torch.equal(collate(a_src, a_tgt, idx).src, collate(b_src, b_tgt, idx).src)


def test_iwslt14_recipe_on_a_fixture_archive(tmp_path: Path) -> None:
    talk = lambda lang: "".join(  # noqa: E731
        ["<url>http://ted.com/x</url>\n", "<keywords>k</keywords>\n", "<talkid>1</talkid>\n",
         f"<title>Title {lang}</title>\n"] + [f"{lang} line {i}\n" for i in range(50)])
    xml = lambda lang, name: "".join(  # noqa: E731
        ['<doc docid="1">\n'] + [f'<seg id="{i}"> {name} {lang} &amp; {i} </seg>\n' for i in range(3)] + ["</doc>\n"])
    members = {f"de-en/train.tags.de-en.{lang}": talk(lang) for lang in ("de", "en")}
    for name in ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012"):
        for lang in ("de", "en"):
            members[f"de-en/IWSLT14.{name}.de-en.{lang}.xml"] = xml(lang, name)
    archive = _tgz(tmp_path / "de-en.tgz", members)
    splits = _iwslt14(tmp_path / "cache" / "iwslt14", "de", "en", archive)
    train = splits["train"].src_path.read_text().splitlines()
    valid = splits["valid"].src_path.read_text().splitlines()
    test = splits["test"].tgt_path.read_text().splitlines()  # type: ignore[union-attr]
    assert len(train) + len(valid) == 51 and len(valid) == 2   # 51 kept lines: every 23rd is validation
    assert train[0] == "Title de" and "<url>" not in "".join(train)
    assert len(test) == 15 and test[0] == "TED.dev2010 en & 0"


def test_wmt14_recipe_on_fixture_archives(tmp_path: Path) -> None:
    sgm = lambda tag, lang: f'<srcset>\n<doc docid="d">\n<seg id="1">{tag} {lang}  one</seg>\n</doc>\n'  # noqa: E731
    train = (
        _tgz(tmp_path / "europarl.tgz", {f"europarl-v7.de-en.{x}": f"ep {x}\n" for x in ("de", "en")}),
        _tgz(tmp_path / "cc.tgz", {f"commoncrawl.de-en.{x}": f"cc {x}\n" for x in ("de", "en")}),
        _tgz(tmp_path / "nc.tgz", {f"training/news-commentary-v9.de-en.{x}": f"nc {x}\n" for x in ("de", "en")}),
    )
    dev = _tgz(tmp_path / "test.tgz", {f"test/newstest2013-src.{x}.sgm": sgm("nt13", x) for x in ("de", "en")})
    test = _tgz(tmp_path / "test-full.tgz", {f"test-full/newstest2014-deen-{r}.{x}.sgm": sgm(f"nt14{r}", x)
                                             for r in ("src", "ref") for x in ("de", "en")})
    cache = tmp_path / "cache" / "wmt14"
    cache.mkdir(parents=True)
    splits = _wmt14(cache, "en", "de", train, dev, test)
    assert splits["train"].src_path.read_text() == "ep en\ncc en\nnc en\n"
    assert splits["valid"].tgt_path.read_text() == "nt13 de one\n"  # type: ignore[union-attr]
    assert splits["test"].src_path.read_text() == "nt14src en one\n"
    assert splits["test"].tgt_path.read_text() == "nt14ref de one\n"  # type: ignore[union-attr]


def test_sgm_segments_unescape_and_collapse(write) -> None:  # type: ignore[no-untyped-def]
    p = write("x.sgm", '<seg id="1"> A &lt;b&gt;  c &quot;d&quot; </seg>\nnoise\n<seg id="2">e</seg>\n')
    assert sgm_segments(p) == ['A <b> c "d"', "e"]


def test_equal_rows_counts_what_comparing_each_sentence_counts(tmp_path: Path) -> None:
    """TokenArray.equal_rows (a data dir's share of copies, Norms.copies) compares all sentences at once: on random
    sides in two shards, with equal, empty and same-length-different sentences, every prefix n counts as a loop over
    the sentences does."""
    from aiayn.data.datadir import TokenArray

    rng = np.random.default_rng(0)

    def write(stem: Path, rows: list[list[int]]) -> None:
        np.save(f"{stem}.idx.npy", np.cumsum([0] + [len(r) for r in rows]).astype(np.int64))
        np.asarray([t for r in rows for t in r], np.uint16).tofile(f"{stem}.bin")

    stems: dict[str, list[Path]] = {"a": [], "b": []}
    for k in range(2):
        a = [list(rng.integers(0, 5, rng.integers(0, 6))) for _ in range(300)]
        b = [list(x) if rng.random() < 0.4 else list(rng.integers(0, 5, len(x) if rng.random() < 0.5 else
                                                                     rng.integers(0, 6))) for x in a]
        for side, rows in (("a", a), ("b", b)):
            stems[side].append(tmp_path / f"{side}{k}")
            write(stems[side][-1], rows)
    src, tgt = TokenArray(stems["a"], "uint16"), TokenArray(stems["b"], "uint16")
    for n in (0, 1, 17, 299, 300, 301, 450, 600, 10_000):
        assert src.equal_rows(tgt, n) == sum(np.array_equal(src[i], tgt[i]) for i in range(min(n, len(src))))


def test_concat_joins_neighbours_and_strips_their_stops_on_both_sides_only(multi30k_dir: DataDir) -> None:
    """train.concat (batches.Joiner): a batch's pairs joined two or three to a row, each losing its final stop on both
    sides or neither, the same for the same (seed, epoch, position) (a resumed run), no row past the model's length."""
    from aiayn.config import RunConfig, TrainConfig
    from aiayn.data.batches import Joiner
    from aiayn.training.train import _joiner

    cfg = RunConfig(train=TrainConfig(concat=0.99))
    joiner = _joiner(multi30k_dir, cfg)
    vocab = multi30k_dir.vocab()
    assert {vocab.src.piece(i) for i in joiner.stops[0]} >= {"."}
    src, tgt = multi30k_dir.split("train")
    batch = np.arange(20, 32)
    firsts, (xs, ys) = joiner.rows(src, tgt, batch, epoch=3, position=7)
    again = joiner.rows(src, tgt, batch, epoch=3, position=7)
    assert [x.tolist() for x in again[1][0]] == [x.tolist() for x in xs]
    assert 2 <= len(batch) / len(xs) <= 3 and sum(map(len, xs)) <= sum(len(src[i]) for i in batch)
    stripped = 0
    for first, x, y in zip(firsts, xs, ys, strict=True):
        group = [int(i) for i in batch[list(batch).index(first):][: round(len(batch) / len(xs))]]
        text_x, text_y = vocab.src.decode([x.tolist()])[0], vocab.tgt.decode([y.tolist()])[0]
        assert vocab.src.decode([src[group[0]].tolist()])[0].rstrip(".") in text_x
        stripped += text_x.count(".") < sum(vocab.src.decode([src[i].tolist()])[0].count(".") for i in group)
        assert text_x.count(".") - text_y.count(".") == sum(
            vocab.src.decode([src[i].tolist()])[0].count(".") - vocab.tgt.decode([tgt[i].tolist()])[0].count(".")
            for i in group)                                               # stops go on both sides at once
    assert stripped
    assert Joiner(0.0, 1, set(), set(), 100).rows(src, tgt, batch, 0, 0) is None        # off
    short = Joiner(0.99, 1, set(), set(), 5)                              # a group too long stays apart
    assert len(short.rows(src, tgt, batch, 3, 7)[1][0]) == len(batch)
    with pytest.raises(ValueError, match="concat with guided_alignment"):
        TrainConfig(concat=0.2, guided_alignment=0.5)
    with pytest.raises(ValueError, match="concat=1.5"):
        TrainConfig(concat=1.5)
