"""One translation-throughput measurement, in its own process, or a trained run's decoding with and without the cache:

    python -m benchmarks translate --engine aiayn --size small --precision bf16 --beam 4
    python -m benchmarks translate --model runs/demo/run-de-en --src runs/demo/data/test.de [--ref ...test.en]

500 source sentences of 13 +- 5 random tokens, sorted by length and cut into batches of 32 (the same
batches for every engine), every output forced to exactly 20 tokens (minimum = maximum length) so that
all engines do the same work whatever their random weights predict. Prints one JSON object (a row of
``python -m benchmarks throughput``).

``--workers N`` decodes N batches at once, each on its own thread with 1/N of the cores: aiayn's
``map_in_threads`` (what ``aiayn translate --workers`` does), the same threads around HF ``generate``,
and CTranslate2's own ``inter_threads=N, intra_threads=cores/N``.

``--model RUN --src FILE``: the run's :class:`aiayn.Translator` on real sentences (batched by tokens,
sorted by length), for each of ``--precisions`` and ``--beams``, with the incremental cache and recomputing the
decoder over the whole prefix at every step (:class:`Uncached`); both must give identical translations, and the
ratio is the cache's speed-up. Prints a table; records it as ``results/translate-trained/translate-trained-<date>.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import record  # noqa: E402
from peers import BOS, EOS, PAD, SIZES, marian_config  # noqa: E402

N_SENT, BATCH, OUT_LEN = 500, 32, 20
PASSES = int(os.environ.get("AIAYN_BENCH_PASSES", "2"))   # passes over all batches; the fastest is kept


def sources(vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.rint(rng.normal(13, 5, N_SENT)), 3, 40).astype(int)
    sents = [rng.integers(4, vocab, n).tolist() for n in lengths]
    return sorted(sents, key=len)


def padded(batch: list[list[int]]) -> torch.Tensor:
    S = max(len(s) for s in batch) + 1
    t = torch.full((len(batch), S), PAD)
    for i, s in enumerate(batch):
        t[i, : len(s)] = torch.tensor(s)
        t[i, len(s)] = EOS
    return t


class _Prefix:
    """What search.py needs of a cache, for decoding that recomputes the whole prefix at every step."""

    def __init__(self, memory: torch.Tensor, src: torch.Tensor, prefix: torch.Tensor) -> None:
        self.memory, self.src, self.prefix = memory, src, prefix
        self.src_mask = src[:, None, None, :]            # only its first dimension (rows) is used by search.py

    def select(self, index: torch.Tensor) -> _Prefix:
        return _Prefix(self.memory[index], self.src[index], self.prefix[index])

    keep_ = select                                       # finished sentences leave the batch

    @property
    def step(self) -> int:
        """Tokens decoded so far."""
        return self.prefix.shape[1]

    def select_self(self, index: torch.Tensor) -> _Prefix:
        return _Prefix(self.memory, self.src, self.prefix[index])

    def expand(self, k: int) -> _Prefix:
        return self.select(torch.arange(self.src.shape[0]).repeat_interleave(k))


class Uncached(torch.nn.Module):
    """The same model decoding without its incremental cache: step t runs the decoder over all t tokens."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model, self.cfg = model, model.cfg

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        return self.model.encode(src)

    def init_cache(self, memory: torch.Tensor, src: torch.Tensor, max_len: int = 16) -> _Prefix:
        return _Prefix(memory, src, torch.empty(src.shape[0], 0, dtype=torch.long))

    def decode_step(self, tokens: torch.Tensor, cache: _Prefix, project: object = None
                    ) -> tuple[torch.Tensor, _Prefix]:
        prefix = torch.cat([cache.prefix, tokens[:, None]], dim=1)
        hidden = self.model.decode(prefix, cache.memory, cache.src)[:, -1]
        return self.model.generator(hidden, project), _Prefix(cache.memory, cache.src, prefix)


