"""Five minutes of chaos under a deployment for many users (docs/deploy.md, "Many users on many machines"): two
``aiayn serve`` replicas of a trained model behind nginx (docs/deploy.md's settings), one ``redis-server``
(``allkeys-lru``, nothing saved), the keys in a real PostgreSQL, translated files in a folder both replicas share,
and 8 clients, each with its own key (two of them with a budget of characters a day), sending LibreTranslate's
``/translate`` (JSON, and forms in plain UTF-8) and ``/translate_file`` uploads whose links they download through
nginx at once. Meanwhile, on a timeline:

- Redis is killed, and started again 20 s later;
- PostgreSQL is stopped, and started again 20 s later (within ``--keys-grace``);
- replica A is killed with SIGKILL, and started again;
- both replicas are restarted one after the other with SIGTERM (a rolling restart: each started again, answering
  ``/health``, and twice nginx's ``fail_timeout`` waited, before the next);
- Redis is killed and started again once more.

Measured: every answer's status (a 5xx counts as the killed replica's only if its request was in flight when it
was killed), each budgeted key's characters as the database has them against its budget and against the characters
of the requests answered 200, every uploaded file downloaded again through nginx at the end, each replica's log
searched for "Traceback" and for every text sent, and each replica's resident memory every 5 s.

    python -m benchmarks chaos [--model runs/demo/run-de-en] [--seconds 300]

Needs redis-server, nginx and PostgreSQL (``make services``). Records benchmarks/results/chaos/chaos-<date>.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import record  # noqa: E402
from finetune_domain import corpus  # noqa: E402

CLIENTS = 8
BUDGETS = (170_000, 400_000)    # characters a day of the two budgeted keys (spent, at this pace, during the outage of
                                # the database and after it)


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


class Chaos:
    def __init__(self, model: Path, seconds: float) -> None:
        from tests.helpers import Server
        from tests.serving.services import Nginx, Postgres, Redis

        self.t0 = time.monotonic()
        self.seconds, self.model = seconds, model
        self.work = Path(tempfile.mkdtemp(prefix="aiayn-chaos-"))
        self.redis, self.pg = Redis(), Postgres()
        self.events: list[tuple[float, str]] = []
        self.answers: list[tuple[float, float, str, int, int]] = []    # start, end, what, status, client
        self.charged = [0] * CLIENTS                                    # characters of the 200s, per client
        self.files: list[str] = []                                      # download paths
        self.sent: set[str] = set()
        self.logs: list[tuple[str, str]] = []                           # (replica, what it printed)
        self.rss: list[tuple[float, str, float]] = []
        self.lock = threading.Lock()
        self.keys = [self._key(i) for i in range(CLIENTS)]
        self.flags = ("--engine", "ctranslate2", "--no-processes", "--api-keys", self.pg.url, "--shared-storage",
                      self.redis.url, "--files-dir", str(self.work / "files"), "--forwarded-allow-ips", "127.0.0.1")
        self.replicas = [Server(*self.flags, model=model), Server(*self.flags, model=model)]
        self.nginx = Nginx([r.port for r in self.replicas])
        self.Server, self.Redis = Server, Redis

    def _key(self, i: int) -> str:
        import subprocess

        flags = ["--daily-chars", str(BUDGETS[i - CLIENTS + 2])] if i >= CLIENTS - 2 else ["--req-limit", "6000"]
        out = subprocess.run([sys.executable, "-m", "aiayn", "keys", "--db", self.pg.url, "add", "--name",
                              f"client-{i}", *flags], check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    def event(self, what: str) -> None:
        self.events.append((self.now(), what))
        print(f"{self.now():7.1f} s  {what}", flush=True)

    # --- the clients ---------------------------------------------------------------------------------------------

    def client(self, i: int, lines: list[str], stop: threading.Event) -> None:
        rng = random.Random(i)
        n = 0
        while not stop.is_set():
            n += 1
            text = rng.choice(lines)
            start = self.now()
            try:
                if n % 6 == 0:
                    what, status, size = "translate_file", *self._upload(i, rng.sample(lines, 3))
                elif n % 2:
                    what = "translate json"
                    status, _, _ = self.nginx.request("POST", "/translate", json.dumps(
                        {"q": text, "source": "de", "target": "en", "api_key": self.keys[i]}).encode(),
                        {"Content-Type": "application/json"})
                    size = len(text)
                else:
                    what = "translate form"                                  # (plain UTF-8, as curl -d sends it)
                    status, _, _ = self.nginx.request("POST", "/translate", f"q={text}&source=de&target=en&api_key="
                                                      f"{self.keys[i]}".encode(),
                                                      {"Content-Type": "application/x-www-form-urlencoded"})
                    size = len(text)
            except (OSError, http.client.HTTPException) as e:    # (an answer cut: its replica killed mid-way)
                what, status, size = f"connection error {e.__class__.__name__}", 0, 0
            with self.lock:
                self.sent.add(text)
                self.answers.append((start, self.now(), what, status, i))
                if status == 200:
                    self.charged[i] += size

    def _upload(self, i: int, texts: list[str]) -> tuple[int, int]:
        from tests.helpers import multipart

        body, headers = multipart({"source": "de", "target": "en", "api_key": self.keys[i]}, f"client{i}.txt",
                                  "\n\n".join(texts).encode() + b"\n")
        status, _, answer = self.nginx.request("POST", "/translate_file", body, headers)
        with self.lock:
            self.sent.update(texts)
        if status != 200:
            return status, 0
        url = json.loads(answer)["translatedFileUrl"]
        path = url.split(str(self.nginx.port), 1)[1]
        got = self.nginx.request("GET", path)[0]
        with self.lock:
            self.files.append(path)
            self.answers.append((self.now(), self.now(), "download", got, i))
        return status, sum(len(t) for t in texts)

    # --- the chaos -----------------------------------------------------------------------------------------------

    def sample(self, stop: threading.Event) -> None:
        while not stop.wait(5):
            for name, r in zip("AB", list(self.replicas), strict=True):
                mib = rss_mib(r.proc.pid)
                if mib is not None:
                    self.rss.append((self.now(), name, mib))

    def restart(self, i: int, how: str) -> None:
        old = self.replicas[i]
        if how == "kill":
            old.proc.send_signal(signal.SIGKILL)
            old.proc.wait()
        else:
            code = old.stop()
            self.event(f"replica {'AB'[i]} exited {code} after SIGTERM")
        self.logs.append(("AB"[i], old.output()))
        self.replicas[i] = self.Server(*self.flags, model=self.model, port=old.port)
        self.event(f"replica {'AB'[i]} answers /health again")

    def redis_outage(self, start: float, end: float) -> None:
        """Redis killed at ``start`` seconds and started again, empty, on its port at ``end``."""
        self.until(start)
        self.redis.stop()
        self.event("redis-server killed")
        self.until(end)
        self.redis.proc = self.Redis(self.redis.port).proc
        self.event("redis-server started again (empty)")

    def until(self, t: float) -> None:
        time.sleep(max(0.0, t - (time.monotonic() - self.t0)))

    def run(self) -> dict[str, Any]:
        lines = corpus("test_2016_flickr", "de")
        stop = threading.Event()
        threads = [threading.Thread(target=self.client, args=(i, lines, stop)) for i in range(CLIENTS)]
        threads.append(threading.Thread(target=self.sample, args=(stop,)))
        for t in threads:
            t.start()
        s = self.seconds / 300
        try:
            self.redis_outage(30 * s, 50 * s)
            self.until(80 * s)
            self.pg.stop()
            self.event("PostgreSQL stopped")
            self.until(100 * s)
            self.pg.start()
            self.event("PostgreSQL started again")
            self.until(130 * s)
            self.event("replica A killed (SIGKILL)")
            self.restart(0, "kill")
            self.until(170 * s)
            self.event("rolling restart: SIGTERM to replica A")
            self.restart(0, "term")
            time.sleep(4.5)
            self.event("rolling restart: SIGTERM to replica B")
            self.restart(1, "term")
            self.redis_outage(240 * s, 250 * s)
            self.until(self.seconds)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.event("clients stopped")
        return self.report()

    def report(self) -> dict[str, Any]:
        from aiayn.serving.database import Database

        downloads = [self.nginx.request("GET", p)[0] for p in self.files]
        for name, r in zip("AB", self.replicas, strict=True):
            r.stop()
            self.logs.append((name, r.output()))
        self.nginx.stop()
        kills = [t for t, what in self.events if "SIGKILL" in what]
        statuses: dict[str, dict[str, int]] = {}
        bad = []
        for start, end, what, status, _ in self.answers:
            statuses.setdefault(what, {}).setdefault(str(status), 0)
            statuses[what][str(status)] += 1
            if status >= 500 or status == 0:
                in_flight = any(start <= k <= end for k in kills)
                bad.append({"start": start, "end": end, "what": what, "status": status, "in_flight_at_kill": in_flight})
        db = Database(self.pg.url)
        rows = {k.name: k for k in db.list_keys()}
        day = time.strftime("%Y-%m-%d", time.gmtime())
        budgets = []
        for i in range(CLIENTS - 2, CLIENTS):
            key = rows[f"client-{i}"]
            budgets.append({"client": i, "budget": BUDGETS[i - CLIENTS + 2], "spent_in_database": db.spent(key.uid, day),
                            "characters_answered_200": self.charged[i],
                            "refused_429": sum(1 for a in self.answers if a[4] == i and a[3] == 429),
                            "first_429_at_s": min((a[0] for a in self.answers if a[4] == i and a[3] == 429),
                                                  default=None)})
        leaks = [{"replica": name, "traceback": "Traceback" in text,
                  "texts_sent_found": sum(1 for t in self.sent if t in text)} for name, text in self.logs]
        self.pg.close()
        self.redis.stop()
        by_replica: dict[str, list[float]] = {}
        for _, name, mib in self.rss:
            by_replica.setdefault(name, []).append(mib)
        return {"model": str(self.model), "seconds": self.seconds, "clients": CLIENTS, "events": self.events,
                "requests": len(self.answers), "statuses": statuses,
                "5xx_or_no_answer": {"total": len(bad),
                                     "in_flight_on_the_killed_replica": sum(b["in_flight_at_kill"] for b in bad),
                                     "others": [b for b in bad if not b["in_flight_at_kill"]][:20]},
                "budgets": budgets, "budget_exceeded": any(b["spent_in_database"] > b["budget"] for b in budgets),
                "files": {"uploaded": len(self.files), "downloaded_again_at_the_end_200": downloads.count(200),
                          "other": [s for s in downloads if s != 200]},
                "logs": leaks, "rss_mib": {name: {"first": v[:3], "last": v[-3:], "max": max(v)}
                                           for name, v in by_replica.items()},
                "rss_samples": self.rss}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "runs" / "demo" / "run-de-en")
    p.add_argument("--seconds", type=float, default=300.0)
    a = p.parse_args(argv)
    record.COMMAND[:] = ["python", "-m", "benchmarks", "chaos", "--model", str(a.model), "--seconds", f"{a.seconds:g}"]
    report = Chaos(a.model, a.seconds).run()
    shown = {k: v for k, v in report.items() if k != "rss_samples"}
    print(json.dumps(shown, indent=2))
    print(f"recorded in {record.write('chaos', report)}")


if __name__ == "__main__":
    main()
