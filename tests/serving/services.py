"""The real services the replicas' tests run: ``redis-server``, nginx and PostgreSQL, each on a free port of
127.0.0.1, started and stopped by the test (``make services`` installs them: Debian's redis-server, nginx,
postgresql). Without one, the test that needs it skips and says so (under CI it fails)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import free_port, spawn, wait_for


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

    def flush(self) -> None:
        """Everything in it dropped (what eviction under memory pressure, or a restart without saving, does)."""
        import redis

        redis.Redis(port=self.port, socket_timeout=5).flushall()


# What docs/deploy.md's nginx passes on to the replicas: the client's address, and the address and scheme the client
# used (download links name them: serving/middleware.py, Forwarded)
FORWARDED = ("proxy_set_header X-Forwarded-For $remote_addr; proxy_set_header X-Forwarded-Host $http_host; "
             "proxy_set_header X-Forwarded-Proto $scheme;")
# ... and how it keeps a replica that stops (a rolling restart, a crash) from costing a client an error: a request
# that fails before an answer begins, or that a replica answers 503 (shutting down, its queue full), is sent to the
# other replica, even a POST (nginx retries only the idempotent methods by default; a translation is safe to send
# again), and a replica that failed is passed over for 2 s only
RETRY = "proxy_next_upstream error timeout http_503 non_idempotent; proxy_next_upstream_tries 3;"
FAILS = "max_fails=1 fail_timeout=2s"


class Nginx:
    """nginx on a free port of 127.0.0.1, sending requests to ``ports`` in turn (round robin), with docs/deploy.md's
    headers (``forwarded``; else the client's address only)."""

    def __init__(self, ports: list[int], forwarded: bool = True) -> None:
        binary = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).is_file()), None)
        if binary is None:
            pytest.skip("no nginx: `make services` installs it (Debian: nginx)")
        self.port, self.dir = free_port(), Path(tempfile.mkdtemp(prefix="aiayn-nginx-"))
        servers = "".join(f"server 127.0.0.1:{p} {FAILS};" for p in ports)
        temp = " ".join(f"{k}_temp_path {self.dir}/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (self.dir / "nginx.conf").write_text(
            f"daemon off; worker_processes 1; pid {self.dir}/nginx.pid; error_log {self.dir}/error.log;\n"
            f"events {{ worker_connections 256; }}\n"
            f"http {{ access_log off; {temp} upstream aiayn {{ {servers} }}\n"
            # (bodies and answers kept in memory: run as root, nginx's workers could not write its temp folders)
            f"  server {{ listen 127.0.0.1:{self.port}; client_max_body_size 2m; client_body_buffer_size 2m;\n"
            f"    proxy_buffering off; proxy_read_timeout 300s;\n"
            f"    location / {{ proxy_pass http://aiayn; {RETRY} "
            f"{FORWARDED if forwarded else 'proxy_set_header X-Forwarded-For $remote_addr;'} }} }} }}\n")
        self.proc = spawn([binary, "-e", str(self.dir / "error.log"), "-p", str(self.dir), "-c",
                           str(self.dir / "nginx.conf")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._up, "nginx to listen", timeout=20, every=0.05)

    def _up(self) -> bool:
        try:
            return self.post("/languages", None, method="GET")[0] == 200
        except OSError:
            return False

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """Any request: its status, headers and body as bytes."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request(method, path, body, headers or {})
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

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


def _postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (Debian keeps them out of PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    if found:
        return found[-1].parent
    which = shutil.which("pg_ctl")
    return Path(which).parent if which else None


class Postgres:
    """A PostgreSQL server of its own (initdb in a temporary folder, trust for local connections, no fsync), on a
    free port of 127.0.0.1; run as the ``postgres`` user when the tests run as root (PostgreSQL refuses root).
    :meth:`stop` and :meth:`start` stop it and start it again on the same data."""

    def __init__(self) -> None:
        bindir = _postgres_bin()
        if bindir is None:
            pytest.skip("no PostgreSQL: `make services` installs it (Debian: postgresql)")
        self.bin, self.port = bindir, free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="aiayn-pg-"))
        self.as_user: dict[str, Any] = {}
        if os.geteuid() == 0:
            import pwd

            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and there is no postgres user to run PostgreSQL as")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            # (the process itself as that user, so that the signals the tests send reach it)
            self.as_user = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        subprocess.run([str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-A", "trust", "-U", "aiayn",
                        "--no-sync", "-E", "UTF8"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       cwd=self.dir, **self.as_user)
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql://aiayn@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self.proc = spawn([str(self.bin / "postgres"), "-D", str(self.dir / "data"), "-p", str(self.port), "-k",
                           str(self.dir), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c",
                           "max_connections=200"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.dir,
                          **self.as_user)
        wait_for(self._up, "PostgreSQL to accept connections", timeout=30, every=0.1)

    def _up(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
        except OSError:
            return False
        import psycopg

        try:
            with psycopg.connect(f"host=127.0.0.1 port={self.port} user=aiayn dbname=postgres", connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        """Stopped at once (a fast shutdown: its connections are cut), as a database taken down under load is."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
