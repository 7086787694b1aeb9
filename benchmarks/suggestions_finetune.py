"""Corrections users send become a fine-tuning: ``POST /suggest`` on a real ``aiayn serve``, ``aiayn suggestions
export``, ``aiayn prepare --vocab-from``, ``aiayn train --init-from``, ``aiayn evaluate``, on a domain the model never
saw.

The domain: software messages. The German catalogues (``.mo``) installed on this machine (coreutils, git, apt, glib,
PostgreSQL, ...) pair each English message (msgid) with its German translation (msgstr): real parallel text, read
with the standard library's gettext. Messages of 3 to 25 words without format specifiers, markup or line breaks,
deduplicated and shuffled (seed 0): 550 are sent to the server as suggestions (their German as ``q``, the English as
``s``: the correction a user sends for the model's translation), exported with 50 held out for validation, and 500
others are the domain's test set. The model (the demo's de->en, trained on Multi30k captions) is fine-tuned on the
500 and evaluated on the domain test and on test_2016_flickr before and after.

    python -m benchmarks suggestions-finetune [--model runs/demo/run-de-en] [--work runs/suggestions] [--updates 150]
                                              [--mix 0] [--lr-factor 0.5] [--valid-general 0]

``--mix N`` adds N of the model's own training pairs to the fine-tuning corpus (replay against forgetting);
``--valid-general M`` adds M Multi30k val captions to the validation set (the checkpoint kept is then the best on
both). Records benchmarks/results/suggestions/suggestions-<date>.json.
"""

from __future__ import annotations

import argparse
import gettext
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import record  # noqa: E402
from finetune_domain import corpus, write  # noqa: E402

SKIP = re.compile(r"[%{}<>\\\n\t_]|\$\w|--|\.\.\.")
CATALOGUES = ("/usr/share/locale/de/LC_MESSAGES", "/usr/share/locale-langpack/de/LC_MESSAGES")


def aiayn(*args: str) -> str:
    print("$ aiayn " + " ".join(args), flush=True)
    return subprocess.run([sys.executable, "-m", "aiayn", *args], check=True, capture_output=True, text=True,
                          cwd=ROOT).stdout


def messages() -> tuple[list[tuple[str, str]], list[str]]:
    """(German, English) software messages from the German catalogues found, and the catalogues' names."""
    files = sorted(p for d in CATALOGUES if Path(d).is_dir() for p in Path(d).glob("*.mo"))
    found: dict[str, str] = {}
    used = []
    for f in files:
        try:
            with open(f, "rb") as inp:
                catalog = gettext.GNUTranslations(inp)._catalog    # type: ignore[attr-defined]
        except (OSError, ValueError):
            continue
        if f.stem.startswith("iso_"):                  # (names of countries, languages, scripts: not messages)
            continue
        used.append(f.stem)
        for en, de in catalog.items():
            if not isinstance(en, str) or not isinstance(de, str) or SKIP.search(en + de) or en == de:
                continue
            if 3 <= len(en.split()) <= 25 and 3 <= len(de.split()) <= 30:
                found.setdefault(en.strip(), de.strip())
    pairs = sorted((de, en) for en, de in found.items())
    random.Random(0).shuffle(pairs)
    return pairs, used


def suggest(port: int, pairs: list[tuple[str, str]]) -> float:
    t0 = time.perf_counter()
    for de, en in pairs:
        body = urllib.parse.urlencode({"q": de, "s": en, "source": "de", "target": "en"}).encode()
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/suggest", body), timeout=30) as r:
            assert json.loads(r.read()) == {"success": True}
    return time.perf_counter() - t0


def serve_and_suggest(model: Path, db: Path, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--model", str(model), "--port", str(port),
                             "--suggestions", str(db), "--engine", "ctranslate2"], cwd=ROOT)
    try:
        for _ in range(300):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        settings = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/frontend/settings").read())
        seconds = suggest(port, pairs)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"suggestions_sent": len(pairs), "seconds": round(seconds, 2), "frontend_suggestions": settings["suggestions"]}


