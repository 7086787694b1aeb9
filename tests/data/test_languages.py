"""Beyond Multi30k: scores right in every script, separate and given vocabularies, Hugging Face datasets and
tokenizer files, fine-tuning, streaming translation. Corpora are generated here: a small artificial language
pair whose target is written in Chinese characters, Cyrillic or Arabic script, word for word from English."""

from __future__ import annotations

import json
import random
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU

from aiayn import Translator
from aiayn.cli.main import main
from aiayn.data.datadir import DataDir
from aiayn.data.tokenizer import HFTokenizer, Tokenizer
from aiayn.rundir import RunDir
from aiayn.training.evaluate import bleu_tokenizer, score
from aiayn.translation.stream import stream

from ..helpers import spawn

ROOT = Path(__file__).parents[2]
ENGLISH = ("the a man woman child dog cat horse bird red blue green small big old young runs walks sees eats "
           "plays with in on under near house street park tree river ball car book water food").split()
SCRIPTS = {"zh": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
           "ru": "абвгдежзиклмнопрстуфхцчшыэюя", "ar": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي"}
# Training settings that make a tiny model learn a word-for-word language in seconds on 2 cores (~30 ms a step).
QUICK = ["d_model=64", "d_ff=256", "n_heads=4", "n_layers=2", "p_drop=0.0", "norm=pre", "max_positions=128",
         "max_tokens=1024", "warmup=60", "lr_factor=0.5", "clip_norm=1.0", "label_smoothing=0.0",
         "valid_every_steps=1000", "valid_each_epoch=false", "save_every_steps=1000", "log_every_steps=50",
         "tensorboard=false", "train.precision=fp32", "beam=1"]


def _lexicon(lang: str, words: list[str], seed: int = 0) -> dict[str, str]:
    """An invented word of ``lang``'s script for each English word (one to three Chinese characters; three to
    six letters otherwise)."""
    rng, letters, out = random.Random(seed), SCRIPTS[lang], {}
    for w in words:
        while True:
            n = rng.randint(1, 3) if lang == "zh" else rng.randint(3, 6)
            cand = "".join(rng.choice(letters) for _ in range(n))
            if cand not in out.values():
                out[w] = cand
                break
    return out


def _pairs(lang: str, n: int, seed: int, words: list[str] = ENGLISH) -> list[tuple[str, str]]:
    lex, rng = _lexicon(lang, ENGLISH), random.Random(seed)
    joiner = "" if lang == "zh" else " "
    out = []
    for _ in range(n):
        sent = [rng.choice(words) for _ in range(rng.randint(3, 9))]
        end = "。" if lang == "zh" else ("؟" if lang == "ar" and rng.random() < 0.3 else ".")
        out.append((" ".join(sent) + " .", joiner.join(lex[w] for w in sent) + end))
    return out


def _write_corpus(d: Path, lang: str, sizes: dict[str, int], seed: int = 1, words: list[str] = ENGLISH) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for i, (split, n) in enumerate(sizes.items()):
        pairs = _pairs(lang, n, seed * 100 + i, words)
        (d / f"{split}.en").write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
        (d / f"{split}.{lang}").write_text("".join(b + "\n" for _, b in pairs), encoding="utf-8")
    return d


def _prepare(corpus: Path, lang: str, out: Path, *extra: str) -> DataDir:
    assert main(["prepare", "--train", str(corpus / "train"), "--valid", str(corpus / "valid"), "--test",
                 str(corpus / "test"), "--src", "en", "--tgt", lang, "--out", str(out), *extra]) == 0
    return DataDir(out)


def _train(data: DataDir, run: Path, steps: int, *extra: str) -> RunDir:
    assert main(["train", "--data", str(data.path), "--out", str(run), "--preset", "tiny", "--set", *QUICK,
                 f"max_steps={steps}", *extra]) == 0
    return RunDir(run)


# --- scoring -------------------------------------------------------------------------------------------------------


def test_bleu_tokenizer_follows_the_target_language() -> None:
    assert bleu_tokenizer("zh")[0] == bleu_tokenizer("zh-TW")[0] == bleu_tokenizer("zh_CN")[0] == "zh"
    assert bleu_tokenizer("en") == bleu_tokenizer("ru") == ("13a", None) and bleu_tokenizer(None)[0] == "13a"
    assert bleu_tokenizer("th")[0] == "char"
    for lang, name in (("ja", "ja-mecab"), ("ko", "ko-mecab")):
        chosen, note = bleu_tokenizer(lang)
        assert chosen == name or (chosen == "char" and note and name in note)


def test_ja_ko_fall_back_to_char_with_a_note_when_mecab_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import aiayn.training.evaluate as ev

    monkeypatch.setattr(ev, "_available", lambda name: "ModuleNotFoundError: No module named 'MeCab'")
    chosen, note = ev.bleu_tokenizer("ja")
    assert chosen == "char" and note and "ja-mecab" in note and "sacrebleu[ja]" in note
    s = ev.score(["私は猫が好きです"], ["私は犬が好きです"], lang="ja")
    assert s["tokenize"] == "char" and "tok:char" in s["signature"] and "note" in s


def test_several_references_and_ter() -> None:
    hyps = ["the cat sat on the mat", "a dog"]
    r1, r2 = ["the cat sat on a mat", "the dog"], ["a cat sat on the mat", "a dog"]
    s = score(hyps, [r1, r2], lang="en", ter=True)
    want = BLEU().corpus_score(hyps, [r1, r2]).score
    assert s["bleu"] == round(want, 2) and s["references"] == 2 and "nrefs:2" in s["signature"] and "ter" in s
    with pytest.raises(ValueError, match="every line"):
        score(hyps, [r1, r2[:1]])


@pytest.fixture(scope="module")
def zh_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[DataDir, RunDir]:
    d = tmp_path_factory.mktemp("zh")
    corpus = _write_corpus(d / "corpus", "zh", {"train": 3000, "valid": 100, "test": 100})
    data = _prepare(corpus, "zh", d / "data", "--vocab-size", "400")
    return data, _train(data, d / "run", 150, "--set", "valid_every_steps=150", "valid_max_sentences=40")


@pytest.mark.ci      # CI's (make test-ci): an en-zh model trained, 7 s (make test: the tokenizer's choice)
def test_en_zh_bleu_is_sacrebleus_zh_score_everywhere(zh_run: tuple[DataDir, RunDir], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    data, run = zh_run
    src, ref = data.raw("test", "src"), data.raw("test", "tgt")
    assert main(["evaluate", "--model", str(run), "--src", str(src), "--ref", str(ref), "--json",
                 "--hyps", str(tmp_path / "h.zh")]) == 0
    r = json.loads(capsys.readouterr().out)
    hyps = (tmp_path / "h.zh").read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines()
    assert r["bleu"] == round(BLEU(tokenize="zh").corpus_score(hyps, [refs]).score, 2)
    assert "tok:zh" in r["signature"] and r["bleu"] > 0
    assert r["bleu"] != round(BLEU(tokenize="13a").corpus_score(hyps, [refs]).score, 2)   # 13a is not what ran
    # validation used the zh tokenizer too, over the fixed subset, and kept its translations
    valid = [json.loads(x) for x in run.metrics.read_text().splitlines() if "valid_bleu" in x]
    assert valid and valid[-1]["valid_bleu_sentences"] == 40
    hyp_file = run.valid_hypotheses(valid[-1]["step"])
    assert len(hyp_file.read_text(encoding="utf-8").splitlines()) == 40
    # an override is honoured and recorded in the signature
    assert main(["evaluate", "--model", str(run), "--src", str(src), "--ref", str(ref), "--json",
                 "--tokenize", "char"]) == 0
    r2 = json.loads(capsys.readouterr().out)
    assert "tok:char" in r2["signature"] and r2["bleu"] == round(BLEU(tokenize="char").corpus_score(hyps, [refs]).score, 2)


def test_valid_bleu_subset_is_fixed_and_seeded() -> None:
    from aiayn.training.train import bleu_subset

    a, b = bleu_subset(1000, 100, seed=1), bleu_subset(1000, 100, seed=1)
    assert (a == b).all() and len(set(a.tolist())) == 100 and (a[1:] > a[:-1]).all()
    assert not (bleu_subset(1000, 100, seed=2) == a).all()
    assert (bleu_subset(50, 100, seed=1) == list(range(50))).all() and len(bleu_subset(50, 0, 1)) == 50


# --- a new script, end to end, with nothing but --src/--tgt -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.ci      # CI's (make test-ci): a model trained for each script, 10 s and 7 s
@pytest.mark.parametrize("lang", ["ru", "ar"])
def test_a_new_script_prepares_trains_translates_and_scores(lang: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    corpus = _write_corpus(tmp_path / "corpus", lang, {"train": 3000, "valid": 100, "test": 200})
    data = _prepare(corpus, lang, tmp_path / "data", "--vocab-size", "400")
    run = _train(data, tmp_path / "run", 250)
    src = data.raw("test", "src")
    assert main(["translate", "--model", str(run.path), "--input", str(src), "--output", str(tmp_path / "out")]) == 0
    out = (tmp_path / "out").read_text(encoding="utf-8").splitlines()
    assert len(out) == 200 and all(any(c in SCRIPTS[lang] for c in line) for line in out)
    assert main(["evaluate", "--model", str(run.path), "--src", str(src), "--ref", str(data.raw("test", "tgt")),
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    with capsys.disabled():
        print(f"en->{lang}: BLEU {r['bleu']} chrF {r['chrf']} after 250 steps")
    assert "tok:13a" in r["signature"] and r["bleu"] > 40          # learned (an untrained model scores ~0)


# --- vocabularies ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ru_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_corpus(tmp_path_factory.mktemp("ru") / "corpus", "ru", {"train": 2000, "valid": 60, "test": 60})


def test_separate_vocabularies_end_to_end(ru_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _prepare(ru_corpus, "ru", tmp_path / "data", "--vocab", "separate", "--src-vocab-size", "300",
                    "--tgt-vocab-size", "350")
    v = data.vocab()
    assert not v.joint and data.vocab_sizes == (300, 350) and (data.path / "spm.src.model").is_file()
    assert all(c not in "".join(v.src.piece(i) for i in range(v.src.vocab_size)) for c in "жщ")  # English only
    # tie='all' cannot share two vocabularies: a clear error, not a shape mismatch
    assert main(["train", "--data", str(data.path), "--out", str(tmp_path / "bad"), "--preset", "tiny", "--set",
                 "max_steps=1"]) == 2
    assert "tie=decoder" in capsys.readouterr().err
    run = _train(data, tmp_path / "run", 20, "--set", "tie=decoder")
    cfg = run.config().model
    assert (cfg.src_vocab_size, cfg.tgt_vocab_size) == (300, 350)
    assert (run.path / "spm.src.model").is_file() and (run.path / "spm.tgt.model").is_file()
    t = Translator.load(run.path, "torch")
    assert len(t.translate(["the man sees a dog .", ""])) == 2
    with pytest.raises(ValueError, match="separate vocabularies: export supports runs whose two sides number"):
        from aiayn.interop.export import export

        export(run.path, "ctranslate2", tmp_path / "ct2")


def test_existing_sentencepiece_model_with_other_ids_is_renumbered(ru_corpus: Path, tmp_path: Path) -> None:
    import sentencepiece as spm

    lines = (ru_corpus / "train.en").read_text().splitlines() + (ru_corpus / "train.ru").read_text().splitlines()
    # SentencePiece's own defaults (unk 0, bos 1, eos 2, no pad), as models made by other toolkits have them
    spm.SentencePieceTrainer.Train(sentence_iterator=iter(lines), model_prefix=str(tmp_path / "theirs"),
                                   vocab_size=100, minloglevel=2)
    tok = Tokenizer(tmp_path / "theirs.model")
    assert tok.vocab_size == 101 and tok.ids.missing == ["pad"]
    line = "the dog runs ."
    ids = tok.encode([line])[0]
    assert min(ids) > 3 and tok.decode([ids + [2, 0]]) == [line]      # EOS and PAD dropped, text back
    assert tok.piece(0) == "<pad>" and tok.piece(3) == "<unk>"
    data = _prepare(ru_corpus, "ru", tmp_path / "data", "--spm-model", str(tmp_path / "theirs.model"))
    assert data.vocab_sizes == (101, 101) and data.manifest["vocab"]["made"] == "given"
    run = _train(data, tmp_path / "run", 20)
    assert len(Translator.load(run.path, "torch").translate([line])) == 1


def _wordpiece(lines: list[str], path: Path, size: int) -> Path:
    from tokenizers import Tokenizer as HF
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    tok = HF(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(
        vocab_size=size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    tok.save(str(path))
    return path


def test_tokenizer_json_wordpiece_per_side_as_in_the_seed(ru_corpus: Path, tmp_path: Path) -> None:
    """Two BERT-style WordPiece tokenizer.json files, one per language (the seeds' zh-en system uses two BERT
    tokenizers): [CLS]/[SEP] become BOS/EOS, the files travel with the data dir and the run dir."""
    pytest.importorskip("tokenizers")
    en = _wordpiece((ru_corpus / "train.en").read_text().splitlines(), tmp_path / "en.json", 200)
    ru = _wordpiece((ru_corpus / "train.ru").read_text().splitlines(), tmp_path / "ru.json", 400)
    t = HFTokenizer(en)
    ids = t.encode(["the dog runs ."])[0]
    assert t.piece(1) == "[CLS]" and t.piece(2) == "[SEP]" and t.piece(0) == "[PAD]" and min(ids) > 3
    assert t.decode([[1] + ids + [2]]) == ["the dog runs."]                   # WordPiece's own detokenization
    data = _prepare(ru_corpus, "ru", tmp_path / "data", "--hf-tokenizer", str(en), str(ru))
    assert not data.vocab().joint and data.manifest["vocab"]["src_kind"] == "tokenizers"
    run = _train(data, tmp_path / "run", 20, "--set", "tie=decoder")
    en.unlink()
    ru.unlink()                                                              # the run is self-contained
    assert RunDir(run.path).vocab().src.kind == "tokenizers"
    out = Translator.load(run.path, "torch").translate(["the dog runs .", "a cat ."])
    assert len(out) == 2


def test_hf_dataset_saved_to_disk(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    rows = {split: [{"translation": {"en": a, "ru": b + ("\nsecond line" if i == 0 else "")}}
                    for i, (a, b) in enumerate(_pairs("ru", n, k))]
            for k, (split, n) in enumerate((("train", 1500), ("validation", 50), ("test", 40)))}
    datasets.DatasetDict({s: datasets.Dataset.from_list(r) for s, r in rows.items()}).save_to_disk(str(tmp_path / "ds"))
    out = tmp_path / "data"
    assert main(["prepare", "--hf-dataset", str(tmp_path / "ds"), "--src", "en", "--tgt", "ru", "--vocab-size", "400",
                 "--out", str(out), "--cache-dir", str(tmp_path / "cache")]) == 0
    data = DataDir(out)
    assert {s: data.manifest["splits"][s]["pairs_in"] for s in ("train", "valid", "test")} == \
        {"train": 1500, "valid": 50, "test": 40}
    first = data.raw("test", "tgt").read_text(encoding="utf-8").splitlines()[0]
    assert first.endswith(" second line")                                    # one sentence, one line
    run = _train(data, tmp_path / "run", 10)
    assert len(Translator.load(run.path, "torch").translate(["the dog ."])) == 1
    # a split that is not there, and a column that is not there: clear errors
    assert main(["prepare", "--hf-dataset", str(tmp_path / "ds"), "--src", "en", "--tgt", "ru", "--out",
                 str(tmp_path / "d2"), "--hf-split-map", "valid=dev", "--cache-dir", str(tmp_path / "cache")]) == 2
    assert main(["prepare", "--hf-dataset", str(tmp_path / "ds"), "--src", "en", "--tgt", "de", "--out",
                 str(tmp_path / "d3"), "--cache-dir", str(tmp_path / "cache")]) == 2


# --- fine-tuning ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.ci      # CI's (make test-ci): a model trained, then fine-tuned, 11 s
def test_fine_tuning_on_a_new_domain_improves_on_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run trained on one corpus (domain A: half of the words), fine-tuned with --init-from on another
    (domain B: the other half), scores better on B than before, and started from A's weights."""
    a_words, b_words = ENGLISH[::2], ENGLISH[1::2]
    a = _write_corpus(tmp_path / "a", "ru", {"train": 3000, "valid": 60, "test": 60}, seed=1, words=a_words + ENGLISH[:4])
    b = _write_corpus(tmp_path / "b", "ru", {"train": 3000, "valid": 60, "test": 150}, seed=2, words=b_words)
    data_a = _prepare(a, "ru", tmp_path / "data-a", "--vocab-size", "400")
    run_a = _train(data_a, tmp_path / "run-a", 150)
    data_b = _prepare(b, "ru", tmp_path / "data-b", "--vocab-from", str(run_a.path))
    assert data_b.vocab().digest() == run_a.vocab().digest()

    def bleu(run: Path) -> float:
        assert main(["evaluate", "--model", str(run), "--src", str(data_b.raw("test", "src")), "--ref",
                     str(data_b.raw("test", "tgt")), "--json"]) == 0
        return float(json.loads(capsys.readouterr().out)["bleu"])

    before = bleu(run_a.path)
    assert main(["train", "--data", str(data_b.path), "--out", str(tmp_path / "run-b"), "--init-from",
                 str(run_a.path), "--set", "max_steps=120", "warmup=40"]) == 0
    after = bleu(tmp_path / "run-b")
    with capsys.disabled():
        print(f"fine-tuning: BLEU on domain B {before} before, {after} after 120 steps")
    assert after > before + 10
    info = json.loads(RunDir(tmp_path / "run-b").data_file.read_text())
    assert info["init_from"].startswith(str(run_a.path))
    log = [json.loads(x) for x in RunDir(tmp_path / "run-b").metrics.read_text().splitlines()]
    assert log[0]["step"] <= 50                                             # a fresh schedule: steps from 1
    # data made with another vocabulary, or a different model shape, are refused clearly
    assert main(["train", "--data", str(data_a.path), "--out", str(tmp_path / "x"), "--init-from",
                 str(tmp_path / "run-b"), "--set", "d_model=32"]) == 2
    assert "shape" in capsys.readouterr().err
    other = _prepare(b, "ru", tmp_path / "data-other", "--vocab-size", "380")
    assert main(["train", "--data", str(other.path), "--out", str(tmp_path / "y"), "--init-from",
                 str(run_a.path)]) == 2
    assert "--vocab-from" in capsys.readouterr().err


# --- streaming translation --------------------------------------------------------------------------------------------


def test_stream_yields_each_chunk_in_order_with_bounded_read_ahead() -> None:
    seen: list[int] = []

    def fake(chunk: list[str]) -> list[str]:
        seen.append(len(chunk))
        return [x.upper() for x in chunk]

    lines = (f"line {i}" for i in range(10_000))
    out = list(stream(lines, fake, max_lines=500))
    assert out == [f"LINE {i}" for i in range(10_000)] and max(seen) <= 500 + 63

    def broken() -> object:
        yield "fine"
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(stream(broken(), fake))  # type: ignore[arg-type]


class _Source:
    """Lines as the command line reads them: ``regular`` a file (more is always ready), else a pipe whose line i comes
    once ``released(i)``: waited for at most 5 s (``waited`` then says so)."""

    def __init__(self, n: int, regular: bool, released: Callable[[int], bool] = lambda i: True,
                 slow_after: int = -1) -> None:
        self.n, self.regular, self.released, self.slow_after = n, regular, released, slow_after
        self.i, self.waited = 0, False

    def __iter__(self) -> Iterator[str]:
        for i in range(self.n):
            self.i = i
            if i == self.slow_after:
                time.sleep(0.3)                              # a file whose first blocks are read slowly
            deadline = time.monotonic() + 5
            while not self.released(self.i):
                if time.monotonic() > deadline:
                    self.waited = True
                    break
                time.sleep(0.005)
            yield f"line {self.i}"

    def more_ready(self) -> bool:
        return self.regular or self.released(self.i + 1)


def test_a_file_goes_in_full_chunks_in_every_run_and_chunks_in_flight_change_nothing() -> None:
    """A file's chunks are full whatever the reader's pace (they were whatever had been read when the last chunk was
    taken: batches, and so int8's output, changed from run to run), ``in_flight`` chunks at once give the same chunks
    and results, and from a pipe each chunk's results go out before the next line is waited for."""
    seen: list[int] = []

    def fake(chunk: list[str]) -> list[str]:
        seen.append(len(chunk))
        time.sleep(0.01)
        return [x.upper() for x in chunk]

    for in_flight in (1, 2):
        seen.clear()
        out = list(stream(_Source(2000, regular=True, slow_after=64), fake, max_lines=500, in_flight=in_flight))
        assert out == [f"LINE {i}" for i in range(2000)] and seen == [512, 512, 512, 464], (in_flight, seen)

    got: list[str] = []
    source = _Source(6, regular=False, released=lambda i: len(got) >= i)     # line i once i results are out
    for x in stream(source, lambda chunk: [y.upper() for y in chunk], in_flight=2):
        got.append(x)
    assert got == [f"LINE {i}" for i in range(6)] and not source.waited


@pytest.mark.ci      # CI's (make test-ci): the en-zh model through a pipe (make test: stream's own tests)
def test_translate_answers_each_line_before_stdin_is_closed(zh_run: tuple[DataDir, RunDir]) -> None:
    _, run = zh_run
    p = spawn([sys.executable, "-m", "aiayn", "translate", "--model", str(run.path), "--beam", "1"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdin and p.stdout
    try:
        answers = []
        for line in ("the dog runs .", "", "a man sees the river ."):
            p.stdin.write((line + "\n").encode())
            p.stdin.flush()
            deadline = time.monotonic() + 60
            while not select.select([p.stdout], [], [], 1)[0]:
                assert p.poll() is None and time.monotonic() < deadline, "no answer while stdin is open"
            answers.append(p.stdout.readline().decode().rstrip("\n"))
        assert answers[1] == "" and answers[0] and answers[2]
        assert any(c in SCRIPTS["zh"] for c in answers[0])
    finally:
        p.stdin.close()
        assert p.wait(timeout=60) == 0
