"""aiayn on a CUDA GPU (issue 54): the compiled static-shape step, captured in CUDA graphs, against today's step and
against CTranslate2 on the same weights; and training speed with ``train.compile`` off and on.

    python -m benchmarks gpu --model RUN --src test.de --ref test.en [--lines 1000] [--repeat 1] [--data DATA]
                             [--budget 480]

- **Decoding.** ``Translator.translate`` of the first ``--lines`` source lines (of the file repeated ``--repeat``
  times: on a GPU 5,000 lines are a second's work, whose passes vary more than the engines do), in ``--precision``
  (bf16 by default)
  and batches of ``--batch-tokens``, greedy and beam 4: today's step, then ``decode.compile``
  (steps.compiled_step: Inductor, ``mode="reduce-overhead"``, i.e. CUDA graphs), then CTranslate2
  (interop.auto.ctranslate2, its compute type the same precision). Each runs a first pass, which compiles (or
  warms up), then ``--repeats`` timed passes, whose median is the figure (one pass of ~1 s on an H200 varied by up to
  2.1x within a run): seconds, sentences/s, lowercased BLEU against ``--ref`` and the lines identical to today's step.
- **Training.** ``aiayn train`` on ``--data`` (the run's own config, bf16, ``--train-steps`` updates of
  ``--max-tokens`` tokens) with ``train.compile`` off and on: target tokens/s, the median of the last three logged
  windows (the first windows hold the compilation).

Every part checks ``--budget`` (seconds for the whole benchmark, a GPU's lease being short) before it starts, and
the record is written after each part, so that a part cut off leaves the others. Records ``results/gpu/gpu-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
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

START = time.monotonic()


def _left(budget: float) -> float:
    return budget - (time.monotonic() - START)


def _bleu(hyps: list[str], refs: list[str]) -> float:
    import sacrebleu

    return round(sacrebleu.corpus_bleu([h.lower() for h in hyps], [[r.lower() for r in refs]]).score, 2)


BATCH: dict[str, Any] = {}        # --batch-tokens, for every engine
REPEATS = [3]                     # --repeats: timed passes after the first, the median is the figure


def _timed(engine: Any, lines: list[str], beam: int, **settings: Any) -> tuple[float, list[str]]:
    import torch

    t0 = time.perf_counter()
    out = engine.translate(lines, beam=beam, **BATCH, **settings)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def _passes(engine: Any, lines: list[str], beam: int, **settings: Any) -> tuple[float, float, list[float], list[str]]:
    """(first pass s, median of the timed passes s, every timed pass, the output)."""
    first, out = _timed(engine, lines, beam, **settings)
    each = []
    for _ in range(REPEATS[0]):
        s, out = _timed(engine, lines, beam, **settings)
        each.append(round(s, 3))
    return first, statistics.median(each), each, out


def decoding(run: str, lines: list[str], refs: list[str], device: str, precision: str, budget: float,
             figures: dict[str, Any], save: Any, peers: bool = True) -> None:
    from aiayn import Translator

    t = Translator.load(run, "torch", device=device, precision=precision)
    rows: list[dict[str, Any]] = figures.setdefault("decoding", [])
    today: dict[int, list[str]] = {}
    for beam in (1, 4):
        for name, settings in (("today's step", {}), ("compiled static step, CUDA graphs", {"compile": True})):
            if _left(budget) < 60:
                rows.append({"engine": f"aiayn, {name}", "beam": beam, "skipped": "out of budget"})
                continue
            first, second, each, out = _passes(t, lines, beam, **settings)
            today.setdefault(beam, out)
            rows.append({"engine": f"aiayn, {name}", "beam": beam, "precision": precision,
                         "first pass s": round(first, 2), "s": round(second, 2), "passes s": each,
                         "sent/s": round(len(lines) / second, 1), "bleu_lc": _bleu(out, refs),
                         "identical to today's step": sum(a == b for a, b in zip(out, today[beam], strict=True))})
            print(rows[-1], flush=True)
            save()
    if not peers:
        return
    try:
        from aiayn.engines.auto import ctranslate2

        fast = Translator(ctranslate2(run, device=device, precision=precision))
    except Exception as e:  # noqa: BLE001 - recorded: why CTranslate2 did not run on this GPU
        figures["ctranslate2"] = f"not run: {type(e).__name__}: {e}"
        print(figures["ctranslate2"], flush=True)
        save()
        return
    figures["ctranslate2"] = {"version": record._version("ctranslate2"), "compute_type": fast.engine.precision}
    for beam in (1, 4):
        first, second, each, out = _passes(fast, lines, beam)
        rows.append({"engine": "ctranslate2", "beam": beam, "precision": precision, "first pass s": round(first, 2),
                     "s": round(second, 2), "passes s": each, "sent/s": round(len(lines) / second, 1),
                     "bleu_lc": _bleu(out, refs),
                     "identical to today's step": sum(a == b for a, b in zip(out, today.get(beam, out), strict=True))})
        print(rows[-1], flush=True)
        save()


def training(run: str, data: str, device: str, steps: int, max_tokens: int, budget: float, figures: dict[str, Any],
             save: Any) -> None:
    rows: list[dict[str, Any]] = figures.setdefault("training", [])
    for compile_ in (False, True):
        if _left(budget) < 90:
            rows.append({"compile": compile_, "skipped": "out of budget"})
            continue
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "config.json"
            config.write_text((Path(run) / "config.json").read_text())
            sets = [f"max_steps={steps}", f"max_tokens={max_tokens}", f"train.device={device}",
                    "train.precision=bf16", f"train.compile={str(compile_).lower()}", "log_every_steps=25",
                    f"valid_every_steps={steps}", "valid_bleu=false", "valid_each_epoch=false",
                    f"save_every_steps={steps}", "average_last=0", "tensorboard=false"]
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "aiayn", "train", "--data", data, "--out",
                                   str(Path(tmp) / "run"), "--config", str(config), "--set", *sets],
                                  capture_output=True, text=True, timeout=max(60, _left(budget) - 30))
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                rows.append({"compile": compile_, "failed": proc.stderr[-2000:]})
                save()
                continue
            logged = [json.loads(x) for x in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
            rates = [r["tgt_tokens_per_s"] for r in logged if "tgt_tokens_per_s" in r]
            rows.append({"compile": compile_, "steps": steps, "max_tokens": max_tokens, "wall s": round(wall, 1),
                         "tgt tokens/s": round(statistics.median(rates[-3:])), "windows": [round(r) for r in rates]})
        print(rows[-1], flush=True)
        save()


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a run dir")
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=1, help="the source and references this many times over, then --lines")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--data", help="the run's data dir: also time training")
    ap.add_argument("--no-ctranslate2", action="store_true", help="aiayn's engine only")
    ap.add_argument("--train-steps", type=int, default=150)
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=3, help="timed passes after the first; the median is the figure")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole benchmark")
    ap.add_argument("--batch-tokens", type=int, default=64000,
                    help="decode.batch_tokens (source tokens x beam per batch) of every engine: a GPU's batches are "
                         "large, and few batches are few shapes to compile")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to try the benchmark itself out")
    a = ap.parse_args(argv)
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("python -m benchmarks gpu: no CUDA GPU here")
    BATCH["batch_tokens"] = a.batch_tokens
    REPEATS[0] = a.repeats
    lines = (Path(a.src).read_text(encoding="utf-8").splitlines() * a.repeat)[: a.lines]
    refs = (Path(a.ref).read_text(encoding="utf-8").splitlines() * a.repeat)[: a.lines]
    figures: dict[str, Any] = {"model": a.model, "lines": len(lines), "repeat": a.repeat, "device": a.device,
                               "batch_tokens": a.batch_tokens, "torch": torch.__version__}
    path: list[Path] = []

    def save() -> None:
        if path:
            path[0].unlink(missing_ok=True)
        path[:] = [record.write("gpu", figures)]

    decoding(a.model, lines, refs, a.device, a.precision, a.budget, figures, save, not a.no_ctranslate2)
    if a.data:
        training(a.model, a.data, a.device, a.train_steps, a.max_tokens, a.budget, figures, save)
    save()
    print(f"recorded {path[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
