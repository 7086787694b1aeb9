"""A first translation: one sentence through ``aiayn translate`` in a new process, start-up included, per engine.

    python -m benchmarks startup --model runs/demo/run-de-en [--runs 7] [--before DIR]

Each row runs ``python -m aiayn translate --model MODEL --engine ENGINE`` on one line from stdin (``torch`` also with
``--no-processes``: its model in the process itself, not in worker processes), ``--runs`` times in turn with the
other rows (the conversion for CTranslate2 made once beforehand), and reports the median and the
fastest wall time, with ``python -c "import torch"`` and a bare ``python -c pass`` measured the same way beside them.
The ``ctranslate2`` row also runs with PyTorch made unimportable (``sys.modules["torch"] = None``), which shows it
needs none. ``--before DIR``: a checkout of another commit (``git worktree add DIR REV``), whose ``--engine
ctranslate2`` and ``torch`` rows run beside (in DIR, its package first on PYTHONPATH). Records
``results/startup/startup-<date>.json``. Every process runs as on a user's machine, its bytecode cached (record.user_env).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402

LINE = "Ein Mann fährt mit dem Fahrrad über eine Brücke.\n"
NO_TORCH = "import sys; sys.modules['torch'] = None; from aiayn.cli.main import main; sys.exit(main(sys.argv[1:]))"


def timed(cmd: list[str], stdin: str, tree: str | None = None) -> tuple[float, str]:
    env = record.user_env(**({"PYTHONPATH": tree} if tree else {}))
    start = time.perf_counter()
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True, env=env, cwd=tree).stdout
    return time.perf_counter() - start, out.strip()


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks startup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--before", help="a checkout of another commit, measured beside")
    a = ap.parse_args(argv)
    translate = ["translate", "--model", str(Path(a.model).resolve()), "--quiet"]
    rows = {"python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import torch'": [sys.executable, "-c", "import torch"],
            "ctranslate2, torch unimportable": [sys.executable, "-c", NO_TORCH, *translate, "--engine", "ctranslate2"],
            "ctranslate2": [sys.executable, "-m", "aiayn", *translate, "--engine", "ctranslate2"],
            "auto": [sys.executable, "-m", "aiayn", *translate, "--engine", "auto"],
            "torch": [sys.executable, "-m", "aiayn", *translate, "--engine", "torch"],
            "torch, --no-processes": [sys.executable, "-m", "aiayn", *translate, "--engine", "torch", "--no-processes"]}
    trees = {name: None for name in rows}
    if a.before:
        before = subprocess.run(["git", "-C", a.before, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        for engine in ("ctranslate2", "torch"):
            rows[f"{engine} at {before}"], trees[f"{engine} at {before}"] = rows[engine], a.before
    timed(rows["ctranslate2"], LINE)                                  # the conversion, once, and warm file caches
    seconds: dict[str, list[float]] = {name: [] for name in rows}
    outputs: dict[str, str] = {}
    for _ in range(a.runs):
        for name, cmd in rows.items():
            t, out = timed(cmd, LINE, trees[name])
            seconds[name].append(t)
            outputs[name] = out
    figures = {"model": a.model, "line": LINE.strip(), "runs": a.runs, "before": a.before and before,
               "rows": {name: {"median_s": round(statistics.median(s), 3), "best_s": round(min(s), 3),
                               "output": outputs[name]} for name, s in seconds.items()}}
    for name, row in figures["rows"].items():
        print(f"{name:34s} median {row['median_s']:6.3f} s  best {row['best_s']:6.3f} s  {row['output']}")
    print(f"recorded {record.write('startup', figures)}")


if __name__ == "__main__":
    main(sys.argv[1:])