def evaluate(run: Path, prefix: Path, name: str) -> dict[str, Any]:
    r = json.loads(aiayn("evaluate", "--model", str(run), "--src", f"{prefix}.de", "--ref", f"{prefix}.en", "--json",
                         "--hyps", str(run / "hyps" / f"{name}.hyp")))
    return {k: r[k] for k in ("bleu", "bleu_lc", "chrf", "sentences")}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "runs" / "demo" / "run-de-en")
    p.add_argument("--work", type=Path, default=ROOT / "runs" / "suggestions")
    p.add_argument("--updates", type=int, default=150)
    p.add_argument("--mix", type=int, default=0)
    p.add_argument("--lr-factor", type=float, default=0.5)
    p.add_argument("--valid-general", type=int, default=0, metavar="N",
                   help="with --mix: N Multi30k val captions beside the 50 held-out suggestions in the validation set")
    a = p.parse_args(argv)
    record.COMMAND[:] = ["python", "-m", "benchmarks", "suggestions-finetune", "--updates", str(a.updates),
                         "--mix", str(a.mix), "--lr-factor", str(a.lr_factor), "--valid-general", str(a.valid_general)]
    w = a.work
    shutil.rmtree(w, ignore_errors=True)
    w.mkdir(parents=True)
    pairs, used = messages()
    sent, test = pairs[:550], pairs[550:1050]
    write(w / "text" / "domain-test", test)
    write(w / "text" / "flickr-test", list(zip(corpus("test_2016_flickr", "de"), corpus("test_2016_flickr", "en"),
                                               strict=True)))
    report: dict[str, Any] = {"domain": "software messages from this machine's German gettext catalogues",
                              "catalogues": len(used), "pairs_found": len(pairs), "test_pairs": len(test),
                              "server": serve_and_suggest(a.model, w / "aiayn.db", sent)}
    aiayn("suggestions", "--db", str(w / "aiayn.db"), "export", "--out", str(w / "export"), "--valid", "50")
    train, valid = w / "export" / "de-en" / "train", w / "export" / "de-en" / "valid"
    if a.mix:
        general = list(zip(corpus("train", "de"), corpus("train", "en"), strict=True))
        random.Random(1).shuffle(general)
        own = list(zip(Path(f"{train}.de").read_text().splitlines(), Path(f"{train}.en").read_text().splitlines(),
                       strict=True))
        write(w / "text" / "mixed", own + general[: a.mix])
        train = w / "text" / "mixed"
        if a.valid_general:
            vd, ve = (Path(f"{w}/export/de-en/valid.{x}").read_text().splitlines() for x in ("de", "en"))
            write(w / "text" / "mixed-valid", list(zip(vd, ve, strict=True)) +
                  list(zip(corpus("val", "de"), corpus("val", "en"), strict=True))[: a.valid_general])
            valid = w / "text" / "mixed-valid"
    report["finetune_pairs"] = len(Path(f"{train}.de").read_text().splitlines())
    aiayn("prepare", "--train", str(train), "--valid", str(valid), "--src", "de", "--tgt",
          "en", "--vocab-from", str(a.model), "--out", str(w / "data"))
    report["before"] = {"domain": evaluate(a.model, w / "text" / "domain-test", "suggestions-domain-before"),
                        "flickr": evaluate(a.model, w / "text" / "flickr-test", "suggestions-flickr-before")}
    t0 = time.time()
    tuned = w / "tuned"
    aiayn("train", "--data", str(w / "data"), "--out", str(tuned), "--init-from", str(a.model),
          "--set", "warmup=50", "--set", f"lr_factor={a.lr_factor}", "--set", "save_every_steps=25",
          "--set", "valid_every_steps=25", "--set", "average_last=0", "--set", "max_minutes=0",
          "--max-steps", str(a.updates))
    report["finetune_seconds"] = round(time.time() - t0)
    report["finetune_settings"] = {"updates": a.updates, "warmup": 50, "lr_factor": a.lr_factor, "mix": a.mix,
                                   "checkpoint": "best validation BLEU (the 50 held-out suggestions"
                                                 + (f", and {a.valid_general} Multi30k val captions)"
                                                    if a.mix and a.valid_general else ")")}
    report["after"] = {"domain": evaluate(tuned, w / "text" / "domain-test", "domain-after"),
                       "flickr": evaluate(tuned, w / "text" / "flickr-test", "flickr-after")}
    report["delta"] = {k: round(report["after"][k]["bleu"] - report["before"][k]["bleu"], 2) for k in ("domain",
                                                                                                      "flickr")}
    print(json.dumps(report, indent=2), flush=True)
    print(f"recorded in {record.write('suggestions', report)}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
