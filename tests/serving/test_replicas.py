"""Many replicas, one service: two ``aiayn serve`` behind a real load balancer (nginx, round robin) on 127.0.0.1,
their limits and translations shared through a real ``redis-server`` (serving/shared.py), which is stopped and started
again mid-run. ``make services`` installs both (Debian: redis-server, nginx); without them the tests skip and say
so (under CI they fail)."""

from __future__ import annotations

import http.client
import json
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Server, free_port, spawn, wait_for
from tests.serving.test_keys import add_key

pytest.importorskip("redis")
pytest.importorskip("sqlalchemy")


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[tuple[Redis, list[Server], Nginx, Path]]:
    """Redis, two replicas sharing it and one database of keys, nginx in front of both."""
    redis, db = Redis(), tmp_path / "keys.db"
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
    redis.stop()
    statuses = [nginx.post("/translate", q)[0] for _ in range(12)]
    assert not any(s >= 500 for s in statuses), statuses
    assert statuses.count(200) == 8 and statuses.count(429) == 4, statuses   # 4 per replica: each counts its own
    for r in (a, b):
        assert r.metric("aiayn_shared_storage_up", key) == 0 and r.metric("aiayn_shared_storage_errors_total", key) >= 1
        assert "shared storage redis://127.0.0.1" in r.output() and "unreachable" in r.output()
        assert key not in r.output()
    back = Redis(redis.port)                                          # Redis again, on the same port
    try:
        for r in (a, b):                                              # /metrics asks Redis again (every 2 s at most)
            wait_for(lambda r=r: r.metric("aiayn_shared_storage_up", key) == 1, "a replica to find Redis again",
                     timeout=20, every=0.5)
            assert "answers again" in r.output()
        fresh_key = add_key(db, "--req-limit", "3")
        q2 = {**q, "api_key": fresh_key}
        assert [nginx.post("/translate", q2)[0] for _ in range(5)] == [200, 200, 200, 429, 429]   # one limit again
    finally:
        back.stop()
        redis.proc = back.proc
