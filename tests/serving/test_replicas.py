"""Many replicas, one service: two ``aiayn serve`` behind a real load balancer (nginx, round robin) on 127.0.0.1,
their limits and translations shared through a real ``redis-server`` (serving/shared.py), which is stopped and started
again mid-run. ``make services`` installs both (Debian: redis-server, nginx); without them the tests skip and say
so (under CI they fail)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Server, multipart, wait_for
from tests.serving.services import Nginx, Redis
from tests.serving.test_keys import add_key

pytest.importorskip("redis")
pytest.importorskip("sqlalchemy")


@pytest.fixture(scope="module")
def _service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Redis, list[Server], Nginx, Path]]:
    """Redis, two replicas sharing it and one database of keys, nginx in front of both: started once for this file's
    tests that use them (each adds keys of its own; one that stops Redis starts it again; the rolling restart leaves
    its replicas started in the list)."""
    redis, db = Redis(), tmp_path_factory.mktemp("replicas") / "keys.db"
    add_key(db, "--name", "warm-up")                              # (the database made before both replicas open it)
    replicas: list[Server] = []
    nginx = None
    try:
        for _ in range(2):
            replicas.append(Server("--no-processes", "--api-keys", str(db), "--shared-storage", redis.url))
        nginx = Nginx([r.port for r in replicas])
        yield redis, replicas, nginx, db
    finally:
        if nginx is not None:
            nginx.stop()
        for r in replicas:
            assert r.stop() == 0
        redis.stop()


@pytest.fixture()
def service(_service: tuple[Redis, list[Server], Nginx, Path]) -> tuple[Redis, list[Server], Nginx, Path]:
    """The file's service, its Redis started again where a test before this one failed with it stopped."""
    redis = _service[0]
    if redis.proc.poll() is not None:
        redis.proc = Redis(redis.port).proc
    return _service


def test_two_replicas_enforce_one_limit_and_share_one_cache_through_redis(service: Any) -> None:
    redis, (a, b), nginx, db = service
    key = add_key(db, "--name", "ten", "--req-limit", "10")
    q = {"q": "Ein Hund läuft.", "source": "de", "target": "en", "api_key": key}
    statuses = [nginx.post("/translate", q)[0] for _ in range(14)]
    assert statuses == [200] * 10 + [429] * 4, statuses              # exactly 10, across both
    served = [r.metric("aiayn_requests_total", key) for r in (a, b)]
    assert all(n >= 5 for n in served), served                        # (each replica answered its share)
    # a sentence translated by one replica is a cache hit on the other
    other = add_key(db, "--name", "cache")
    fresh = {"q": "Zwei Katzen schlafen auf dem Sofa.", "source": "de", "target": "en", "api_key": other}
    before = b.metric("aiayn_cache_shared_hits_total", other)
    first = a.post("/translate", fresh)
    second = b.post("/translate", fresh)
    assert first[0] == second[0] == 200 and first[2]["translatedText"] == second[2]["translatedText"]
    assert b.metric("aiayn_cache_shared_hits_total", other) == before + 1
    assert a.metric("aiayn_shared_storage_up", other) == b.metric("aiayn_shared_storage_up", other) == 1


def test_redis_gone_degrades_to_local_limits_without_an_error_and_shares_again_when_back(service: Any) -> None:
    redis, (a, b), nginx, db = service
    key = add_key(db, "--name", "outage", "--req-limit", "4")
    q = {"q": "Ein Mann fährt Fahrrad.", "source": "de", "target": "en", "api_key": key}
    logged = [len(r.output()) for r in (a, b)]                       # (what they print from here on)
    redis.stop()
    statuses = [nginx.post("/translate", q)[0] for _ in range(12)]
    assert not any(s >= 500 for s in statuses), statuses
    assert statuses.count(200) == 8 and statuses.count(429) == 4, statuses   # 4 per replica: each counts its own
    for r, n in zip((a, b), logged, strict=True):
        assert r.metric("aiayn_shared_storage_up", key) == 0 and r.metric("aiayn_shared_storage_errors_total", key) >= 1
        assert "shared storage redis://127.0.0.1" in r.output()[n:] and "unreachable" in r.output()[n:]
        assert key not in r.output()
    redis.proc = Redis(redis.port).proc                               # Redis again, on the same port
    for r, n in zip((a, b), logged, strict=True):                     # /metrics asks Redis again (every 2 s at most)
        wait_for(lambda r=r: r.metric("aiayn_shared_storage_up", key) == 1, "a replica to find Redis again",
                 timeout=20, every=0.5)
        assert "answers again" in r.output()[n:]
    fresh_key = add_key(db, "--req-limit", "3")
    q2 = {**q, "api_key": fresh_key}
    assert [nginx.post("/translate", q2)[0] for _ in range(5)] == [200, 200, 200, 429, 429]   # one limit again


