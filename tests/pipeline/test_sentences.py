"""Sentences (spans.py, through pipeline.py): a paragraph cut into its sentences by sentencex, each translated in
one batch with the others, joined back as it was written (line breaks kept); a sentence too long for the model cut at
its clauses; the word alignments and HTML markup of the whole; every front end, and each able to turn it off."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn import Translator
from aiayn.cli.main import main
from aiayn.translation.pipeline import Request, translate
from aiayn.translation.spans import cut_long, join, merge_links, split, whole

from ..helpers import LEGACY, Server

GERMAN = ["Ein Mann fährt mit dem Fahrrad.", "Zwei Hunde spielen am 3. Oktober im Schnee.", "Eine Frau liest ein Buch."]
COPY = ["a b c d!", "e f g h j?", "i j a b c!"]          # the copy model's letters; ! and ? end them in any language


@pytest.fixture(scope="module")
def legacy() -> Translator:
    return Translator.load(LEGACY, "torch", device="cpu", beam=2, workers=1)


# --- splitting and joining -----------------------------------------------------------------------------------------


def test_sentences_are_found_where_a_reader_finds_them() -> None:
    assert split(" ".join(GERMAN), "de").sentences == GERMAN               # "3." before a month is no end
    assert split("Dr. Müller kam um 10 Uhr an, z. B. mit dem Zug. Er war müde.", "de").sentences == \
        ["Dr. Müller kam um 10 Uhr an, z. B. mit dem Zug.", "Er war müde."]
    # a full stop before a digit ends a sentence (sentencex alone keeps them together)
    assert split("我很好。2007年，他来了。", "zh").sentences == ["我很好。", "2007年，他来了。"]
    # ... and after a word of four letters or more (sentencex keeps them together); not after Nr., S. or er.
    assert split("Ein Kind auf dem Motorrad. 6 Personen kommen.", "de").sentences == \
        ["Ein Kind auf dem Motorrad.", "6 Personen kommen."]
    for whole_one in ("Siehe Nr. 3 und S. 5 dort.", "Am 3. Mai kam er. 2 Tage später ging er."):
        assert split(whole_one, "de").sentences == [whole_one]
    assert split("Eins\nZwei.  Drei.", "de").sentences == ["Eins", "Zwei.", "Drei."]     # a line break always ends one
    assert split("   ", "de").spans == () and whole("  Hallo Welt ").sentences == ["Hallo Welt"]


def test_translations_are_joined_with_the_sources_line_breaks_and_the_targets_spacing() -> None:
    p = split("\nEins. Zwei.\n\nDrei.  Vier.\n", "de")
    assert join(p, ["One.", "Two.", "Three.", "Four."], "en")[0] == "\nOne. Two.\n\nThree. Four.\n"
    assert join(p, ["一。", "二。", "三。", "四。"], "zh")[0] == "\n一。二。\n\n三。四。\n"
    assert join(split("一。二。", "zh"), ["One.", "Two."], "en")[0] == "One. Two."
    assert join(split("  Eins.  ", "de"), ["One."], "en")[0] == "One."         # no line break around it: none kept


@settings(max_examples=200, deadline=None)
@given(text=st.lists(st.sampled_from([*"ab .!?。\n\t,", "Dr.", "3.", " z. B. ", "Welt"]), max_size=40).map("".join),
       lang=st.sampled_from(["de", "en", "zh", "fr", None]))
def test_no_character_is_lost_or_moved_and_every_line_break_is_kept(text: str, lang: str | None) -> None:
    p = split(text, lang)
    ends = [e for s in p.spans for e in s]
    assert ends == sorted(ends) and all(a < b for a, b in p.spans)                 # in order, none empty or overlapping
    assert all(s == s.strip() for s in p.sentences)
    assert re.sub(r"\s", "", "".join(p.sentences)) == re.sub(r"\s", "", text)        # every other character, once
    joined, starts = join(p, p.sentences, "en")
    assert re.sub(r"\s", "", joined) == re.sub(r"\s", "", text)
    assert joined.count("\n") == (text.count("\n") if p.spans or "\n" in text else 0)
    assert [joined[s:s + len(x)] for s, x in zip(starts, p.sentences, strict=True)] == p.sentences


def test_a_sentence_too_long_is_cut_at_its_clauses_never_truncated() -> None:
    text = "Der Mann, der dort am Ufer steht, liest ein Buch; die Frau — sie lacht laut — trinkt grünen Tee: heiß."
    parts = cut_long(whole(text), lambda s: len(s) > 30).sentences
    assert parts == ["Der Mann,", "der dort am Ufer steht,", "liest ein Buch;", "die Frau — sie lacht laut —",
                     "trinkt grünen Tee: heiß."]                                      # each cut nearest its middle
    assert " ".join(parts) == text                                                   # nothing lost
    assert cut_long(whole("ohne jede Grenze hier"), lambda s: True).sentences == ["ohne jede Grenze hier"]
    assert cut_long(whole(text), lambda s: False).sentences == [text]


def test_the_alignment_of_a_paragraph_is_its_sentences_moved_to_their_words() -> None:
    p = split("Ein Mann fährt. Zwei Kinder\n\nspielen.", "de")
    outs = ["A man rides.", "Two children", "play."]
    joined, starts = join(p, outs, "en")
    assert joined == "A man rides. Two children\n\nplay."
    assert merge_links(p, outs, joined, starts, ["0-0 1-1 2-2", "0-0 1-1", "0-0 9-9"]) == "0-0 1-1 2-2 3-3 4-4 5-5"


# --- the pipeline, on a model -------------------------------------------------------------------------------------------


def test_a_paragraph_is_translated_as_its_sentences_would_be(legacy: Translator) -> None:
    paragraph = " ".join(GERMAN)
    alone = legacy.translate(GERMAN, sentences=False)
    assert legacy.translate([paragraph]) == [" ".join(alone)]
    assert legacy.translate([paragraph], sentences=False) != [" ".join(alone)]        # (what it was before)
    # n-best: the k-th of each sentence; alignments: each sentence's, moved to its words
    two = translate(legacy.engine, Request([paragraph], decode={"nbest": 2}, alignments=True)).translations[0]
    each = translate(legacy.engine, Request(GERMAN, decode={"nbest": 2}, sentences=False, alignments=True)).translations
    assert [t.text for t in two] == [" ".join(e[k].text for e in each) for k in range(2)]
    src_at = tgt_at = 0
    want = []
    for sentence, e in zip(GERMAN, each, strict=True):
        want += [f"{int(i) + src_at}-{int(j) + tgt_at}" for i, j in (x.split("-") for x in (e[0].alignment or "").split())]
        src_at, tgt_at = src_at + len(sentence.split()), tgt_at + len(e[0].text.split())
    assert two[0].alignment == " ".join(dict.fromkeys(want))
    assert abs(two[0].score - sum(e[0].score for e in each)) < 1e-4


def test_line_breaks_html_and_constraints(legacy: Translator) -> None:
    alone = legacy.translate(GERMAN, sentences=False)
    text = f"{GERMAN[0]}\n\n{GERMAN[1]} {GERMAN[2]}\n"
    assert translate(legacy.engine, Request([text])).translations[0][0].text == f"{alone[0]}\n\n{alone[1]} {alone[2]}\n"
    assert legacy.translate([text]) == [f"{alone[0]} {alone[1]} {alone[2]}"]      # Translator.translate: one line each
    html = translate(legacy.engine, Request([f"<p>{GERMAN[0]} <b>{GERMAN[1]}</b></p>"],
                                            format="html")).translations[0][0].text
    assert re.sub("<[^>]+>", "", html) == f"{alone[0]} {alone[1]}" and html.startswith("<p>") and "</b>" in html
    # a text with constraints of its own stays one sentence: its phrases are the whole text's
    paragraph = " ".join(GERMAN)
    kept = legacy.translate([paragraph], constraints=[["dog"]])
    assert kept == legacy.translate([paragraph], constraints=[["dog"]], sentences=False) and "dog" in kept[0]


def test_a_sentence_longer_than_the_model_was_trained_on_is_translated_by_its_clauses(legacy: Translator) -> None:
    long = "Ein Mann, der ein rotes Hemd trägt, fährt mit dem Fahrrad über eine Brücke, und zwei Hunde laufen nach."
    clauses = cut_long(whole(long), lambda s: len(legacy.engine.encode([s])[0]) > 12).sentences
    assert len(clauses) > 1
    assert legacy.translate([long], sentence_tokens=12) == [" ".join(legacy.translate(clauses, sentences=False))]
    assert legacy.translate([long], sentence_tokens=1000) == legacy.translate([long], sentences=False)


# --- every front end --------------------------------------------------------------------------------------------------


def test_every_front_end_splits_and_each_can_turn_it_off(server: Server, copy_model: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    cli = Translator.load(copy_model, "torch", device="cpu")
    # 30 sentences: as one line they are longer than the model's 128 positions, so the whole line's translation is
    # cut short whatever the CPU's rounding, and each answer below tells the two ways apart
    paragraph = " ".join(COPY * 10)
    alone = cli.translate(COPY * 10, sentences=False)
    whole_line = cli.translate([paragraph], sentences=False)[0]
    assert len(whole_line) < len(" ".join(alone))
    status, _, body = server.post("/translate", {"text": [paragraph, f"{COPY[0]}\n{COPY[1]}"]})
    assert status == 200 and body["translations"] == [" ".join(alone), f"{alone[0]}\n{alone[1]}"], body
    status, _, body = server.post("/translate", {"text": [paragraph], "sentences": False})
    assert status == 200 and body["translations"] == [whole_line], body
    status, _, body = server.post("/translate", {"q": f"{paragraph}\n\n{COPY[2]}", "source": "in", "target": "out"})
    assert status == 200 and body["translatedText"] == f"{' '.join(alone)}\n\n{alone[2]}", body
    status, _, body = server.post("/translate", {"q": paragraph, "source": "in", "target": "out", "sentences": "false"})
    assert status == 200 and body["translatedText"] == whole_line, body
    status, _, body = server.post("/translate", {"q": paragraph, "source": "in", "target": "out", "sentences": 2})
    assert status == 400 and "sentences must be true or false" in body["error"], body
    src = tmp_path / "in.txt"
    src.write_text(f"{paragraph}\n{COPY[0]}\n")
    for flags, want in (([], [" ".join(alone), alone[0]]), (["--no-sentences"], [whole_line, alone[0]])):
        assert main(["translate", "--model", str(copy_model), "--engine", "torch", "--device", "cpu", "--input", str(src),
                     "--quiet",
                     *flags]) == 0
        assert capsys.readouterr().out.splitlines() == want
