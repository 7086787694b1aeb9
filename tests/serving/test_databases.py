"""The keys and suggestions database as deployed (serving/database.py, middleware.py): a real PostgreSQL under the keys,
their budgets and the suggestions, PostgreSQL stopped under load and started again (a grace period, then 503, never
a 500 or a traceback), SQLite shared by two replicas and locked by another process, and a database made by an older
aiayn brought up to date. ``make services`` installs PostgreSQL (Debian: postgresql); without it those tests skip and
say so (under CI they fail)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from aiayn.serving.database import url_of
from tests.helpers import Server, wait_for
from tests.serving.services import Postgres

pytest.importorskip("sqlalchemy")


def keys(db: str | Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiayn", "keys", "--db", str(db), *args], capture_output=True,
                          text=True)


def add_key(db: str | Path, *flags: str) -> str:
    out = keys(db, "add", *flags)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def lt(s: Server, key: str | None, text: str = "Ein Hund läuft.") -> tuple[int, dict[str, str], Any]:
    body = {"q": text, "source": "de", "target": "en", **({"api_key": key} if key else {})}
    return s.request("POST", "/translate", json.dumps(body).encode(), {"Content-Type": "application/json"})


@pytest.fixture()
def postgres() -> Iterator[Postgres]:
    pytest.importorskip("psycopg", reason="the postgres extra: pip install 'aiayn[postgres]'")
    pg = Postgres()
    yield pg
    pg.close()


def test_postgresql_holds_the_keys_their_budgets_and_the_suggestions(postgres: Postgres, tmp_path: Path) -> None:
    url = postgres.url                                     # postgresql://... as PostgreSQL writes it
    assert url_of(url).startswith("postgresql+psycopg://")  # (the postgres extra's driver; SQLAlchemy 2.0's is psycopg2)
    key = add_key(url, "--name", "pg", "--daily-chars", "50")
    assert "pg" in keys(url, "list").stdout
    s = Server("--no-processes", "--api-keys", url, "--suggestions", url)
    try:
        assert lt(s, key, "Ein Hund läuft auf der Straße.")[0] == 200           # 30 characters
        assert lt(s, key, "Ein Hund läuft auf der Straße.")[0] == 429           # 60 > 50 (15 more fit)
        assert lt(s, "aiayn_not-a-key")[0] == 403
        got = s.request("POST", "/suggest", urlencode({"q": "Ein Hund.", "s": "A dog.", "source": "de", "target": "en",
                                                       "api_key": key}).encode(),
                        {"Content-Type": "application/x-www-form-urlencoded"})
        assert got[0] == 200, got
    finally:
        assert s.stop() == 0
    assert postgres.url.split("@")[1] not in s.output()         # (where the database is: not logged either)
    out = subprocess.run([sys.executable, "-m", "aiayn", "suggestions", "--db", url, "export", "--out",
                          str(tmp_path / "out")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "out" / "de-en").is_dir()
    # a URL whose driver is named, and one PostgreSQL cannot be reached at: one line each, no traceback
    named = url.replace("postgresql://", "postgresql+psycopg://")
    assert "pg" in keys(named, "list").stdout
    gone = keys("postgresql://aiayn@127.0.0.1:1/postgres", "list")
    assert gone.returncode == 2 and "Traceback" not in gone.stderr and "cannot open the database" in gone.stderr


def test_postgresql_stopped_under_load_is_a_grace_period_then_503_never_a_500(postgres: Postgres) -> None:
    url = postgres.url
    known, budgeted = add_key(url, "--name", "known"), add_key(url, "--name", "budgeted", "--daily-chars", "100000")
    stranger = add_key(url, "--name", "unseen")
    # a key's row trusted 3 s from memory, the grace 6 s (the defaults, 10 s and 300 s, only longer to wait out)
    s = Server("--no-processes", "--api-keys", url, "--suggestions", url, "--keys-ttl", "3", "--keys-grace", "6")
    statuses: list[int] = []
    charged = [2]                                        # the budgeted key's 200s, each 15 characters
    stop = threading.Event()

    def client(key: str) -> None:
        while not stop.is_set():
            got = lt(s, key)
            statuses.append(got[0])
            charged[0] += key == budgeted and got[0] == 200
            if got[0] == 503:
                assert got[1].get("retry-after"), got
            stop.wait(0.1)                               # (load, not a busy loop)

    try:
        assert lt(s, known)[0] == lt(s, budgeted)[0] == 200          # (seen: their rows remembered)
        assert lt(s, budgeted)[0] == 200
        threads = [threading.Thread(target=client, args=(k,)) for k in (known, budgeted)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        postgres.stop()
        outage = time.monotonic()
        wait_for(lambda: s.metric("aiayn_keys_database_up", known) == 0, "the server to notice", timeout=30, every=0.2)
        assert lt(s, known)[0] == 200                                # the grace period: from memory
        assert lt(s, budgeted)[0] == 200
        charged[0] += 1
        assert lt(s, stranger)[0] == 503                             # a key not seen: nothing to go by
        suggested = s.request("POST", "/suggest", urlencode({"q": "Ein Hund.", "s": "A dog.", "source": "de",
                                                             "target": "en", "api_key": known}).encode(),
                              {"Content-Type": "application/x-www-form-urlencoded"})
        assert suggested[0] == 503 and suggested[1].get("retry-after"), suggested        # (nowhere to keep it)
        time.sleep(max(0.0, outage + 3 + 0.5 - time.monotonic()))
        assert lt(s, known)[0] == 200                                # past its row's 3 s, within the grace
        wait_for(lambda: lt(s, known)[0] == 503, "the grace period to end", timeout=30, every=0.2)
        assert time.monotonic() - outage >= 5.5
        postgres.start()
        wait_for(lambda: lt(s, known)[0] == 200, "the database to be asked again", timeout=30, every=0.2)
        assert lt(s, stranger)[0] == 200
    finally:
        stop.set()
        for t in threads:
            t.join()
        assert s.stop() == 0
    assert not any(code >= 500 and code != 503 for code in statuses), sorted(set(statuses))
    assert 200 in statuses and 503 in statuses
    log = s.output()
    assert "Traceback" not in log and log.count("did not answer") == 1 and "answers again" in log, log[-3000:]
    assert known not in log and "Ein Hund" not in log
    # what the budgeted key spent while the database was away was written to it once it answered
    from aiayn.serving.database import Database

    pg = Database(url)
    uid = next(k.uid for k in pg.list_keys() if k.name == "budgeted")
    assert pg.spent(uid, time.strftime("%Y-%m-%d", time.gmtime())) == 15 * charged[0]


def test_two_replicas_on_one_sqlite_file_wait_for_each_other_and_for_another_writer(tmp_path: Path) -> None:
    db = tmp_path / "aiayn.db"
    key = add_key(db, "--name", "editor")
    replicas = [Server("--no-processes", "--api-keys", str(db), "--suggestions", str(db)) for _ in range(2)]
    statuses: list[int] = []

    def suggest(s: Server, i: int) -> None:
        body = urlencode({"q": f"Ein Hund über die Brücke {i}.", "s": f"A dog over the bridge {i}.", "source": "de",
                          "target": "en", "api_key": key}).encode()
        statuses.append(s.request("POST", "/suggest", body, {"Content-Type": "application/x-www-form-urlencoded"})[0])

    try:
        holder = sqlite3.connect(db, timeout=30)
        holder.execute("BEGIN IMMEDIATE")                   # another process writing, for longer than SQLite's 5 s
        holder.execute("INSERT INTO suggestions (q, s, source, target, created) VALUES ('x', 'y', 'de', 'en', 0)")
        threads = [threading.Thread(target=suggest, args=(replicas[i % 2], i)) for i in range(40)]
        for t in threads:
            t.start()
        time.sleep(6)
        holder.commit()
        holder.close()
        for t in threads:
            t.join()
    finally:
        for r in replicas:
            assert r.stop() == 0
    assert statuses == [200] * 40, statuses
    assert sqlite3.connect(db).execute("SELECT count(*) FROM suggestions").fetchone()[0] == 41
    for r in replicas:
        assert "Traceback" not in r.output() and "Brücke" not in r.output()


def test_a_database_that_does_not_answer_is_a_503_whose_log_carries_no_text(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from aiayn.serving import database

    monkeypatch.setattr(database, "BUSY_S", 0.3)
    db = database.Database(tmp_path / "s.db")
    holder = sqlite3.connect(tmp_path / "s.db")
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(database.Unavailable) as e:
        db.suggest("Ein geheimer Satz.", "A secret sentence.", "de", "en", None)
    holder.rollback()
    assert "geheimer" not in str(e.value) and "locked" in str(e.value)


def test_a_keys_database_of_an_older_aiayn_is_brought_up_to_date(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    old = sqlite3.connect(db)            # the table as aiayn made it before keys had a uid
    old.execute("CREATE TABLE api_keys (id INTEGER PRIMARY KEY, hash VARCHAR(64) NOT NULL UNIQUE, name VARCHAR(200), "
                "start VARCHAR(10), req_limit INTEGER, char_limit INTEGER, daily_chars BIGINT, origin VARCHAR(500), "
                "created FLOAT NOT NULL)")
    from aiayn.serving.database import Database, digest

    old.execute("INSERT INTO api_keys (hash, name, start, created) VALUES (?, 'old', 'aiayn_abcd', 0)",
                (digest("aiayn_abcdefgh"),))
    old.commit()
    old.close()
    row = Database(db).find("aiayn_abcdefgh")
    assert row is not None and row.name == "old" and len(row.uid) == 32
    assert Database(db).find("aiayn_abcdefgh").uid == row.uid                  # made once
