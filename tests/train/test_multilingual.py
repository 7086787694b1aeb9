"""Many languages in one model (multilingual.py): the data directory of many directions, the target named by a tag,
validation per direction, and translating a direction a run knows (and refusing one it does not).

The trained test uses three made-up "languages" of the same random strings (the seeds' copy task): ``fw`` the
letters as they are, ``nx`` each letter the next one (a -> b, ..., j -> a), ``up`` in capitals. Only the tag tells
the model which of them to write, so a model that ignores it cannot pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.config import Multilingual
from aiayn.data.datadir import DataDir, DataError
from aiayn.data.multilingual import for_direction, parse_directions, parse_langs, prepare_multilingual, sampled_sizes, tag
from aiayn.data.prepare import PrepareOptions, encode_tagged

from ..helpers import WAYS, three_ways_corpus

LANGS = ("fw", "nx", "up")
_corpus = three_ways_corpus


OPTS = PrepareOptions(src="src", tgt="tgt", vocab_size=284)


# --- the settings ------------------------------------------------------------------------------------------------------


def test_directions_are_all_one_languages_or_a_list_and_anything_else_is_refused_by_name() -> None:
    langs = parse_langs("de,en,fr,cs")
    assert len(parse_directions("all", langs)) == 12
    assert parse_directions("en", langs) == (("de", "en"), ("en", "de"), ("en", "fr"), ("en", "cs"), ("fr", "en"),
                                             ("cs", "en"))
    assert parse_directions("de-en,en-fr,de-en", langs) == (("de", "en"), ("en", "fr"))
    for bad in ("de-it", "de-de", "deen"):
        with pytest.raises(ValueError, match=f"'{bad}' is not SRC-TGT"):
            parse_directions(bad, langs)
    for bad in ("de", "de,de", "de,src", "de,e n"):
        with pytest.raises(ValueError, match="--langs"):
            parse_langs(bad)


def test_temperature_keeps_the_corpus_at_one_and_evens_it_out_above() -> None:
    sizes = {"de-en": 90000, "de-cs": 10000}
    assert sampled_sizes(sizes, 1.0) == sizes
    five = sampled_sizes(sizes, 5.0)
    assert sum(five.values()) == 100000 and 10000 < five["de-cs"] < 50000 < five["de-en"] < 90000, five
    assert all(abs(n - 50000) < 100 for n in sampled_sizes(sizes, 1000.0).values())     # (very hot: even)
    with pytest.raises(ValueError, match="temperature"):
        sampled_sizes(sizes, 0)


# --- the data directory ------------------------------------------------------------------------------------------------


def test_a_data_dir_of_every_direction_with_whole_tags_and_untagged_references(tmp_path: Path) -> None:
    c = _corpus(tmp_path, {"train": 300, "valid": 20})
    out = prepare_multilingual({"train": c / "train", "valid": c / "valid"}, LANGS, parse_directions("fw", LANGS),
                               tmp_path / "data", OPTS, position="source")
    d = DataDir(out)
    multi = d.multilingual
    assert multi.directions == (("fw", "nx"), ("fw", "up"), ("nx", "fw"), ("up", "fw"))
    assert multi.train == {"fw-nx": 300, "fw-up": 300, "nx-fw": 300, "up-fw": 300} and d.pairs("train") == 1200
    # the evaluation split holds every direction, the zero-shot ones (nx-up, up-nx) too, in order
    assert list(multi.ranges["valid"]) == ["fw-nx", "fw-up", "nx-fw", "nx-up", "up-fw", "up-nx"]
    assert multi.ranges["valid"]["nx-up"] == (60, 80) and d.pairs("valid") == 120
    vocab, (src, tgt) = d.vocab(), d.split("valid")
    raw_src, raw_tgt = d.raw_lines("valid", "src"), d.raw_lines("valid", "tgt")
    for name, (first, end) in multi.ranges["valid"].items():
        a, b = name.split("-")
        for i in (first, end - 1):
            # the tag is one piece and the first id; the rest is the text's own encoding (as translating encodes it)
            assert src[i].tolist() == [vocab.src.piece_id(tag(b)), *vocab.src.encode([raw_src[i]])[0]], name
            assert tgt[i].tolist() == vocab.tgt.encode([raw_tgt[i]])[0]
            assert not raw_src[i].startswith("<2")          # what is translated and scored carries no tag
    assert raw_tgt[multi.ranges["valid"]["nx-up"][0]] == (c / "valid.up").read_text().splitlines()[0]


def test_pairs_of_files_where_the_corpus_is_not_multi_parallel_and_missing_files_named(tmp_path: Path) -> None:
    c = _corpus(tmp_path, {"train": 50, "valid": 10})
    for lang in ("fw", "nx"):                 # fw-nx has a corpus of its own (fairseq's PREFIX.fw-nx.fw names)
        (c / f"train.nx-fw.{lang}").write_text("a b\n" * 7)
    out = prepare_multilingual({"train": c / "train", "valid": c / "valid"}, LANGS, (("fw", "nx"), ("up", "fw")),
                               tmp_path / "data", OPTS)
    assert DataDir(out).multilingual.train == {"fw-nx": 7, "up-fw": 50}
    (c / "valid.up").unlink()
    with pytest.raises(DataError, match=r"no files for up-fw under .*valid: expected .*valid\.up"):
        prepare_multilingual({"train": c / "train", "valid": c / "valid"}, LANGS, (("up", "fw"),), tmp_path / "d2",
                             OPTS)


def test_the_tag_on_the_target_side_and_a_line_that_only_looks_tagged(tmp_path: Path) -> None:
    c = _corpus(tmp_path, {"train": 100, "valid": 5})
    out = prepare_multilingual({"train": c / "train", "valid": c / "valid"}, LANGS, (("fw", "nx"),),
                               tmp_path / "data", OPTS, position="target")
    d = DataDir(out)
    src, tgt = d.split("valid")
    vocab = d.vocab()
    assert tgt[0][0] == vocab.tgt.piece_id("<2nx>") and src[0][0] != vocab.src.piece_id("<2nx>")
    assert d.raw_lines("valid", "tgt")[0] == (c / "valid.nx").read_text().splitlines()[0]
    # a tag is a tag only where it starts a line and a space follows it
    ids = encode_tagged(vocab.src, ["<2nx>a b", "a <2nx> b", "<2nx> a b"], ["<2nx>"])
    assert [vocab.src.piece_id("<2nx>") == x[0] for x in ids] == [False, False, True]


def test_a_corpus_of_one_hugging_face_dataset_per_pair(tmp_path: Path) -> None:
    """IWSLT 2017's way (``--hf-dataset IWSLT/iwslt2017 --hf-config 'iwslt2017-{src}-{tgt}'``), on datasets written
    here with save_to_disk: one per pair, named in either order, each with a translation column."""
    datasets = pytest.importorskip("datasets")
    from aiayn.cli.main import main

    datasets.disable_progress_bars()
    c = _corpus(tmp_path, {"train": 200, "valid": 10, "test": 10})
    for a, b in (("fw", "nx"), ("up", "fw"), ("nx", "up")):          # up-fw: the other order than fw-up
        lines = {lang: {s: (c / f"{s}.{lang}").read_text().splitlines() for s in ("train", "valid", "test")}
                 for lang in (a, b)}
        datasets.DatasetDict({theirs: datasets.Dataset.from_list(
            [{"translation": {a: x, b: y}} for x, y in zip(lines[a][ours], lines[b][ours], strict=True)])
            for ours, theirs in (("train", "train"), ("valid", "validation"), ("test", "test"))}
        ).save_to_disk(str(tmp_path / f"ds-{a}-{b}"))
    out = tmp_path / "data"
    assert main(["prepare", "--hf-dataset", str(tmp_path / "ds-{src}-{tgt}"), "--langs", "fw,nx,up", "--vocab-size",
                 "284", "--out", str(out), "--cache-dir", str(tmp_path / "cache")]) == 0
    d = DataDir(out)
    assert d.multilingual.train == {f"{a}-{b}": 200 for a in LANGS for b in LANGS if a != b}
    assert sorted(d.multilingual.ranges["test"]) == sorted(d.multilingual.train)
    first = d.multilingual.ranges["valid"]["up-nx"][0]
    assert d.raw_lines("valid", "tgt")[first] == (c / "valid.nx").read_text().splitlines()[0]
    assert main(["prepare", "--hf-dataset", str(tmp_path / "ds-{src}-{tgt}"), "--langs", "fw,nx,de", "--out",
                 str(tmp_path / "d2"), "--cache-dir", str(tmp_path / "cache")]) == 2      # no dataset for de


def test_a_source_gets_its_tag_and_a_blank_line_none() -> None:
    """What every engine is given (multilingual.Directed.encode): the tag's id, then the line's; a blank line stays
    empty, so that no engine decodes a lone tag into words (the pipeline answers blank lines before any engine)."""
    multi = Multilingual(("de", "fr"), (("de", "fr"),))
    assert multi.source_ids([9, 8], "fr", 5) == [5, 9, 8] and multi.source_ids([], "fr", 5) == []
    assert Multilingual(("de", "fr"), (("de", "fr"),), "target").source_ids([9, 8], "fr", 5) == [9, 8]
    assert multi.tag("fr") == "<2fr>" and Multilingual(("de", "fr"), (), tags={"fr": ">>fra<<"}).tag("fr") == ">>fra<<"


def test_a_multilingual_vocabulary_is_one_joint_vocabulary(tmp_path: Path) -> None:
    from dataclasses import replace

    c = _corpus(tmp_path, {"train": 20, "valid": 5})
    with pytest.raises(ValueError, match="one joint vocabulary"):
        prepare_multilingual({"train": c / "train", "valid": c / "valid"}, LANGS, (("fw", "nx"),), tmp_path / "d",
                             replace(OPTS, vocab="separate"))


# --- a model of many directions ----------------------------------------------------------------------------------------


FRESH = pytest.mark.parametrize("fresh", [False, pytest.param(True, marks=pytest.mark.ci)], ids=["kept", "trained-now"])


def _model(request: pytest.FixtureRequest, fresh: bool) -> Path:
    """conftest's ``three_ways`` (kept in tests/fixtures/trained/) or, under CI, its recipe trained again now."""
    return Path(request.getfixturevalue("fresh_three_ways" if fresh else "three_ways"))