# --- files any replica serves, budgets nothing evicts, a rolling restart, a safe concurrent start -------------------


def upload_through(nginx: Nginx, key: str, name: str = "notes.txt") -> str:
    """A text file translated through the balancer: its download link."""
    body, headers = multipart({"source": "de", "target": "en", "api_key": key}, name,
                              "Ein Hund läuft.\n\nZwei Katzen schlafen.\n".encode())
    status, _, answer = nginx.request("POST", "/translate_file", body, headers)
    assert status == 200, answer
    return str(json.loads(answer)["translatedFileUrl"])


def test_a_translated_file_downloads_through_any_replica_at_the_address_the_client_used(service: Any) -> None:
    redis, (a, b), nginx, db = service
    key = add_key(db, "--name", "files")
    for _ in range(2):                                          # (one upload made by each replica)
        url = upload_through(nginx, key)
        base = f"http://127.0.0.1:{nginx.port}/download_file/"
        assert url.startswith(base), url                       # nginx's address, not its upstream's name
        got = [nginx.request("GET", url.removeprefix(f"http://127.0.0.1:{nginx.port}")) for _ in range(4)]
        assert [g[0] for g in got] == [200] * 4, [g[2][:200] for g in got]        # whichever replica answers
        assert len({g[2] for g in got}) == 1 and got[0][2].strip()
        assert all('filename="notes.txt"' in g[1]["content-disposition"] for g in got)


def test_a_shared_files_dir_and_a_public_url_serve_downloads_without_redis(tmp_path: Path) -> None:
    shared, db = tmp_path / "files", tmp_path / "keys.db"
    key = add_key(db, "--name", "dir")
    flags = ("--no-processes", "--api-keys", str(db), "--files-dir", str(shared), "--public-url",
             "https://translate.example.org/mt/")
    replicas = [Server(*flags), Server(*flags)]
    nginx = Nginx([r.port for r in replicas], forwarded=False)  # (the Host nginx sends by default: its upstream's)
    try:
        url = upload_through(nginx, key, "Bericht.txt")
        assert url.startswith("https://translate.example.org/mt/download_file/") and url.endswith(".Bericht.txt")
        path = url.removeprefix("https://translate.example.org/mt")
        assert [nginx.request("GET", path)[0] for _ in range(4)] == [200] * 4
        assert len(list(shared.iterdir())) == 1                  # kept once, where both replicas read it
    finally:
        nginx.stop()
        for r in replicas:
            assert r.stop() == 0
    assert list(shared.iterdir()), "a shared folder outlives one replica's shutdown"


def test_a_keys_budget_outlives_redis_and_is_never_inherited(service: Any) -> None:
    redis, (a, b), nginx, db = service
    key = add_key(db, "--name", "budget", "--daily-chars", "40")
    q = {"q": "Ein Hund läuft auf der Straße.", "source": "de", "target": "en", "api_key": key}  # 30 characters
    assert nginx.post("/translate", q)[0] == 200
    assert nginx.post("/translate", q)[0] == 429                 # 60 > 40
    redis.flush()                                              # evicted, or Redis restarted without saving
    assert [nginx.post("/translate", q)[0] for _ in range(4)] == [429] * 4
    redis.stop()                                               # Redis gone
    assert [nginx.post("/translate", q)[0] for _ in range(4)] == [429] * 4
    redis.proc = Redis(redis.port).proc
    # a removed key's row id is given again by SQLite: its successor starts with nothing spent
    import sqlite3

    ids = [r[0] for r in sqlite3.connect(db).execute("SELECT id FROM api_keys ORDER BY id")]
    subprocess_keys(db, "remove", str(ids[-1]))
    fresh = add_key(db, "--name", "successor", "--daily-chars", "40")
    assert [r[0] for r in sqlite3.connect(db).execute("SELECT id FROM api_keys ORDER BY id")][-1] == ids[-1]
    assert nginx.post("/translate", {**q, "api_key": fresh})[0] == 200


