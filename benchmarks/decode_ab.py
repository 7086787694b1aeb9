"""Decoding speed of the working tree against an earlier revision, in one process, interleaved:

    python -m benchmarks decode-ab --base HEAD~1 --size small --precision int8 --beam 4
    python -m benchmarks decode-ab --base HEAD~1 --model runs/demo/run-de-en --src runs/demo/data/test.de

On a shared VM, separate processes measured minutes apart differ by up to ±30%, which hides a 5% change.
Here the revision's ``aiayn`` package is extracted (``git archive``) and imported under another name beside
the working tree's; both decode the same batches with the same weights, alternating batch by batch, and
each batch keeps its fastest of ``--rounds`` runs. Prints sentences/s for both, their ratio, and how many
outputs are identical; records it as ``results/decode-ab/decode-ab-<date>.json``.

Without ``--model``: the random-weight models and forced 20-token outputs of ``translate_bench.py``.
With ``--model`` (a run directory) and ``--src``: :class:`Translator` on real sentences.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(__file__))
import record  # noqa: E402
import translate_bench as tb  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_revision(rev: str, into: str) -> str:
    """Extract ``aiayn/`` at ``rev`` into ``into/aiayn_base`` and return that module name."""
    tar = subprocess.run(["git", "-C", ROOT, "archive", rev, "aiayn"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    os.rename(os.path.join(into, "aiayn"), os.path.join(into, "aiayn_base"))
    sys.path.insert(0, into)
    return "aiayn_base"


def random_model_runner(pkg: str, a: argparse.Namespace) -> Callable[[Any], Any]:
    root = importlib.import_module(pkg)
    try:                                         # searches in decoding/ since the folders per stage
        search = importlib.import_module(pkg + ".decoding.search")
    except ModuleNotFoundError:
        search = importlib.import_module(pkg + ".search")
    try:                                         # since issue 19: precision.for_inference
        for_inference = importlib.import_module(pkg + ".precision").for_inference
    except ModuleNotFoundError:                  # before: translate.reduce_precision
        for_inference = importlib.import_module(pkg + ".translate").reduce_precision
    d, n, h, f, v = tb.SIZES[a.size]
    torch.manual_seed(0)
    cfg = root.ModelConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=d, n_layers=n, n_heads=h, d_ff=f)
    model = for_inference(root.Transformer(cfg).eval(), a.precision)
    args = dict(max_len_a=0.0, max_len_b=tb.OUT_LEN, min_len=tb.OUT_LEN)
    if a.beam == 1:
        return lambda src: [h.tokens for h in search.greedy(model, src, **args)]
    return lambda src: [h[0].tokens for h in search.beam_search(model, src, beam=a.beam, **args)]


def translator_runner(pkg: str, a: argparse.Namespace) -> Callable[[Any], Any]:
    translator = importlib.import_module(pkg + ".translate").Translator.load(a.model, device="cpu",
                                                                             precision=a.precision)
    # batches decoded at once by separate threads, where the revision has the setting (1: one at a time)
    has_workers = hasattr(translator.decode, "workers")
    return lambda lines: translator.translate(lines, beam=a.beam, **({"workers": a.workers} if has_workers else {}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="HEAD", help="git revision to compare against (default: HEAD)")
    ap.add_argument("--size", default="small", choices=list(tb.SIZES))
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", help="a run directory: decode real sentences with its Translator")
    ap.add_argument("--src", help="source sentences, one per line (with --model)")
    ap.add_argument("--workers", type=int, default=1, help="Translator's workers (with --model; default 1)")
    a = ap.parse_args(argv)
    if bool(a.model) != bool(a.src):
        ap.error("--model and --src go together")
    with tempfile.TemporaryDirectory() as tmp:
        names = {"base": import_revision(a.base, tmp), "working tree": "aiayn"}
        importlib.import_module("aiayn.runtime").keep_freed_memory()
        if a.model:
            lines = open(a.src, encoding="utf-8").read().splitlines()
            batches: list[Any] = [lines[i : i + 250] for i in range(0, len(lines), 250)]
            runners = {label: translator_runner(pkg, a) for label, pkg in names.items()}
            n_sent = len(lines)
        else:
            sents = tb.sources(tb.SIZES[a.size][4])
            batches = [tb.padded(sents[i : i + tb.BATCH]) for i in range(0, len(sents), tb.BATCH)]
            runners = {label: random_model_runner(pkg, a) for label, pkg in names.items()}
            n_sent = tb.N_SENT
        outputs = {label: [run(b) for b in batches] for label, run in runners.items()}    # also the warm-up
        pairs = zip(*(sum(outputs[k], []) for k in runners), strict=True)
        same = sum(x == y for x, y in pairs)
        best = {label: [float("inf")] * len(batches) for label in runners}
        for _ in range(a.rounds):
            for i, batch in enumerate(batches):
                for label, run in runners.items():
                    t0 = time.perf_counter()
                    run(batch)
                    best[label][i] = min(best[label][i], time.perf_counter() - t0)
    rate = {label: n_sent / sum(times) for label, times in best.items()}
    what = f"{a.src}, {a.model}" if a.model else f"{a.size} model, random weights"
    print(f"{what}, {a.precision}, beam {a.beam}, best of {a.rounds}: base ({a.base}) {rate['base']:.1f} sent/s, "
          f"working tree {rate['working tree']:.1f} sent/s, ratio {rate['working tree'] / rate['base']:.3f}; "
          f"identical outputs {same}/{n_sent}")
    out = record.write("decode-ab", {"base": a.base, "what": what, "precision": a.precision, "beam": a.beam,
                                      "rounds": a.rounds, "sentences_per_s": rate, "ratio": rate["working tree"] /
                                      rate["base"], "identical_outputs": same, "sentences": n_sent})
    print(f"recorded in {out}")

if __name__ == "__main__":
    main()
