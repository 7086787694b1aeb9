"""A deployment for many users, measured: two ``aiayn serve`` replicas of a trained model behind nginx (round robin),
one ``redis-server`` and one database of API keys, on 127.0.0.1 (docs/deploy.md, "Many users on many machines").

1. A key of 10 requests a minute, 14 requests through nginx: the statuses.
2. A sentence translated by replica A, asked of replica B: a hit in B's shared cache, and both requests' times.
3. A 20,000-character paragraph (test_2016_flickr's German lines joined, no line breaks) through nginx, LibreTranslate's
   API: its status, time and the length of its translation.
4. Redis killed: 20 requests through nginx (statuses), then Redis started again: seconds until both replicas' /metrics
   say it answers (nothing else asked of them).
5. ``/detect`` among every language py3langid knows, on test_2016_flickr's 1,000 German lines one by one: how many
   come back German; its 1,000 English lines with ``source: auto`` to this de->en model: how many are a 400.

    python -m benchmarks many-users [--model runs/demo/run-de-en]

Needs redis-server and nginx (``make services``). Records benchmarks/results/many-users/many-users-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import record  # noqa: E402
from finetune_domain import corpus  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "runs" / "demo" / "run-de-en")
    a = p.parse_args(argv)
    record.COMMAND[:] = ["python", "-m", "benchmarks", "many-users", "--model", str(a.model)]
    from tests.helpers import Server
    from tests.serving.services import Nginx, Redis
    from tests.serving.test_keys import add_key

    work = Path(tempfile.mkdtemp(prefix="aiayn-many-"))
    db, redis = work / "keys.db", Redis()
    add_key(db, "--name", "first")
    flags = ("--engine", "ctranslate2", "--api-keys", str(db), "--shared-storage", redis.url)
    replicas = [Server(*flags, model=a.model), Server(*flags, model=a.model)]
    nginx = Nginx([r.port for r in replicas])
    report: dict[str, Any] = {"model": str(a.model), "replicas": 2, "balancer": "nginx round robin"}
    try:
        report.update(limits(nginx, db), cache=cache(replicas, db), paragraph=paragraph(nginx, db))
        report["outage"] = outage(redis, replicas, nginx, db)
        report["detect"] = detect(nginx, db)
    finally:
        nginx.stop()
        for r in replicas:
            r.stop()
        redis.stop()
    print(json.dumps(report, indent=2))
    print(f"recorded in {record.write('many-users', report)}")


def limits(nginx: Any, db: Path) -> dict[str, Any]:
    from tests.serving.test_keys import add_key

    key = add_key(db, "--req-limit", "10")
    q = {"q": "Ein Hund läuft.", "source": "de", "target": "en", "api_key": key}
    statuses = [nginx.post("/translate", q)[0] for _ in range(14)]
    return {"key_limit_per_minute": 10, "statuses": statuses}


def cache(replicas: list[Any], db: Path) -> dict[str, Any]:
    from tests.serving.test_keys import add_key

    key = add_key(db)
    q = {"q": "Zwei Männer in orangefarbenen Westen reparieren eine Straße in der Stadt.", "source": "de",
         "target": "en", "api_key": key}
    t0 = time.perf_counter()
    first = replicas[0].post("/translate", q)
    t1 = time.perf_counter()
    second = replicas[1].post("/translate", q)
    t2 = time.perf_counter()
    return {"same_text": first[2]["translatedText"] == second[2]["translatedText"],
            "shared_hits_on_b": replicas[1].metric("aiayn_cache_shared_hits_total", key),
            "decoded_on_a_s": round(t1 - t0, 4), "answered_by_b_s": round(t2 - t1, 4)}


def paragraph(nginx: Any, db: Path) -> dict[str, Any]:
    from tests.serving.test_keys import add_key

    key = add_key(db)
    text, lines = "", corpus("test_2016_flickr", "de")
    for line in lines:
        if len(text) + len(line) + 1 > 20000:
            break
        text += (" " if text else "") + line
    t0 = time.perf_counter()
    got, answer = nginx.post("/translate", {"q": text, "source": "de", "target": "en", "api_key": key})
    return {"characters": len(text), "status": got, "seconds": round(time.perf_counter() - t0, 2),
            "translation_characters": len(answer.get("translatedText", "")) if got == 200 else None}


def outage(redis: Any, replicas: list[Any], nginx: Any, db: Path) -> dict[str, Any]:
    from tests.serving.services import Redis
    from tests.serving.test_keys import add_key

    key = add_key(db)
    q = {"q": "Ein Mann fährt Fahrrad.", "source": "de", "target": "en", "api_key": key}
    redis.stop()
    statuses = [nginx.post("/translate", q)[0] for _ in range(20)]
    up_during = [r.metric("aiayn_shared_storage_up", key) for r in replicas]
    back = Redis(redis.port)
    t0 = time.perf_counter()
    while any(r.metric("aiayn_shared_storage_up", key) != 1 for r in replicas) and time.perf_counter() - t0 < 30:
        time.sleep(0.1)                             # (only /metrics is asked: it asks Redis again, every 2 s at most)
    shared_again = round(time.perf_counter() - t0, 2)
    redis.proc = back.proc
    return {"statuses_while_gone": statuses, "storage_up_while_gone": up_during,
            "seconds_until_shared_again": shared_again,
            "warning_logged": all("unreachable" in r.output() for r in replicas)}


def detect(nginx: Any, db: Path) -> dict[str, Any]:
    from tests.serving.test_keys import add_key

    key = add_key(db)
    german, english = corpus("test_2016_flickr", "de"), corpus("test_2016_flickr", "en")
    found: dict[str, int] = {}
    for line in german:
        lang = nginx.post("/detect", {"q": line, "api_key": key})[1][0]["language"]
        found[lang] = found.get(lang, 0) + 1
    refused = sum(nginx.post("/translate", {"q": line, "source": "auto", "target": "en", "api_key": key})[0] == 400
                  for line in english)
    return {"german_lines": len(german), "detected_german": found.get("de", 0),
            "detected_otherwise": dict(sorted(((k, v) for k, v in found.items() if k != "de"), key=lambda kv: -kv[1])),
            "english_lines_auto_to_en": len(english), "refused_400": refused}


if __name__ == "__main__":
    main()