def subprocess_keys(db: Path, *args: str) -> None:
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "aiayn", "keys", "--db", str(db), *args], check=True, capture_output=True)


def test_two_keys_databases_sharing_one_redis_count_apart(tmp_path: Path) -> None:
    redis = Redis()
    first, second = tmp_path / "one.db", tmp_path / "two.db"
    keys = [add_key(d, "--req-limit", "2") for d in (first, second)]             # both row 1 of their database
    servers = [Server("--no-processes", "--api-keys", str(d), "--shared-storage", redis.url) for d in (first, second)]
    try:
        q = {"q": "Ein Hund läuft auf der Straße.", "source": "de", "target": "en"}
        for s, key in zip(servers, keys, strict=True):
            assert [s.post("/translate", {**q, "api_key": key})[0] for _ in range(3)] == [200, 200, 429]
    finally:
        for s in servers:
            assert s.stop() == 0
        redis.stop()


def test_a_rolling_restart_under_load_answers_every_request(service: Any) -> None:
    import threading

    redis, replicas, nginx, db = service
    key = add_key(db, "--name", "rolling")
    q = {"q": "Ein Mann fährt Fahrrad.", "source": "de", "target": "en", "api_key": key}
    statuses: list[int] = []
    errors: list[bytes] = []
    stop = threading.Event()

    def client() -> None:                                # (a request every 50 ms each: load, not a busy loop)
        while not stop.is_set():
            status, _, body = nginx.request("POST", "/translate", json.dumps(q).encode(),
                                            {"Content-Type": "application/json"})
            statuses.append(status)
            if status != 200:
                errors.append(body[:300])
            stop.wait(0.05)

    def uploader() -> None:                              # documents too (a replica told to stop answers them 503)
        body, headers = multipart({"source": "de", "target": "en", "api_key": key}, "notes.txt",
                                  "\n\n".join(["Ein Hund läuft über die Wiese."] * 40).encode())
        while not stop.is_set():
            status, _, answer = nginx.request("POST", "/translate_file", body, headers)
            statuses.append(status)
            if status != 200:
                errors.append(answer[:300])

    threads = [threading.Thread(target=client) for _ in range(3)] + [threading.Thread(target=uploader)]
    for t in threads:
        t.start()
    try:
        for i, r in enumerate(list(replicas)):                 # one at a time: SIGTERM, then started again
            flags = r.proc.args[r.proc.args.index("--port") + 2:]       # (its flags after its port)
            assert r.stop() == 0
            assert "Traceback" not in r.output()
            replicas[i] = Server(*flags, port=r.port)           # (it answers /health)
            time.sleep(4.5)                 # nginx tries it again (twice fail_timeout=2s, docs/deploy.md) before the next
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert len(statuses) > 20 and set(statuses) == {200}, (sorted(set(statuses)), errors[:3])


def test_replicas_started_at_once_on_a_fresh_model_convert_it_once_and_all_start(tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    import shutil

    from tests.helpers import LEGACY

    model = tmp_path / "run"
    shutil.copytree(LEGACY, model, ignore=shutil.ignore_patterns("engines"))
    started = [Server("--engine", "ctranslate2", "--no-processes", model=model, wait=False) for _ in range(3)]
    try:
        failed = []
        for s in started:
            try:
                s.wait_up(120)
            except RuntimeError as e:
                failed.append(str(e)[-600:])
        assert not failed, failed
        assert len(list((model / "engines" / "ctranslate2").glob("*/model.bin"))) == 1
    finally:
        for s in started:
            s.stop()


def test_a_shared_files_dir_expires_every_replicas_translations_by_age(tmp_path: Path) -> None:
    import os

    from aiayn.serving.files import expire

    old, new, other = (tmp_path / f"{c * 32}.report.txt" for c in "abc")
    for path in (old, new, other):
        path.write_text("x")
    other.rename(other := tmp_path / "notes.txt")                  # (not a translation: left alone)
    os.utime(old, (time.time() - 120, time.time() - 120))
    expire({}, 60, tmp_path)
    assert not old.exists() and new.exists() and other.exists()
