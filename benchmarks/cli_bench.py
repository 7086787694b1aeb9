"""``aiayn translate`` over a test set, start-up included, per engine: issue 54's table.

    python -m benchmarks cli --model runs/demo/run-de-en --src runs/demo/data/test.de --ref runs/demo/data/test.en
                             [--repeat 5] [--precision int8] [--beams 1 4] [--runs 2]
                             [--engines torch [torch-threads] ctranslate2]

The source is repeated ``--repeat`` times (test_2016_flickr's 1,000 lines five times: 5,000 lines). Each row runs
``python -m aiayn translate --model MODEL --engine ENGINE --precision P --beam B --input SRC --output OUT --quiet``
(``torch-threads``: ``--engine torch --no-processes``) in a new process, as a user does, with the run's other
settings (workers, batch tokens, length rule) as they are; the wall time counts start-up and loading. The rows of
one beam run back to back, engine after engine, ``--runs`` times in turn, and each row keeps its fastest run, so
that the VM's drift falls on both engines alike. CTranslate2's conversion is made beforehand (it is cached in the
run dir). Reported: sentences/s, aiayn's engine ÷ CTranslate2, BLEU (sacreBLEU, lowercased, on the first repeat),
the lines identical between the engines, and the most lines an engine's output changed from one run of the same
command to the next (0 where it is deterministic). The ratio and the identical lines are each engine's against the
last one listed. Every process runs as on a user's machine, its bytecode cached (record.user_env). Records
``results/cli/cli-<date>.json``.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402


def run_cli(model: Path, engine: str, precision: str, beam: int, src: Path, out: Path) -> float:
    name, _, how = engine.partition("-")
    cmd = [sys.executable, "-m", "aiayn", "translate", "--model", str(model), "--engine", name,
           "--precision", precision, "--beam", str(beam), "--input", str(src), "--output", str(out), "--quiet",
           *(["--no-processes"] if how == "threads" else [])]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=record.user_env())
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def bleu(hyps: list[str], refs: list[str]) -> float:
    import sacrebleu

    return round(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score, 2)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks cli", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--src", required=True, type=Path)
    p.add_argument("--ref", required=True, type=Path)
    p.add_argument("--repeat", type=int, default=5, help="the source this many times over (default %(default)s)")
    p.add_argument("--precision", default="int8")
    p.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    p.add_argument("--runs", type=int, default=2, help="runs of each row, in turn; the fastest is kept")
    p.add_argument("--engines", nargs="+", default=["torch", "ctranslate2"],
                   help="torch, torch-threads (--no-processes), ctranslate2 or auto; each compared with the last")
    a = p.parse_args(argv)
    lines = a.src.read_text(encoding="utf-8").splitlines()
    refs = a.ref.read_text(encoding="utf-8").splitlines()
    if len(lines) != len(refs):
        raise SystemExit(f"{a.src} has {len(lines)} lines and {a.ref} {len(refs)}")
    model = a.model.resolve()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "src.txt")
        src.write_text("\n".join(lines * a.repeat) + "\n", encoding="utf-8")
        one = Path(tmp, "one.txt")
        one.write_text(lines[0] + "\n", encoding="utf-8")
        for engine in a.engines:                    # conversions made, files cached, before any timing
            run_cli(model, engine, a.precision, 1, one, Path(tmp, "warm.txt"))
        n = len(lines) * a.repeat
        for beam in a.beams:
            times: dict[str, list[float]] = {e: [] for e in a.engines}
            outs: dict[str, list[str]] = {}
            unstable: dict[str, int] = dict.fromkeys(a.engines, 0)
            for r in range(a.runs):
                for engine in a.engines:
                    out = Path(tmp, f"{engine}-{beam}.txt")
                    times[engine].append(run_cli(model, engine, a.precision, beam, src, out))
                    got = out.read_text(encoding="utf-8").splitlines()
                    if engine in outs:                  # the same command again: the same lines expected
                        changed = sum(x != y for x, y in itertools.zip_longest(got, outs[engine]))
                        unstable[engine] = max(unstable[engine], changed)
                    outs[engine] = got
                    print(f"beam {beam} {engine:12s} run {r + 1}: {times[engine][-1]:7.2f} s "
                          f"({n / times[engine][-1]:7.1f} sent/s)", flush=True)
            for engine in a.engines:
                if len(outs[engine]) != n:
                    raise SystemExit(f"{engine} gave {len(outs[engine])} lines for {n}")
                best = min(times[engine])
                rows.append({"engine": engine, "beam": beam, "seconds": [round(t, 2) for t in times[engine]],
                             "best_s": round(best, 2), "sent_per_s": round(n / best, 1),
                             "bleu": bleu(outs[engine][: len(lines)], refs),
                             "lines_changed_between_runs": unstable[engine]})
            *mine, last = [r for r in rows if r["beam"] == beam]
            for row in mine:                            # each against the last engine listed
                row["ratio"] = round(row["sent_per_s"] / last["sent_per_s"], 3)
                row["identical_lines"] = sum(u == v for u, v in zip(outs[row["engine"]], outs[last["engine"]],
                                                                    strict=True))
                if len(mine) == 1:
                    last["identical_lines"] = row["identical_lines"]
    print(f"\n{n} lines ({a.repeat} x {a.src}), --precision {a.precision}, start-up included, best of {a.runs}")
    print(f"{'engine':12s} {'beam':>4s} {'sent/s':>8s} {'BLEU':>6s} {'ratio':>6s}")
    for row in rows:
        print(f"{row['engine']:12s} {row['beam']:4d} {row['sent_per_s']:8.1f} {row['bleu']:6.2f} {row.get('ratio', ''):>6}")
    path = record.write("cli", {"model": str(a.model), "src": str(a.src), "ref": str(a.ref), "lines": n,
                                "repeat": a.repeat, "precision": a.precision, "runs": a.runs, "rows": rows})
    print(f"recorded {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
