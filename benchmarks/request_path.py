"""LibreTranslate's ``POST /translate`` traced through aiayn's modules: which modules a request enters, in order, and
its climbs (a call into a module that is already a caller further down the stack), on each engine.

The app runs in process (FastAPI's TestClient, the legacy fixture model, ``--no-processes``); every call into an aiayn
module is traced (``sys.setprofile`` in every thread) during one request of two sentences, after one to warm up. Each
engine is traced in a process of its own: auto (the command line's and the server's default, CTranslate2 where it is
installed) and torch (aiayn's own). docs/architecture.md cites the record.

    python -m benchmarks request-path [--engines auto torch]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import record

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tests" / "fixtures" / "legacy-f06e6aa" / "run"


def trace(engine: str) -> dict[str, Any]:
    """The trace of one request on ``engine``, in this process."""
    from fastapi.testclient import TestClient

    from aiayn.serving.models import Models
    from aiayn.serving.serve import ServeConfig, create_app

    app = create_app(Models.load([MODEL], engine, False, 0, device="cpu"), ServeConfig(processes=False, workers=1))
    entered: list[str] = []
    climbs: dict[str, str] = {}
    calls = [0]
    on = [False]

    def profile(frame: Any, event: str, arg: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if event != "call" or not on[0] or not module.startswith("aiayn"):
            return
        callers, f = [], frame.f_back
        while f is not None:                    # the aiayn modules of the callers, nearest first
            if (m := f.f_globals.get("__name__", "")).startswith("aiayn"):
                callers.append((m, f.f_code.co_name))
            f = f.f_back
        calls[0] += 1
        if callers and callers[0][0] != module:
            entered.append(module)
            if module in (m for m, _ in callers[1:]):
                climbs.setdefault(f"{callers[0][0]} -> {module}", f"{callers[0][1]} -> {frame.f_code.co_name}")

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        with TestClient(app) as client:
            client.post("/translate", json={"q": "Ein Hund läuft.", "source": "de", "target": "en"})     # warm
            on[0] = True
            answer = client.post("/translate", json={"q": "Ein Hund läuft. Eine Katze schläft.", "source": "de",
                                                     "target": "en"})
            on[0] = False
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    first = list(dict.fromkeys(entered))
    return {"status": answer.status_code, "calls_in_aiayn": calls[0], "module_entries": len(entered),
            "distinct_modules": len(first), "first_entered": [m.removeprefix("aiayn.") for m in first],
            "climbs": climbs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks request-path", description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", nargs="+", default=["auto", "torch"])
    ap.add_argument("--one", help=argparse.SUPPRESS)          # (a child process: trace this engine, print JSON)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(trace(args.one)))
        return 0
    figures, text = {}, []
    for engine in args.engines:
        out = subprocess.run([sys.executable, __file__, "--one", engine], capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        if out.returncode:
            print(out.stderr, file=sys.stderr)
            return out.returncode
        found = figures[engine] = json.loads(out.stdout.splitlines()[-1])
        text.append(f"engine {engine}: HTTP {found['status']}, {found['distinct_modules']} modules entered, "
                    f"{found['calls_in_aiayn']} calls into aiayn\n  " + " -> ".join(found["first_entered"]) +
                    "\n  climbs: " + (", ".join(f"{k} ({v})" for k, v in found["climbs"].items()) or "none") + "\n")
    print("\n".join(text), end="")
    print("recorded in", record.note("request-path", "\n".join(text) + "\n" + json.dumps(figures, indent=1) + "\n"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
