"""Data preparation: time and memory on Multi30k and on a 10x replicated Multi30k, and the encoding
throughput of the prepare pipeline against raw SentencePiece encoding of the same lines, the round trip
decode(encode(line)) == line over every bundled Multi30k line, and the padding of training batches at
max_tokens 4096 (padding_fraction over the token-bucketed batches of epoch 0).

    python -m benchmarks prepare

Each preparation runs in its own process (fresh peak RSS). Prints a table; records it as results/prepare/prepare-<date>.json
(the record before this format: results/prepare/prepare.json).
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
BUNDLED = HERE.parent / "aiayn" / "bundled" / "multi30k"


def _replicate(out: Path, times: int) -> None:
    for lang in ("de", "en"):
        lines = gzip.open(BUNDLED / f"train.{lang}.gz", "rt", encoding="utf-8").read()
        with open(out / f"train.{lang}", "w", encoding="utf-8") as f:
            for _ in range(times):
                f.write(lines)


def _child(prefix: str, out: str) -> None:
    """Run one preparation and print its time and peak memory."""
    from aiayn.data.datadir import find_source
    from aiayn.data.prepare import PrepareOptions, prepare

    t0 = time.perf_counter()
    sources = {"train": find_source(prefix, "de", "en"), "valid": find_source(BUNDLED / "val", "de", "en")}
    prepare(sources, out, PrepareOptions(src="de", tgt="en", vocab_size=8000), force=True)
    print(json.dumps({"seconds": time.perf_counter() - t0,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def encoding_ratio(data_dir: Path, prefix: Path) -> dict:
    """Lines/s of the prepare pipeline's encode step (read, decode, encode, filter, write) vs raw encoding."""
    import numpy as np

    from aiayn.data.datadir import DataDir, find_source
    from aiayn.data.prepare import PrepareOptions, _encode_split
    from aiayn.data.tokenizer import Vocab

    vocab = Vocab.from_files(data_dir / "spm.model")
    tok = vocab.src
    src = find_source(prefix, "de", "en")
    lines = [line.rstrip("\n") for lang in ("de", "en") for line in open(f"{prefix}.{lang}", encoding="utf-8")]
    t0 = time.perf_counter()
    tok.encode(lines)
    raw = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        _encode_split("train", src, vocab, DataDir(tmp, new=True), PrepareOptions(src="de", tgt="en"),
                      np.dtype(np.uint16), 50_000)
        pipeline = time.perf_counter() - t0
    return {"lines": len(lines), "raw_lines_per_s": len(lines) / raw, "pipeline_lines_per_s": len(lines) / pipeline,
            "ratio": raw / pipeline}


def round_trip_and_padding(data_dir: Path) -> dict:
    """Share of Multi30k lines that survive decode(encode(line)); padding of the training batches."""
    from aiayn.data.batches import TokenBatchSampler
    from aiayn.data.datadir import DataDir, read_lines

    d = DataDir(data_dir)
    tok = d.vocab().src
    lines = [line for name in ("train", "val", "test_2016_flickr") for lang in ("de", "en")
             for line in read_lines(BUNDLED / f"{name}.{lang}.gz")]
    same = sum(a == b for a, b in zip(lines, tok.decode(tok.encode(lines)), strict=True))
    src, tgt = d.split("train")
    batches = TokenBatchSampler(src.lengths + 1, tgt.lengths + 1, 4096).epoch_batches(0)
    return {"round_trip_lines": len(lines), "round_trip_identical": same,
            "padding_max_tokens": 4096, "padding_fraction": padding_fraction(batches, src.lengths, tgt.lengths)}


def main(argv: list[str] | None = None) -> None:
    import record

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--child":
        _child(argv[1], argv[2])
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for times in (1, 10):
            d = t / f"x{times}"
            d.mkdir()
            _replicate(d, times)
            res = subprocess.run([sys.executable, __file__, "--child", str(d / "train"), str(t / f"data{times}")],
                                 capture_output=True, text=True, check=True)
            r = json.loads(res.stdout.strip().splitlines()[-1])
            r.update(pairs=29000 * times)
            rows.append(r)
        enc = encoding_ratio(t / "data10", t / "x10" / "train")
        quality = round_trip_and_padding(t / "data1")
    print("| corpus | pairs | prepare seconds | peak RSS MB |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| Multi30k x{r['pairs'] // 29000} | {r['pairs']:,} | {r['seconds']:.1f} | {r['peak_rss_mb']:.0f} |")
    print(f"\nencoding {enc['lines']:,} lines on {os.cpu_count()} cores: pipeline {enc['pipeline_lines_per_s']:,.0f} "
          f"lines/s, raw SentencePiece {enc['raw_lines_per_s']:,.0f} lines/s -> {100 * enc['ratio']:.0f}% of raw")
    print(f"round trip: {quality['round_trip_identical']:,} of {quality['round_trip_lines']:,} lines identical; "
          f"padding at max_tokens 4096: {100 * quality['padding_fraction']:.1f}%")
    out = record.write("prepare", {"prepare": rows, "encoding": enc, "quality": quality})
    print(f"recorded in {out}")


if __name__ == "__main__":
    main()


def padding_fraction(batches: list[Any], src_lengths: Any, tgt_lengths: Any) -> float:
    """Padding tokens / all tokens (both sides) over ``batches``, with EOS/BOS counted as tokens."""
    pad = real = 0
    for b in batches:
        for lengths in (src_lengths[b] + 1, tgt_lengths[b] + 1):
            real += int(lengths.sum())
            pad += int(lengths.max()) * len(b) - int(lengths.sum())
    return pad / max(1, pad + real)
