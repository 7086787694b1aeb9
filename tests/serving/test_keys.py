"""API keys in a database, each with its own limits (serving/middleware.py, database.py, ``aiayn keys``), characters counted
per request, ``POST /suggest`` and ``aiayn suggestions export``, and ``/detect`` among every language: against a real
``aiayn serve`` on 127.0.0.1."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiayn.cli.main import main
from tests.helpers import Server, cli_error

pytest.importorskip("sqlalchemy")


def add_key(db: Path, *flags: str) -> str:
    """``aiayn keys add``'s key: printed once, on stdout, alone."""
    out = subprocess.run([sys.executable, "-m", "aiayn", "keys", "--db", str(db), "add", *flags], check=True,
                         capture_output=True, text=True)
    assert out.stdout.count("\n") == 1 and "added" in out.stderr and out.stdout.strip() not in out.stderr
    return out.stdout.strip()


def lt(s: Server, key: str | None, q: Any = "Ein Hund.", headers: dict[str, str] | None = None,
       **fields: Any) -> tuple[int, Any]:
    """LibreTranslate's POST /translate with ``key`` as its api_key field."""
    import json

    body = {"q": q, "source": "de", "target": "en", **({"api_key": key} if key else {}), **fields}
    got, _, answer = s.request("POST", "/translate", json.dumps(body).encode(),
                               {"Content-Type": "application/json", **(headers or {})})
    return got, answer