def run_aiayn(size: str, precision: str, beam: int, batches: list[list[list[int]]], workers: int = 1,
              cache: bool = True) -> float:
    from aiayn import ModelConfig, Transformer
    from aiayn.decoding.search import beam_search, greedy
    from aiayn.precision import for_inference
    from aiayn.runtime import keep_freed_memory, map_in_threads

    keep_freed_memory()                  # as `aiayn translate` (Translator) does

    d, n, h, f, v = SIZES[size]
    torch.manual_seed(0)
    model = for_inference(Transformer(ModelConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=d, n_layers=n,
                                                     n_heads=h, d_ff=f)).eval(), precision)
    if not cache:
        model = Uncached(model)
    args = dict(max_len_a=0.0, max_len_b=OUT_LEN, min_len=OUT_LEN)

    def translate(src: torch.Tensor) -> None:
        if beam == 1:
            out = greedy(model, src, **args)  # type: ignore[arg-type]
        else:
            out = [h[0] for h in beam_search(model, src, beam=beam, **args)]  # type: ignore[arg-type]
        assert all(len(o.tokens) == OUT_LEN for o in out)

    return _time(lambda tensors: map_in_threads(translate, tensors, workers), batches)


def run_hf(size: str, precision: str, beam: int, batches: list[list[list[int]]], workers: int = 1) -> float:
    from transformers import MarianMTModel

    from aiayn.runtime import map_in_threads

    torch.manual_seed(0)
    model = MarianMTModel(marian_config(size, 0.0)).eval()
    if precision == "bf16":
        model = model.to(torch.bfloat16)

    def translate(src: torch.Tensor) -> None:
        with torch.inference_mode():
            out = model.generate(input_ids=src, attention_mask=(src != PAD).long(), num_beams=beam, do_sample=False,
                                 min_new_tokens=OUT_LEN + 1, max_new_tokens=OUT_LEN + 1, decoder_start_token_id=BOS,
                                 early_stopping=True)
        assert out.shape[1] >= OUT_LEN

    return _time(lambda tensors: map_in_threads(translate, tensors, workers), batches)


