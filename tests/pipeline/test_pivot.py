"""Pivot translation: a pair no model translates, through two that do (de→en, then en→fr), in the Python API
(translator.Translator over a route.Route of two engines), the command line (--model A --model B) and a server's two
APIs (serving.models.Models.route), which list the pair, say that they pivoted and refuse what only a direct model can
do; with a fallback, the command line and the server give the same. The models: the tiny legacy model as de→en and
conftest's copy model recorded as en→fr."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiayn import Translator
from aiayn.cli.main import main
from aiayn.decoding.constraints import Glossary
from aiayn.engines.base import Engine
from aiayn.translation.pipeline import Request, Translated
from aiayn.translation.route import Route

from ..helpers import LEGACY, Server, relabeled

GERMAN = ["Ein Mann fährt mit dem Fahrrad. Zwei Hunde spielen im Schnee.", "", "Eine Frau liest."]


@pytest.fixture(scope="module")
def en_fr(copy_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return relabeled(copy_model, tmp_path_factory.mktemp("runs") / "copy-en-fr", "en", "fr")


@pytest.fixture(scope="module")
def legs(en_fr: Path) -> list[Engine]:
    # (both with beam 2, as `--beam 2` sets it for every model of a chain on the command line)
    return [Translator.load(LEGACY, "torch", device="cpu", beam=2, workers=1).engine,
            Translator.load(en_fr, "torch", device="cpu", beam=2, workers=1).engine]


def through(legs: list[Engine], request: Request) -> Translated:
    return Route(tuple(legs)).follow(request)


def test_a_pivot_is_each_model_in_turn(legs: list[Engine]) -> None:
    de_en, en_fr = map(Translator, legs)
    english = de_en.translate(GERMAN)
    want = en_fr.translate(english)
    pivot = Translator(Route(tuple(legs)))
    assert pivot.translate(GERMAN) == want and want[1] == ""
    assert pivot.languages == ("de", "fr")
    # the last model gives the n-best and keeps the constraints; the first, its best translation
    two = through(legs, Request(GERMAN[:1], decode={"nbest": 2})).translations[0]
    alone = through(legs[1:], Request(english[:1], decode={"nbest": 2})).translations[0]
    assert [t.text for t in two] == [t.text for t in alone]
    kept = through(legs, Request(GERMAN[:1], decode={"beam": 4}, constraints=[["a b"]])).translations[0][0].text
    assert "a b" in kept
    for asked, name in ((Request(GERMAN, alignments=True), "alignments"),
                        (Request(GERMAN, glossary=Glossary([("Mann", "a")])), "glossary")):
        with pytest.raises(ValueError, match=f"{name} need a model that translates directly"):
            through(legs, asked)


@pytest.mark.ci      # CI's (make test-ci): two models chained on the command line, 8 s (make test: the server's)
def test_the_command_line_takes_a_chain(legs: list[Engine], en_fr: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    src, ref = tmp_path / "in.de", tmp_path / "ref.fr"
    src.write_text("\n".join(GERMAN) + "\n")
    want = Translator(Route(tuple(legs))).translate(GERMAN)
    ref.write_text("\n".join(want) + "\n")
    chain = ["--model", str(LEGACY), "--model", str(en_fr), "--engine", "torch", "--device", "cpu"]
    assert main(["translate", *chain, "--beam", "2", "--input", str(src), "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines() == want
    assert main(["evaluate", *chain, "--beam", "2", "--src", str(src), "--ref", str(ref), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["bleu"] == 100.0
    assert main(["translate", *chain, "--alignments", "--input", str(src)]) == 2
    assert "--alignments need a model that translates directly" in capsys.readouterr().err


@pytest.fixture(scope="module")
def server(en_fr: Path) -> Iterator[Server]:
    s = Server("--no-processes", "--model", str(en_fr), model=LEGACY)
    yield s
    assert s.stop() == 0
    assert "Traceback" not in s.output(), s.output()[-3000:]


def test_a_server_routes_a_pair_through_its_pivot_and_says_so(server: Server, legs: list[Engine]) -> None:
    pivot = Translator(Route(tuple(legs)))
    want = pivot.translate(GERMAN, beam=2)
    status, _, body = server.post("/translate", {"text": GERMAN, "source": "de", "target": "fr", "beam": 2})
    sure = [round(t.confidence, 4) for t in pivot.translations(GERMAN, beam=2)]    # (the last leg's)
    assert status == 200 and body == {"translations": want, "confidence": sure, "pivot": ["en"]}, body
    status, _, body = server.post("/translate", {"q": GERMAN[0], "source": "de", "target": "fr", "alternatives": 1})
    _, _, own = server.post("/translate", {"text": GERMAN[:1], "source": "de", "target": "fr", "nbest": 2})
    assert status == 200 and body["pivot"] == ["en"], body                           # LibreTranslate's API, the same
    assert [body["translatedText"], *body["alternatives"]] == [t["text"] for t in own["translations"][0]]
    status, _, body = server.post("/translate", {"text": GERMAN, "source": "de", "target": "en"})
    assert status == 200 and "pivot" not in body, body                               # a model of its own: no pivot
    status, _, langs = server.request("GET", "/languages")
    assert status == 200 and {x["code"]: x["targets"] for x in langs}["de"] == ["en", "fr"]
    status, _, info = server.request("GET", "/info")
    assert info["pivots"] == [{"source": "de", "target": "fr", "via": ["en"], "name": "de-en-fr"}]
    for payload, code, words in (({"text": GERMAN, "source": "fr", "target": "de"}, 400, "no model translates fr"),
                                 ({"text": GERMAN, "source": "de", "target": "fr", "alignments": True}, 422,
                                  "alignments need a model that translates directly"),
                                 ({"q": "x", "source": "fr", "target": "de"}, 400, "no model translates fr")):
        status, _, body = server.post("/translate", payload)
        assert status == code and words in body["error"], body
    status, _, body = server.post("/attention", {"text": GERMAN[0], "source": "de", "target": "fr"})
    assert status == 400 and "no model translates de into fr" in body["error"], body


def test_the_command_line_and_the_server_give_the_same_through_a_pivot_with_a_fallback(
        en_fr: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """de→fr through en, the en→fr model unsure of everything and a fallback for en→fr (the legacy model recorded as
    en→fr) sure of everything: both doors follow one route (route.py), so the fallback's translations of the pivot's
    English are kept by both, and both count them."""
    import shutil

    from aiayn.decoding.hypotheses import NAMES, Calibration

    unsure, back = tmp_path / "unsure-en-fr", relabeled(LEGACY, tmp_path / "back-en-fr", "en", "fr")
    shutil.copytree(en_fr, unsure, ignore=shutil.ignore_patterns("engines"))
    for run, bias in ((unsure, -4.0), (back, 4.0)):
        Calibration([0.0] * len(NAMES), bias, [0.0] * len(NAMES), [1.0] * len(NAMES)).save(run / "calibration.json")
    src = tmp_path / "in.de"
    src.write_text("\n".join(GERMAN) + "\n")
    chain = ["--model", str(LEGACY), "--model", str(unsure), "--engine", "torch", "--device", "cpu", "--beam", "2"]
    assert main(["translate", *chain, "--fallback", str(back), "--min-confidence", "0.5", "--no-processes",
                 "--input", str(src), "--quiet"]) == 0
    cli = capsys.readouterr().out.splitlines()
    assert main(["translate", *chain, "--no-processes", "--input", str(src), "--quiet"]) == 0
    assert cli != capsys.readouterr().out.splitlines()                 # (the fallback changed what was written)
    s = Server("--no-processes", "--engine", "torch", "--device", "cpu", "--model", str(unsure), "--fallback",
               str(back), "--min-confidence", "0.5", model=LEGACY)
    try:
        status, _, body = s.post("/translate", {"text": GERMAN, "source": "de", "target": "fr", "beam": 2})
        assert status == 200 and body["translations"] == cli and body["pivot"] == ["en"], body
        _, _, text = s.request("GET", "/metrics")
        assert 'aiayn_fallback_texts_total{model="de-en-fr",outcome="sent"} 2.0' in text.decode()
    finally:
        assert s.stop() == 0
