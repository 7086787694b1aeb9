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


class Redis:
    """``redis-server`` on a free port of 127.0.0.1, nothing saved to disk, bounded by maxmemory (LRU)."""

    def __init__(self, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("no redis-server: `make services` installs it (Debian: redis-server)")
        self.port = port or free_port()
        self.proc = spawn([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                           "no", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        client = redis.Redis(port=self.port, socket_timeout=1)
        wait_for(lambda: self._pong(client), "redis-server to answer", timeout=20, every=0.05)

    @staticmethod
    def _pong(client: Any) -> bool:
        try:
            return bool(client.ping())
        except Exception:  # noqa: BLE001 - not up yet
            return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGKILL)            # gone at once, as a crashed or unplugged Redis is
        self.proc.wait()


class Nginx:
    """nginx on a free port of 127.0.0.1, sending requests to ``ports`` in turn (round robin)."""

    def __init__(self, ports: list[int]) -> None:
        binary = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).is_file()), None)
        if binary is None:
            pytest.skip("no nginx: `make services` installs it (Debian: nginx)")
        self.port, self.dir = free_port(), Path(tempfile.mkdtemp(prefix="aiayn-nginx-"))
        servers = "".join(f"server 127.0.0.1:{p};" for p in ports)
        temp = " ".join(f"{k}_temp_path {self.dir}/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (self.dir / "nginx.conf").write_text(
            f"daemon off; worker_processes 1; pid {self.dir}/nginx.pid; error_log {self.dir}/error.log;\n"
            f"events {{ worker_connections 256; }}\n"
            f"http {{ access_log off; {temp} upstream aiayn {{ {servers} }}\n"
            # (bodies and answers kept in memory: run as root, nginx's workers could not write its temp folders)
            f"  server {{ listen 127.0.0.1:{self.port}; client_max_body_size 2m; client_body_buffer_size 2m;\n"
            f"    proxy_buffering off; proxy_read_timeout 300s;\n"
            f"    location / {{ proxy_pass http://aiayn; proxy_set_header X-Forwarded-For $remote_addr; }} }} }}\n")
        self.proc = spawn([binary, "-e", str(self.dir / "error.log"), "-p", str(self.dir), "-c",
                           str(self.dir / "nginx.conf")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._up, "nginx to listen", timeout=20, every=0.05)

    def _up(self) -> bool:
        try:
            return self.post("/languages", None, method="GET")[0] == 200
        except OSError:
            return False

    def post(self, path: str, body: Any, method: str = "POST") -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, json.dumps(body).encode() if body is not None else None,
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGQUIT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


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