def run_ct2(size: str, precision: str, beam: int, batches: list[list[list[int]]], workers: int = 1) -> float:
    import ctranslate2
    from ctranslate2.converters import TransformersConverter
    from transformers import MarianMTModel

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        # CTranslate2's Marian loader expects <pad> as the last vocabulary entry, and drops it (the decoder
        # starts from a zero embedding instead): one extra row here, so the converted model has exactly V.
        v = SIZES[size][4]
        cfg = marian_config(size, 0.0)
        cfg.vocab_size = cfg.decoder_vocab_size = v + 1
        cfg.pad_token_id = cfg.decoder_start_token_id = v
        MarianMTModel(cfg).save_pretrained(f"{tmp}/hf")
        _write_vocab(f"{tmp}/hf", v)
        TransformersConverter(f"{tmp}/hf").convert(f"{tmp}/ct2", quantization=None, force=True)
        translator = ctranslate2.Translator(f"{tmp}/ct2", device="cpu", compute_type=precision,
                                            inter_threads=workers,
                                            intra_threads=max(1, torch.get_num_threads() // workers))

        def translate(tensors: list[torch.Tensor]) -> None:
            # one call: CTranslate2 cuts it into the same batches of 32 (sorted by length, as they are) and
            # gives them to its inter_threads replicas
            tokens = [[f"t{i}" for i in row if i not in (PAD, EOS)] for src in tensors for row in src.tolist()]
            # 21 decoding steps, as the others (20 tokens, then EOS or a 21st token)
            res = translator.translate_batch(tokens, beam_size=beam, min_decoding_length=OUT_LEN + 1,
                                             max_decoding_length=OUT_LEN + 1, max_batch_size=BATCH)
            assert all(len(r.hypotheses[0]) >= OUT_LEN for r in res)

        return _time(translate, batches)


def _write_vocab(path: str, vocab: int) -> None:
    """A vocabulary for the converter: ids 0..V-1 named t0..tV-1 (EOS and UNK with Marian's names), <pad> = V."""
    names = {EOS: "</s>", 3: "<unk>"}
    vocab_map = {names.get(i, f"t{i}"): i for i in range(vocab)} | {"<pad>": vocab}
    with open(f"{path}/vocab.json", "w") as f:
        json.dump(vocab_map, f)
    # MarianTokenizer insists on loading SentencePiece models (unused here: the engines get token ids/names)
    import sentencepiece as spm

    words = [" ".join(f"w{i % 50}" for i in range(j, j + 12)) for j in range(200)]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(words), model_prefix=f"{path}/tiny", vocab_size=40,
                                   minloglevel=2)
    for name in ("source.spm", "target.spm"):
        shutil.copy(f"{path}/tiny.model", f"{path}/{name}")
    with open(f"{path}/tokenizer_config.json", "w") as f:
        json.dump({"source_lang": "xx", "target_lang": "yy", "model_max_length": 512}, f)


def _time(translate_all, batches: list[list[list[int]]]) -> float:  # type: ignore[no-untyped-def]
    """Seconds for one pass over all batches, the fastest of PASSES passes (as ``timeit`` does: a shared VM's
    noise only ever adds time); every engine is measured the same way."""
    tensors = [padded(b) for b in batches]
    translate_all(tensors[:2])   # warm-up
    best = float("inf")
    for _ in range(PASSES):
        t0 = time.perf_counter()
        translate_all(tensors)
        best = min(best, time.perf_counter() - t0)
    return best


ENGINES = {"aiayn": run_aiayn, "aiayn (no cache)": functools.partial(run_aiayn, cache=False), "HF generate": run_hf,
           "CTranslate2": run_ct2}


def trained(a: argparse.Namespace) -> None:
    """--model: the run's Translator with and without the cache, on real sentences; recorded."""
    from aiayn import Translator

    lines = open(a.src, encoding="utf-8").read().splitlines()
    refs = open(a.ref, encoding="utf-8").read().splitlines() if a.ref else None
    rows = []
    for precision in a.precisions:
        translator = Translator.load(a.model, "torch", device="cpu", precision=precision)
        cached_model = translator.engine.model
        for beam in a.beams:
            outs = {}
            for mode in ("cache", "no cache") if not a.no_uncached else ("cache",):
                translator.engine.model = cached_model if mode == "cache" else Uncached(cached_model)  # type: ignore[assignment]
                translator.translate(lines[:32], beam=beam)                                   # warm-up
                t0 = time.perf_counter()
                outs[mode] = translator.translate(lines, beam=beam)
                seconds = time.perf_counter() - t0
                row = {"precision": precision, "beam": beam, "mode": mode, "sentences": len(lines),
                       "seconds": round(seconds, 2), "sentences_per_s": round(len(lines) / seconds, 1)}
                if refs is not None:
                    import sacrebleu

                    row["bleu"] = round(sacrebleu.corpus_bleu(outs[mode], [refs]).score, 2)
                rows.append(row)
            if "no cache" in outs:
                same = sum(x == y for x, y in zip(outs["cache"], outs["no cache"], strict=True))
                rows[-2]["speedup_vs_no_cache"] = round(rows[-1]["seconds"] / rows[-2]["seconds"], 2)
                rows[-2]["identical_outputs"] = f"{same}/{len(lines)}"
    print("| precision | beam | decoding | sentences/s | seconds | BLEU | cache speed-up | identical outputs |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['precision']} | {r['beam']} | {r['mode']} | {r['sentences_per_s']} | {r['seconds']} | "
              f"{r.get('bleu', '')} | {r.get('speedup_vs_no_cache', '')} | {r.get('identical_outputs', '')} |")
    out = record.write("translate-trained", {"model": a.model, "src": a.src, "ref": a.ref, "rows": rows})
    print(f"recorded in {out}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="aiayn", choices=list(ENGINES))
    ap.add_argument("--size", default="small", choices=list(SIZES))
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1, help="batches decoded at once, each on its own thread")
    ap.add_argument("--model", help="a run dir: decode --src with its Translator, with and without the cache")
    ap.add_argument("--src", help="with --model: source sentences, one per line")
    ap.add_argument("--ref", help="with --model: references, for sacreBLEU of each setting")
    ap.add_argument("--precisions", nargs="*", default=["fp32", "bf16"], help="with --model")
    ap.add_argument("--beams", nargs="*", type=int, default=[1, 4], help="with --model")
    ap.add_argument("--no-uncached", action="store_true", help="with --model: skip the (slow) recomputing runs")
    a = ap.parse_args(argv)
    if bool(a.model) != bool(a.src):
        ap.error("--model and --src go together")
    if a.model:
        trained(a)
        return
    sents = sources(SIZES[a.size][4])
    batches = [sents[i : i + BATCH] for i in range(0, len(sents), BATCH)]
    seconds = ENGINES[a.engine](a.size, a.precision, a.beam, batches, workers=a.workers)
    print(json.dumps({"engine": a.engine, "size": a.size, "precision": a.precision, "beam": a.beam,
                      "workers": a.workers, "passes": PASSES,
                      "sentences_per_s": N_SENT / seconds, "tgt_tokens_per_s": N_SENT * OUT_LEN / seconds,
                      "seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