@FRESH
def test_the_tag_chooses_what_the_model_writes(fresh: bool, request: pytest.FixtureRequest) -> None:
    from aiayn.translator import Translator

    three_ways = _model(request, fresh)

    lines = (three_ways.parent / "test.fw").read_text().splitlines()
    for target in ("nx", "up"):
        t = Translator.load(three_ways, "torch", source="fw", target=target)
        try:
            out = t.translate(lines + [""])
        finally:
            t.close()
        want = [" ".join(WAYS[target](x.split())) for x in lines]
        right = sum(a == b for a, b in zip(out, want, strict=False))
        assert right >= 0.9 * len(lines), (target, right, list(zip(out, want, strict=False))[:3])
        assert out[-1] == ""                            # a blank line stays blank: it is not given a tag to decode


@FRESH
def test_validation_scores_each_direction_and_the_best_is_their_mean(fresh: bool, request: pytest.FixtureRequest) -> None:
    three_ways = _model(request, fresh)
    last = [json.loads(x) for x in (three_ways / "metrics.jsonl").read_text().splitlines() if "valid_loss" in x][-1]
    names = ["fw-nx", "fw-up", "nx-fw", "nx-up", "up-fw", "up-nx"]
    scores = [last[f"valid_bleu_{n}"] for n in names]
    assert last["valid_bleu"] == pytest.approx(sum(scores) / len(scores), abs=0.01)
    assert min(last[f"valid_bleu_{n}"] for n in ("fw-nx", "fw-up", "nx-fw", "up-fw")) > 80, last
    multi = Multilingual.from_dict(json.loads((three_ways / "data.json").read_text())["multilingual"])
    assert not multi.trained("nx", "up") and multi.trained("up", "fw")