def test_keys_are_stored_hashed_and_managed_from_the_command_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "keys.db"
    assert main(["keys", "--db", str(db), "add", "--name", "team", "--req-limit", "5", "--daily-chars", "100"]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("aiayn_") and len(key) > 40
    raw = db.read_bytes()
    assert key.encode() not in raw and key[10:].encode() not in raw           # only its hash (and first characters)
    assert main(["keys", "--db", str(db), "list"]) == 0
    listed = capsys.readouterr().out
    assert "team" in listed and "5 requests/minute" in listed and key not in listed and key[:10] in listed
    assert main(["keys", "--db", str(db), "remove", key]) == 0                # by the key itself, or by its id
    assert main(["keys", "--db", str(db), "remove", "1"]) == 2
    assert "no key '1'" in cli_error(capsys.readouterr().err, "keys")
    assert main(["keys", "--db", str(db), "add", "--req-limit", "0"]) == 2
    assert "req_limit must be at least 1" in cli_error(capsys.readouterr().err, "keys")
    assert main(["keys", "--db", str(db), "add", "--origin", "example.org"]) == 2
    assert "expected a web origin" in cli_error(capsys.readouterr().err, "keys")
    assert main(["keys", "--db", str(tmp_path / "no" / "k.db"), "list"]) == 2
    assert "no folder" in cli_error(capsys.readouterr().err, "keys")
    assert main(["keys", "--db", "nosuch://x", "list"]) == 2
    assert "not a database URL" in cli_error(capsys.readouterr().err, "keys")


def test_each_key_has_its_own_limits_and_no_key_is_ever_logged(tmp_path: Path) -> None:
    db = tmp_path / "keys.db"
    fast = add_key(db, "--name", "fast", "--req-limit", "3")
    other = add_key(db, "--name", "other", "--req-limit", "3")
    short = add_key(db, "--char-limit", "20")
    daily = add_key(db, "--daily-chars", "30")
    page = add_key(db, "--origin", "https://example.org")
    s = Server("--no-processes", "--api-keys", str(db), "--suggestions", str(db), "--req-limit", "100",
               "--max-chars", "6000")
    try:
        assert lt(s, None)[0] == 400 and lt(s, "aiayn_made-up")[0] == 403          # LibreTranslate's codes
        assert s.post("/translate", {"text": ["Hund"]})[0] == 401                    # aiayn's
        assert s.post("/translate", {"text": ["Hund"]}, "aiayn_made-up")[0] == 401
        assert s.request("GET", "/info", headers={"X-API-Key": fast})[0] == 200      # a database key opens every path
        assert s.request("GET", "/info")[0] == 401
        # requests per minute: the key's own, counted per key (another key's budget is its own)
        assert [lt(s, fast)[0] for _ in range(4)] == [200, 200, 200, 429]
        assert s.post("/translate", {"text": ["Hund"]}, fast)[0] == 429              # both APIs count together
        assert lt(s, other)[0] == 200
        # characters per request: all of a request's texts together, in both APIs' words
        assert lt(s, short, "Ein Hund läuft.")[0] == 200
        got, answer = lt(s, short, ["Ein Hund.", "Eine Katze läuft."])              # 9 + 17 = 26 > 20
        assert got == 400 and "26 characters" in answer["error"] and "(20 characters)" in answer["error"]
        got, _, answer = s.post("/translate", {"text": ["Ein Hund.", "Eine Katze läuft."]}, short)
        assert got == 413 and "26 characters in one request; at most 20" in answer["error"]
        # characters per day: spent request by request, refused once the next would pass them
        assert lt(s, daily, "Ein Hund läuft.")[0] == 200                             # 15
        assert lt(s, daily, "Zwei Hunde.")[0] == 200                                 # 26
        got, answer = lt(s, daily, "Ein Mann.")                                      # 35 > 30
        assert got == 429 and "30 characters for today" in answer["error"]
        assert lt(s, daily, "Hund")[0] == 200                                        # 30: exactly the budget
        # an origin: a browser page of another site cannot use the key
        assert lt(s, page, headers={"Origin": "https://example.org"})[0] == 200
        got, answer = lt(s, page, headers={"Origin": "https://evil.example"})
        assert got == 403 and "https://example.org" in answer["error"]
        assert lt(s, page)[0] == 403                                                 # (no Origin: not its page)
        # a long pasted text: one line of 5,000 characters, translated sentence by sentence
        got, answer = lt(s, other, "Ein Hund läuft über die Wiese. " * 160)
        assert got == 200 and len(answer["translatedText"]) > 1000, answer
        _, _, settings = s.request("GET", "/frontend/settings")
        assert settings["apiKeys"] and settings["keyRequired"] and settings["charLimit"] == 6000
        assert settings["suggestions"] is True
        for key in (fast, other, short, daily, page):
            assert key not in s.output() and key[6:20] not in s.output()
    finally:
        assert s.stop() == 0
    for key in (fast, other, short, daily, page):
        assert key not in s.output()


def test_documents_are_charged_to_a_keys_characters_of_the_day(tmp_path: Path) -> None:
    from tests.documents.test_door import upload

    db = tmp_path / "keys.db"
    small, ample = add_key(db, "--daily-chars", "40"), add_key(db, "--daily-chars", "1000")
    s = Server("--no-processes", "--api-keys", str(db))
    try:
        text = "Ein Hund läuft.\nZwei Katzen schlafen.\nEin Mann fährt Fahrrad.\n".encode()   # 59 characters
        got, answer = upload(s, "note.txt", text, source="de", target="en", api_key=small)
        assert got == 429 and "40 characters for today" in answer["error"]
        assert upload(s, "note.txt", text, source="de", target="en", api_key=ample)[0] == 200
        assert lt(s, ample, "Hund " * 188 + "xy")[0] == 429                  # 942: 59 of its 1,000 went to the document
        assert lt(s, ample, "Hund " * 188 + "x")[0] == 200                   # 941: the rest
    finally:
        assert s.stop() == 0


def test_a_removed_key_stops_working_within_the_ttl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """middleware.Access remembers a key's row --keys-ttl seconds, then reads the database again."""
    from aiayn.serving import middleware as access_module
    from aiayn.serving.database import Database
    from aiayn.serving.middleware import Access, ServiceError
    from aiayn.serving.serve import ServeConfig
    from aiayn.serving.shared import Local

    class Request:
        headers: dict[str, str] = {}
        client = None

    now = [100.0]
    monkeypatch.setattr(access_module.time, "monotonic", lambda: now[0])
    db = Database(tmp_path / "k.db")
    key, row = db.add_key("x")
    a = Access(ServeConfig(keys_ttl=3.0), Local(), db)

    async def who() -> str:
        return (await a.identify(Request(), key, True)).name

    assert asyncio.run(who()) == f"key {row.uid}"
    db.remove_key(str(row.id))
    assert asyncio.run(who()) == f"key {row.uid}"                      # remembered
    now[0] += 2                                                    # within its 3 s
    assert asyncio.run(who()) == f"key {row.uid}"
    now[0] += 2
    with pytest.raises(ServiceError) as e:
        asyncio.run(who())
    assert e.value.status == 403


def test_keys_optional_serves_requests_without_a_key_under_the_servers_limits(tmp_path: Path) -> None:
    db = tmp_path / "keys.db"
    key = add_key(db, "--req-limit", "5")
    s = Server("--no-processes", "--api-keys", str(db), "--keys-optional", "--req-limit", "2")
    try:
        assert [lt(s, None)[0] for _ in range(3)] == [200, 200, 429]              # an address, under --req-limit
        assert [lt(s, key)[0] for _ in range(3)] == [200, 200, 200]                # a key, under its own
        assert lt(s, "aiayn_made-up")[0] == 403                                    # a wrong key is still wrong
        _, _, settings = s.request("GET", "/frontend/settings")
        assert settings["apiKeys"] and not settings["keyRequired"]
    finally:
        assert s.stop() == 0


def test_suggestions_are_stored_with_their_key_and_exported_as_a_corpus(tmp_path: Path) -> None:
    db = tmp_path / "aiayn.db"
    key = add_key(db, "--name", "editor")
    s = Server("--no-processes", "--api-keys", str(db), "--suggestions", str(db))
    try:
        def suggest(**f: str) -> tuple[int, Any]:
            from urllib.parse import urlencode

            got, _, answer = s.request("POST", "/suggest", urlencode(f).encode(),
                                       {"Content-Type": "application/x-www-form-urlencoded"})
            return got, answer

        assert suggest(q="Ein Hund.", s="A dog.", source="de", target="en", api_key=key) == (200, {"success": True})
        assert suggest(q="Ein Hund.", s="One dog.", source="de", target="en", api_key=key)[0] == 200   # (the later)
        assert suggest(q="Zwei Zeilen\nhier", s="Two lines\nhere", source="de", target="en", api_key=key)[0] == 200
        assert suggest(q="Ein Hund.", s="A dog.", source="de", target="en")[0] == 400                   # no key
        got, answer = suggest(q="Ein Hund.", source="de", target="en", api_key=key)
        assert got == 400 and answer["error"] == "Invalid request: missing s parameter"
        got, answer = suggest(q="Ein Hund.", s="A dog.", source="fr", target="en", api_key=key)
        assert got == 400 and "no model translates fr to en" in answer["error"]
    finally:
        assert s.stop() == 0
    rows = sqlite3.connect(db).execute("SELECT q, s, source, target, key_id FROM suggestions").fetchall()
    assert rows[0] == ("Ein Hund.", "A dog.", "de", "en", 1) and len(rows) == 3
    assert main(["suggestions", "--db", str(db), "export", "--out", str(tmp_path / "out")]) == 0
    folder = tmp_path / "out" / "de-en"
    assert (folder / "train.de").read_text() == "Ein Hund.\nZwei Zeilen\nhier\n"
    assert (folder / "train.en").read_text() == "One dog.\nTwo lines\nhere\n"
    assert main(["prepare", "--train", str(folder / "train"), "--valid", str(folder / "train"), "--src", "de",
                 "--tgt", "en", "--vocab-from", str(Path(__file__).parents[1] / "fixtures" / "legacy-f06e6aa" / "run"),
                 "--out", str(tmp_path / "data")]) == 0                            # what aiayn prepare reads


def test_detect_answers_among_every_language_and_auto_refuses_a_source_no_model_takes() -> None:
    s = Server("--no-processes")
    try:
        def post(path: str, **f: Any) -> tuple[int, Any]:
            got, _, answer = s.post(path, f)
            return got, answer

        english = "The quick brown fox jumps over the lazy dog while the children watch from the window."
        got, answer = post("/detect", q=english)
        assert got == 200 and answer[0]["language"] == "en" and len(answer) == 3    # not "de", the one served source
        assert post("/detect", q="Ein Mann fährt mit seinem Fahrrad über die Brücke in der Stadt.")[1][0]["language"] == "de"
        got, answer = post("/translate", q=english, source="auto", target="en")
        assert got == 400 and "English (en" in answer["error"] and "no model translates it to en" in answer["error"]
        got, answer = post("/translate", q="Ein Mann fährt mit seinem Fahrrad über die Brücke.", source="auto",
                           target="en")
        assert got == 200 and answer["detectedLanguage"]["language"] == "de"
    finally:
        assert s.stop() == 0
