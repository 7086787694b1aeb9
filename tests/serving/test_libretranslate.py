"""LibreTranslate's API in `aiayn serve`, and several models in one server: the real `libretranslatepy` client and
plain requests in the shapes real clients send (form, multipart, JSON batch, query string), against a real server
on a free port serving two models: the tiny legacy model as de->en and conftest's copy model as en->de (each
request's answer must be its own model's: the two translate the same line differently)."""

from __future__ import annotations

import shutil
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiayn import Translator
from aiayn.serving.middleware import ServiceError
from aiayn.serving.models import Models, Served
from aiayn.translation.pipeline import Request, translate
from aiayn.translation.route import canonical

from ..helpers import LEGACY, Server, copy_lines, multipart, relabeled

pytest.importorskip("fastapi")
lt_client = pytest.importorskip("libretranslatepy", reason="the LibreTranslate client: pip install libretranslatepy")

GERMAN = ["Ein Mann fährt mit dem Fahrrad über eine Brücke.", "Zwei Hunde spielen im Schnee."]
ENGLISH = "Two children are playing on the beach with a red ball."
KEY = "lt-key"


@pytest.fixture(scope="module")
def en_de(copy_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The copy model, recorded as trained on en->de data."""
    return relabeled(copy_model, tmp_path_factory.mktemp("runs") / "copy-en-de", "en", "de")


@pytest.fixture(scope="module")
def two(en_de: Path) -> Iterator[Server]:
    s = Server("--model", str(en_de), "--max-lines", "32", model=LEGACY)
    yield s
    assert s.stop() == 0
    assert "Traceback" not in s.output(), s.output()[-3000:]


@pytest.fixture(scope="module")
def oracles(en_de: Path) -> dict[str, Translator]:
    """What `aiayn translate` gives with each served model."""
    return {"de-en": Translator.load(LEGACY, "auto", device="cpu", workers=1),
            "en-de": Translator.load(en_de, "auto", device="cpu", workers=1)}


def test_the_libretranslatepy_client_translates_lists_languages_and_detects(two: Server,
                                                                            oracles: dict[str, Translator]) -> None:
    lt = lt_client.LibreTranslateAPI(f"http://127.0.0.1:{two.port}")
    assert lt.languages() == [{"code": "de", "name": "German", "targets": ["en"]},
                              {"code": "en", "name": "English", "targets": ["de"]}]
    copies = copy_lines(3)
    assert [lt.translate(line, "de", "en") for line in GERMAN] == oracles["de-en"].translate(GERMAN)
    assert [lt.translate(line, "en", "de") for line in copies] == oracles["en-de"].translate(copies)
    assert oracles["de-en"].translate(copies) != oracles["en-de"].translate(copies)     # the route is seen
    # a text of several lines is translated line by line, as `aiayn translate` translates a file
    assert lt.translate("\n".join(GERMAN), "de", "en") == "\n".join(oracles["de-en"].translate(GERMAN))
    assert lt.detect(GERMAN[0])[0]["language"] == "de" and lt.detect(ENGLISH)[0]["language"] == "en"
    assert 50 < lt.detect(ENGLISH)[0]["confidence"] <= 100
    assert lt.translate(GERMAN[1], "auto", "en") == oracles["de-en"].translate(GERMAN[1:])[0]


def _send(server: Server, path: str, body: bytes = b"", ctype: str | None = None, query: dict[str, str] | None = None,
          method: str = "POST") -> tuple[int, dict[str, str], Any]:
    url = path + ("?" + urllib.parse.urlencode(query) if query else "")
    return server.request(method, url, body, {"Content-Type": ctype} if ctype else {})


def test_each_clients_request_shape(two: Server, oracles: dict[str, Translator]) -> None:
    want = oracles["de-en"].translate(GERMAN)
    sure = [round(t.confidence, 4) for t in oracles["de-en"].translations(GERMAN)]    # (aiayn's own field)
    form = urllib.parse.urlencode({"q": GERMAN[0], "source": "de", "target": "en", "format": "text",
                                   "api_key": ""}).encode()
    # Discourse / libretranslatepy: url-encoded form
    assert _send(two, "/translate", form, "application/x-www-form-urlencoded")[2] == {"translatedText": want[0],
                                                                                       "confidence": sure[0]}
    # Nextcloud: multipart with an empty api_key; TranslateYou: everything in the query string of an empty POST
    body, headers = multipart({"q": GERMAN[1], "source": "de", "target": "en", "api_key": ""})
    assert _send(two, "/translate", body, headers["Content-Type"])[2] == {"translatedText": want[1], "confidence": sure[1]}
    assert _send(two, "/translate", query={"q": GERMAN[0], "source": "de", "target": "en"})[2] == \
        {"translatedText": want[0], "confidence": sure[0]}
    # the query string wins over the form, as in LibreTranslate (Flask's request.values)
    assert _send(two, "/translate", form, "application/x-www-form-urlencoded", {"target": "xx"})[0] == 400
    # Mastodon / Weblate: a JSON batch (api_key null), with source auto and alternatives
    status, _, got = two.post("/translate", {"q": GERMAN, "source": "auto", "target": "en", "api_key": None,
                                             "alternatives": 2})
    assert status == 200 and got["translatedText"] == want
    assert [d["language"] for d in got["detectedLanguage"]] == ["de", "de"]
    best3 = translate(oracles["de-en"].engine, Request(GERMAN, decode={"beam": max(3, oracles["de-en"].engine.decode.beam),
                                                                "nbest": 3})).translations
    assert got["alternatives"] == [[t.text for t in ts[1:]] for ts in best3]      # (the pipeline's n-best)
    assert got["alternativesConfidence"] == [[round(t.confidence, 4) for t in ts[1:]] for ts in best3]
    assert got["confidence"] == [round(ts[0].confidence, 4) for ts in best3]
    # aliases (zh-Hans is zh, pt-BR is pb) and the language names; /detect with q in the query string (Nextcloud)
    assert canonical("zh-Hans") == "zh" and canonical("pt-BR") == "pb" and canonical(" DE ") == "de"
    assert _send(two, "/detect", query={"q": ENGLISH, "api_key": ""})[2][0]["language"] == "en"
    # Nextcloud asks /frontend/settings first; aiayn's own API on the same path, routed by its fields
    settings = _send(two, "/frontend/settings", method="GET")[2]
    assert settings["keyRequired"] is False and settings["language"]["source"] == {"code": "de", "name": "German"}
    assert two.post("/translate", {"text": GERMAN, "source": "de", "target": "en"})[2] == {"translations": want,
                                                                                          "confidence": sure}
    copies = copy_lines(2)
    assert two.post("/translate", {"text": copies, "target": "de"})[2]["translations"] == \
        oracles["en-de"].translate(copies)


def test_html_in_both_apis(two: Server, oracles: dict[str, Translator]) -> None:
    """Mastodon and Weblate send HTML (format html, q a list): the markup comes back around the translated words,
    as Translator.translate_html gives it; aiayn's own API takes format html too."""
    frags = ["<p>a <b>b</b> c d</p>", "j i <a href='/x'>h</a> g", "<p>e f g h</p><p><i>a b c d</i></p>"]
    want = oracles["en-de"].translate_html(frags)
    assert "<b>" in want[0] and '<a href="/x">' in want[1] and "<i>" in want[2]
    status, _, got = two.post("/translate", {"q": frags, "source": "en", "target": "de", "format": "html"})
    sure = [round(ts[0].confidence, 4)
            for ts in translate(oracles["en-de"].engine, Request(frags, format="html")).translations]
    assert status == 200 and got == {"translatedText": want, "confidence": sure}, got
    status, headers, got = two.post("/translate", {"text": frags, "target": "de", "format": "html"})
    assert status == 200 and got == {"translations": want, "confidence": sure}, got
    assert headers["access-control-allow-origin"] == "*"                      # CORS on answers (serve.Guard)
    status, _, got = two.post("/translate", {"text": frags, "target": "de", "format": "html", "nbest": 2, "beam": 2})
    assert status == 422 and "format html gives one translation" in got["error"]


def test_errors_in_libretranslates_shapes(two: Server) -> None:
    def error(status: int, *args: Any, **kw: Any) -> str:
        got, headers, body = (two.post(*args) if not kw else _send(two, *args, **kw))
        assert got == status and set(body) == {"error"}, (got, body)
        assert headers["access-control-allow-origin"] == "*"                  # CORS on errors too
        return str(body["error"])

    assert error(400, "/translate", {"q": "Hallo", "target": "en"}) == "Invalid request: missing source parameter"
    assert error(400, "/translate", {"source": "de", "target": "en"}) == "Invalid request: missing q parameter"
    assert error(400, "/translate", {"q": "Hallo", "source": "zz", "target": "en"}).startswith("zz is not supported")
    assert "de-en, en-de" in error(400, "/translate", {"q": "Hallo", "source": "de", "target": "de"})
    assert "format" in error(400, "/translate", {"q": "Hallo", "source": "de", "target": "en", "format": "pdf"})
    assert "html" in error(400, "/translate", {"q": "<b>Hallo</b>", "source": "de", "target": "en", "format": "html",
                                               "alternatives": 1})
    assert "alternatives" in error(400, "/translate", {"q": "Hallo", "source": "de", "target": "en",
                                                      "alternatives": "many"})
    assert "exceeds text limit" in error(400, "/translate", {"q": ["a"] * 33, "source": "de", "target": "en"})
    assert "Invalid request: malformed JSON" in error(400, "/translate", b"[1, 2]", ctype="application/json",
                                                      query={"q": "x"})
    assert error(400, "/translate_file", {"q": "x"}) == "Invalid request: missing file parameter"   # (test_documents)
    assert error(403, "/suggest", {"q": "x"}) == "Suggestions are disabled on this server."   # (no --suggestions)
    # aiayn's own API: several models and no pair named is a 400 naming the pairs
    assert "de-en, en-de" in error(400, "/translate", {"text": ["Hallo"]})
    status, headers, _ = _send(two, "/translate", method="OPTIONS")                 # a browser's CORS preflight
    assert status == 204 and "POST" in headers["access-control-allow-methods"]


def test_info_and_metrics_list_every_model(two: Server) -> None:
    _, _, info = two.request("GET", "/info")
    assert [(m["name"], m["source"], m["target"]) for m in info["models"]] == [("de-en", "de", "en"),
                                                                            ("en-de", "en", "de")]
    assert all(m["memory_bytes"] > m["parameters"] * 3 for m in info["models"])     # fp32 weights at least
    _, _, text = two.request("GET", "/metrics")
    for name in ("de-en", "en-de"):
        assert f'aiayn_model_bytes{{model="{name}"}}' in text.decode()
        assert f'aiayn_decoding_steps_total{{model="{name}"}}' in text.decode()


def test_the_api_key_and_the_request_limit_in_both_apis() -> None:
    s = Server("--api-key", KEY, "--req-limit", "4", model=LEGACY)
    try:
        lt = lt_client.LibreTranslateAPI(f"http://127.0.0.1:{s.port}", api_key="wrong")
        assert lt.languages()[0]["code"] == "de"                         # /languages asks for no key
        q = {"q": "Hallo", "source": "de", "target": "en"}
        assert s.post("/translate", q)[0] == 400                           # required, missing
        assert s.post("/translate", {**q, "api_key": ""})[0] == 400        # empty counts as missing
        assert s.post("/translate", {**q, "api_key": "wrong"})[0] == 403
        assert s.post("/detect", {"q": "Hallo", "api_key": "wrong"})[0] == 403
        assert s.post("/translate", {"text": ["Hallo"]})[0] == 401        # aiayn's API: its header
        assert s.post("/translate", {**q, "api_key": KEY})[0] == 200       # 1 (the limit counts accepted keys)
        assert s.post("/translate", {"text": ["Hallo"]}, KEY)[0] == 200    # 2: one client, by its key, in both APIs
        assert s.post("/detect", {"q": "Hallo", "api_key": KEY})[0] == 200  # 3
        assert s.post("/translate", {**q, "api_key": KEY})[0] == 200       # 4
        status, _, body = s.post("/translate", {**q, "api_key": KEY})
        assert status == 429 and body["error"].startswith("Slowdown:")
        assert s.post("/translate", {"text": ["Hallo"]}, KEY)[0] == 429
    finally:
        assert s.stop() == 0


def test_routing_by_language_pair(en_de: Path) -> None:
    models = Models([Served.load(LEGACY, device="cpu"), Served.load(en_de, device="cpu")])
    assert models.route("de", None).name == "de-en" and models.route(None, "de").name == "en-de"
    assert models.route("EN", "de").name == "en-de"
    for source, target, says in (("fr", "en", "fr is not supported"), ("de", "de", "no model translates de into de"),
                                 (None, None, "several models are loaded (de-en, en-de)")):
        with pytest.raises(ServiceError) as e:
            models.route(source, target)
        assert e.value.status == 400 and says in e.value.message
    with pytest.raises(ValueError, match="two models for de-en"):
        Models([Served.load(LEGACY, device="cpu"), Served.load(LEGACY, device="cpu")])


def test_a_directory_of_run_dirs_serves_each(en_de: Path, tmp_path: Path) -> None:
    shutil.copytree(LEGACY, tmp_path / "de-en")
    shutil.copytree(en_de, tmp_path / "en-de")
    (tmp_path / "notes").mkdir()                                   # not a run dir: passed over
    assert [m.name for m in Models.load([tmp_path], device="cpu")] == ["de-en", "en-de"]
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        Models.load([tmp_path / "notes"], device="cpu")


def test_forms_in_plain_utf8_are_read_as_utf8_as_libretranslate_reads_them(two: Server,
                                                                             oracles: dict[str, Translator]) -> None:
    """``curl -d 'q=Ein Mädchen ...'`` sends the text's UTF-8 bytes unescaped: the same text as percent-encoded."""
    text = "Ein Mädchen spielt Geige auf der Straße."
    want = oracles["de-en"].translate([text])[0]
    raw = f"q={text}&source=de&target=en".encode()                           # (as curl -d sends it)
    escaped = urllib.parse.urlencode({"q": text, "source": "de", "target": "en"}).encode()
    for body in (raw, escaped):
        for ctype in ("application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=utf-8",
                      "application/x-www-form-urlencoded; charset=UTF-8"):
            assert _send(two, "/translate", body, ctype)[2]["translatedText"] == want, (body, ctype)
    # a form that declares another charset is read in it; multipart fields are UTF-8 too
    latin = f"q={text}&source=de&target=en".encode("latin-1")
    assert _send(two, "/translate", latin, "application/x-www-form-urlencoded; charset=iso-8859-1")[2][
        "translatedText"] == want
    body, headers = multipart({"q": text, "source": "de", "target": "en"})
    assert _send(two, "/translate", body, headers["Content-Type"])[2]["translatedText"] == want
    assert _send(two, "/translate", raw, "application/x-www-form-urlencoded; charset=nonsense")[0] == 400


def test_detect_puts_the_languages_served_first_where_the_detector_is_unsure(two: Server) -> None:
    """On "Ein Hund." py3langid's best guess is Faroese (12.7 against German's 12.3); this server serves German."""
    from aiayn.serving.api import Detector

    assert Detector().rank("Ein Hund.")[0]["language"] != "de"                 # the detector alone
    assert _send(two, "/detect", query={"q": "Ein Hund."})[2][0]["language"] == "de"
    status, _, got = _send(two, "/translate", urllib.parse.urlencode({"q": "Ein Hund.", "source": "auto",
                                                                       "target": "en"}).encode(),
                           "application/x-www-form-urlencoded")
    assert status == 200 and got["detectedLanguage"]["language"] == "de"
    # sure of another language, it says so: a French sentence stays French
    assert _send(two, "/detect", query={"q": "Un homme fait du vélo sur un pont au bord de la mer."})[2][0][
        "language"] == "fr"