def test_translate_names_the_direction_and_refuses_one_it_does_not_know(three_ways: Path) -> None:
    def translate(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", str(three_ways), "--engine",
                               "torch", *flags], input="a b c d e\n", capture_output=True, text=True, timeout=120)

    r = translate("--source", "fw", "--target", "up")
    assert r.returncode == 0 and r.stdout == "A B C D E\n", r.stderr
    folder = three_ways.parent
    r = subprocess.run([sys.executable, "-m", "aiayn", "evaluate", "--model", str(three_ways), "--engine", "torch",
                        "--source", "fw", "--target", "nx", "--src", str(folder / "test.fw"), "--ref",
                        str(folder / "test.nx"), "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and json.loads(r.stdout)["bleu"] > 90, (r.stdout, r.stderr[-2000:])
    for flags, said in ((("--source", "fw", "--target", "de"), "does not write 'de': it writes fw, nx, up"),
                        (("--target", "up"), "name the source language too"),
                        ((), "name the target language with --target (one of fw, nx, up)"),
                        (("--source", "up", "--target", "up"), "are both 'up'")):
        r = translate(*flags)
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, (flags, r.stderr)


def test_a_source_side_tag_chooses_the_target_in_a_ctranslate2_export_and_an_argos_package_is_refused(
        three_ways_source: Path, tmp_path: Path) -> None:
    """--tag-position source (Johnson et al.'s tag on the encoder's input): the run and its CTranslate2 export, which
    keeps its directions, write the letters of the tag's language (capitals for up, lowercase for nx) and the same
    lines. The model has had 150 updates: it writes the target's letters, not yet the right ones."""
    pytest.importorskip("ctranslate2")
    from aiayn import Translator
    from aiayn.engines.ctranslate2 import CTranslate2Engine
    from aiayn.interop.export import ExportError, export

    run = three_ways_source
    engine = CTranslate2Engine.from_export(export(run, "ctranslate2", tmp_path / "ct2"))
    try:
        assert engine.multilingual is not None and engine.multilingual.langs == LANGS
        lines = (run.parent / "test.fw").read_text().splitlines()[:40]
        for target, letters in (("up", str.isupper), ("nx", str.islower)):
            theirs = Translator(for_direction(engine, "fw", target)).translate(lines)
            ours = Translator.load(run, "torch", source="fw", target=target)
            try:
                mine = ours.translate(lines)
            finally:
                ours.close()
            assert all(letters(x) for x in mine), (target, mine[:3])
            assert sum(a == b for a, b in zip(theirs, mine, strict=True)) >= 0.95 * len(lines), (target, theirs[:3])
    finally:
        engine.close()
    with pytest.raises(ExportError, match="argostranslate gives CTranslate2 a target prefix only.*--tag-position target"):
        export(run, "argos", tmp_path / "argos")


def right_share(out: list[str], lines: list[str], target: str) -> float:
    """The share of ``out`` that is ``lines`` written the ``target`` way."""
    want = [" ".join(WAYS[target](x.split())) for x in lines]
    return sum(a == b for a, b in zip(out, want, strict=True)) / len(lines)


def test_a_target_side_tag_is_validated_and_translated_from_the_forced_tag(three_ways: Path) -> None:
    """--tag-position target: the tag is the decoder's first token, which validation, translating and a server's
    step-level search all force (search.py ``first``) and leave out of the output; a search that let the model
    guess it would write one language for both targets of a source."""
    import torch

    from aiayn.engines.auto import load
    from aiayn.translator import Translator

    run = three_ways
    last = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if "valid_loss" in x][-1]
    assert min(last[f"valid_bleu_{n}"] for n in ("fw-nx", "fw-up", "nx-fw", "up-fw")) > 80, last
    lines = (run.parent / "test.fw").read_text().splitlines()
    engine = load(run, "torch")
    try:
        for target in ("nx", "up"):
            view = for_direction(engine, "fw", target)
            out = Translator(view).translate(lines + [""])
            assert right_share(out[:-1], lines, target) >= 0.9 and out[-1] == "", (target, out[:3])
            # the server's step-level batcher: lines admitted to a running search, their tag forced there too
            decode = view.settings()
            search = view.search(decode)
            ids = view.encode(lines[:8])
            view.admit(search, ids, list(range(8)), decode, None)
            done: dict[int, list[int]] = {}
            with torch.inference_mode():
                while search.active:
                    done.update((k, hyps[0].tokens) for k, hyps in search.step())
            assert view.detokenize([done[k] for k in range(8)]) == out[:8], target
    finally:
        engine.close()


def test_a_target_side_tag_goes_to_ctranslate2_and_argos_as_their_target_prefix(three_ways: Path,
                                                                               tmp_path: Path) -> None:
    """The CTranslate2 export of such a run translates each direction as the run does (its tag CTranslate2's
    ``target_prefix``); its Argos packages, one per direction trained on, carry the tag as theirs, and the real
    argostranslate translates with one as aiayn does."""
    pytest.importorskip("ctranslate2")
    from aiayn import Translator
    from aiayn.engines import argos
    from aiayn.engines.auto import load as load_engine
    from aiayn.engines.ctranslate2 import CTranslate2Engine
    from aiayn.interop.export import export

    from ..engines.test_argos import aiayn_translate, argos_translate

    run = three_ways
    lines = (run.parent / "test.fw").read_text().splitlines()[:40]
    engine = CTranslate2Engine.from_export(export(run, "ctranslate2", tmp_path / "ct2"))
    own = load_engine(run, "torch")
    try:
        for target in ("up", "nx"):
            theirs = Translator(for_direction(engine, "fw", target)).translate(lines)
            assert right_share(theirs, lines, target) >= 0.9, (target, theirs[:3])
            # a beam search (which, this toy model, ends short of the copy) as aiayn's: the tag not counted by min_len
            for min_len in (0, 3):
                beam = {"beam": 4, "lenpen": 1.0, "length_norm": "length", "min_len": min_len, "sentences": False}
                a = Translator(for_direction(engine, "fw", target)).translate(lines, **beam)
                b = Translator(for_direction(own, "fw", target)).translate(lines, **beam)
                assert sum(x == y for x, y in zip(a, b, strict=True)) >= 0.95 * len(lines), (target, min_len)
    finally:
        engine.close()
        own.close()
    assert export(run, "argos", tmp_path / "argos") == tmp_path / "argos"
    made = sorted(x.name for x in (tmp_path / "argos").glob("*.argosmodel"))
    assert made == [f"translate-{d}-1_0.argosmodel" for d in ("fw_nx", "fw_up", "nx_fw", "up_fw")], made
    package = tmp_path / "argos" / "translate-fw_up-1_0.argosmodel"
    got = argos_translate(package, lines, tmp_path, codes=("fw", "up"))
    theirs = [str(t).strip() for t in got["out"]]                       # type: ignore[attr-defined]
    assert all(t and t == t.upper() for t in theirs), theirs[:3]        # the tag chose the capitals
    (tmp_path / "ours").mkdir()
    ours = aiayn_translate(run, lines, tmp_path / "ours", "--engine", "torch", "--length-norm", "length",
                           "--source", "fw", "--target", "up")
    assert sum(a.strip() == b for a, b in zip(ours, theirs, strict=True)) >= 0.95 * len(lines)
    # aiayn reads the package as the one direction it is: no --source/--target needed
    served = argos.load(argos.packages(package, tmp_path / "cache")[0])
    try:
        assert served.languages == ("fw", "up")
        assert for_direction(served, None, None) is served and for_direction(served, "fw", "up") is served
    finally:
        served.close()
    (tmp_path / "package").mkdir()
    assert aiayn_translate(package, lines, tmp_path / "package") == ours


def test_a_bilingual_engine_is_checked_against_the_direction_named() -> None:
    class Bilingual:
        languages = ("de", "en")
        multilingual = None

    one = Bilingual()
    assert for_direction(one, None, None) is one and for_direction(one, "de", "en") is one
    with pytest.raises(ValueError, match="translates de into en, not de into fr"):
        for_direction(one, "de", "fr")


def test_each_direction_is_calibrated_on_its_own_validation_lines(three_ways: Path, tmp_path: Path) -> None:
    """``aiayn calibrate`` on a multilingual run fits one calibration per direction (on that direction's validation
    lines) inside one fitted on them all, and each direction's view of the engine reads its own. The toy's trained
    directions translate every line (chrF 100: nothing to tell apart, so they read the pooled one); its zero-shot
    ones score far lower (0 to about 20), split by a threshold of 10."""
    import shutil

    from aiayn.cli.main import main
    from aiayn.decoding.hypotheses import Calibration
    from aiayn.translator import Translator

    run = tmp_path / "run"
    shutil.copytree(three_ways, run)           # (the session's run stays as it is)
    assert main(["calibrate", "--model", str(run), "--engine", "torch", "--threshold", "10"]) == 0
    cal = Calibration.load(run / "calibration.json")
    ranges = Multilingual.from_dict(json.loads((run / "data.json").read_text())["multilingual"]).ranges["valid"]
    assert set(cal.directions) == {"nx-up", "up-nx"}, cal.fitted
    for name, one in cal.directions.items():
        assert one.fitted["fitted"]["sentences"] == ranges[name][1] - ranges[name][0] == 60
        assert one.weights != cal.weights
    assert cal.fitted["fitted"]["sentences"] == 360
    for name in ranges:
        t = Translator.load(run, "torch", source=name[:2], target=name[3:])
        try:
            assert t.engine.calibration.weights == cal.directions.get(name, cal).weights, name
        finally:
            t.close()
