"""One server holding a multilingual model against one holding a bilingual model per direction: every direction
translated through the real ``libretranslatepy`` client, and each server's memory (the resident set of its process
and its worker processes, summed) once every direction has answered.

    python -m benchmarks multilingual-serving --model runs/multilingual/run-all --bilingual runs/bilingual/run-cs-en

The bilingual side is ``--bilingual``'s run copied once per direction of the multilingual model, each copy naming its
direction in its data.json: as many models of the bilingual size, loaded apart (their weights are the same run's, so
their translations are not what is measured; their memory is). Records
benchmarks/results/multilingual-serving/multilingual-serving-<date>.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import record  # noqa: E402


def tree_rss_mib(pid: int) -> float:
    """The resident memory of a process and all its descendants, MiB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS:"))
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return round(total / 1024, 1)


def first_lines(data: Path, langs: list[str]) -> dict[str, str]:
    out = {}
    for lang in langs:
        with gzip.open(data / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            out[lang] = f.readline().strip()
    return out


def serve(model: Path, engine: str, directions: list[tuple[str, str]], lines: dict[str, str]) -> dict[str, Any]:
    """Start a server on ``model``, translate one line of every direction through libretranslatepy, measure it."""
    import libretranslatepy

    from tests.helpers import Server

    t0 = time.perf_counter()
    s = Server("--engine", engine, model=model, wait=False)
    try:
        s.wait_up(timeout=1800)
        up = time.perf_counter() - t0
        lt = libretranslatepy.LibreTranslateAPI(f"http://127.0.0.1:{s.port}")
        listed = {x["code"]: x["targets"] for x in lt.languages()}
        answered = {}
        for a, b in directions:
            try:
                answered[f"{a}-{b}"] = lt.translate(lines[a], a, b)
            except Exception as e:  # noqa: BLE001 - recorded, not raised
                answered[f"{a}-{b}"] = f"ERROR {type(e).__name__}: {e}"
        rss = tree_rss_mib(s.proc.pid)
        info = s.request("GET", "/info")[2]
        return {"startup_s": round(up, 1), "rss_mib": rss, "models": len(info["models"]), "languages": listed,
                "translations": answered,
                "directions_answered": sum(not v.startswith("ERROR") for v in answered.values())}
    finally:
        s.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "runs" / "multilingual" / "run-all")
    p.add_argument("--bilingual", type=Path, default=ROOT / "runs" / "bilingual" / "run-cs-en")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    p.add_argument("--engine", default="auto")
    a = p.parse_args(argv)
    record.COMMAND[:] = ["python", "-m", "benchmarks", "multilingual-serving", "--model", str(a.model), "--bilingual",
                         str(a.bilingual), "--engine", a.engine]
    from aiayn.rundir import RunDir

    multi = RunDir.locate(a.model)[0].multilingual()
    assert multi is not None, f"{a.model} is not a multilingual run"
    directions = [(x, y) for x in multi.langs for y in multi.langs if x != y]
    lines = first_lines(a.data, list(multi.langs))
    result: dict[str, Any] = {"engine": a.engine, "model": str(a.model), "bilingual": str(a.bilingual),
                              "multilingual": serve(a.model, a.engine, directions, lines)}
    with tempfile.TemporaryDirectory() as tmp:
        for x, y in multi.directions:                      # one bilingual model per direction it was trained on
            run = Path(tmp) / f"run-{x}-{y}"
            run.mkdir()
            for name in ("config.json", "spm.model", "vocab.json"):
                shutil.copy(a.bilingual / name, run / name)
            shutil.copytree(RunDir.locate(a.bilingual)[1], run / "averaged")
            (run / "data.json").write_text(json.dumps({"src": x, "tgt": y}))
        result["bilingual_models"] = serve(Path(tmp), a.engine, directions, lines)
    m, b = result["multilingual"], result["bilingual_models"]
    result["rss_ratio"] = round(b["rss_mib"] / m["rss_mib"], 2)
    print(json.dumps({k: v for k, v in result.items()}, indent=2, ensure_ascii=False), flush=True)
    print(f"recorded in {record.write('multilingual-serving', result)}", flush=True)


if __name__ == "__main__":
    main()
