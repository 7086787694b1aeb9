"""Start from a pretrained Marian model and fine-tune it on a domain, end to end with the `aiayn` commands, on local
data (the hub is not reachable here): the README's "Start from a pretrained model" figures.

1. Multi30k de->en is split by topic: the captions whose English side is about water (beach, pool, boat, surf,
   ...) are the *domain*; the rest is *general*. Domain: its training captions less 400 (fine-tuning), the
   water captions of val (validation), those 400 + the water captions of test_2016_flickr (the held-out test).
2. A post-norm model (Marian is post-norm) is trained on the general data only (`aiayn train`, a fixed number
   of updates so the result does not depend on the machine's speed), exported (`aiayn export --format
   huggingface`) and rewritten in OPUS-MT's layout (</s> 0, <unk> 1, <pad> last and the decoder's start token,
   no <s>, separate source.spm / target.spm, no aiayn-export.json): a Marian checkpoint as the hub has them.
3. `aiayn import --from huggingface` reads it. Exactness against transformers on the domain test: teacher-forced
   log-probabilities, greedy and beam output (the checkpoint's beam size and length penalty).
4. `aiayn prepare --vocab-from` the imported run, `aiayn train --init-from` it on the domain, `aiayn evaluate`
   before and after, on the domain test and the general test.

    python -m benchmarks finetune-domain [--work runs/finetune] [--updates 1200] [--finetune-updates 300]

Records it as benchmarks/results/finetune/finetune-<date>.json. Steps already done in --work are reused.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import subprocess
import sys
import time
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import record  # noqa: E402

WATER = re.compile(r"\b(water|beach|ocean|pool|swim\w*|surf\w*|boat\w*|lake|river|wave\w*|sea|kayak\w*|canoe\w*)\b",
                   re.I)


def aiayn(*args: str) -> str:
    cmd = [sys.executable, "-m", "aiayn", *args]
    print("$ aiayn " + " ".join(args), flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    return out.stdout


def corpus(name: str, lang: str) -> list[str]:
    path = resources.files("aiayn") / "bundled" / "multi30k" / f"{name}.{lang}.gz"
    with gzip.open(str(path), "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write(prefix: Path, pairs: list[tuple[str, str]]) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for i, lang in enumerate(("de", "en")):
        Path(f"{prefix}.{lang}").write_text("".join(p[i] + "\n" for p in pairs), encoding="utf-8")


def splits(work: Path) -> dict[str, int]:
    """The general and domain splits, written under work/text."""
    sets = {name: list(zip(corpus(name, "de"), corpus(name, "en"), strict=True))
            for name in ("train", "val", "test_2016_flickr")}
    is_water = lambda p: bool(WATER.search(p[1]))   # noqa: E731
    water_train = [p for p in sets["train"] if is_water(p)]
    out = {
        "general/train": [p for p in sets["train"] if not is_water(p)],
        "general/valid": [p for p in sets["val"] if not is_water(p)],
        "general/test": [p for p in sets["test_2016_flickr"] if not is_water(p)],
        "domain/train": water_train[:-400],
        "domain/valid": [p for p in sets["val"] if is_water(p)],
        "domain/test": water_train[-400:] + [p for p in sets["test_2016_flickr"] if is_water(p)],
    }
    for name, pairs in out.items():
        write(work / "text" / name, pairs)
    return {name: len(pairs) for name, pairs in out.items()}


def opus_layout(hf_dir: Path, out: Path, beam: int, lenpen: float) -> dict[str, Any]:
    """An aiayn Hugging Face export rewritten as OPUS-MT checkpoints are laid out."""
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.MarianMTModel.from_pretrained(str(hf_dir))
    old = json.loads((hf_dir / "vocab.json").read_text())
    pieces = [p for p, _ in sorted(old.items(), key=lambda kv: kv[1]) if p not in ("<pad>", "<s>", "</s>", "<unk>")]
    order = ["</s>", "<unk>", *pieces, "<s>"]            # <s>'s row becomes <pad>'s: Marian starts decoding with it
    rows = torch.tensor([old[p] for p in order])
    table = {p: i for i, p in enumerate(["</s>", "<unk>", *pieces, "<pad>"])}
    pad = len(table) - 1
    cfg = model.config.to_dict()
    cfg.update(vocab_size=len(table), decoder_vocab_size=len(table), pad_token_id=pad, eos_token_id=0,
               decoder_start_token_id=pad, bos_token_id=None, forced_eos_token_id=0)
    for k in ("transformers_version", "architectures", "_name_or_path"):
        cfg.pop(k, None)
    new = transformers.MarianMTModel(transformers.MarianConfig(**cfg))
    state = {k: v for k, v in model.state_dict().items() if "embed_positions" not in k}
    for k in ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
              "lm_head.weight"):
        if k in state:
            state[k] = state[k][rows]
    state["final_logits_bias"] = state["final_logits_bias"][:, rows]
    new.load_state_dict(state, strict=False)
    new.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad, forced_eos_token_id=0, num_beams=beam,
        length_penalty=lenpen, max_length=256, bad_words_ids=[[pad]])
    if out.exists():
        shutil.rmtree(out)
    new.save_pretrained(out)
    (out / "vocab.json").write_text(json.dumps(table, ensure_ascii=False))
    spm = next(hf_dir.glob("source.spm"))
    shutil.copyfile(spm, out / "source.spm")
    shutil.copyfile(hf_dir / "target.spm", out / "target.spm")
    (out / "tokenizer_config.json").write_text(json.dumps({"source_lang": "de", "target_lang": "en",
                                                            "tokenizer_class": "MarianTokenizer"}))
    return {"vocab_size": len(table), "pad": pad}


def exactness(run: Path, hf_dir: Path, src: list[str], beams: tuple[int, ...]) -> dict[str, Any]:
    """The imported run against transformers on the same lines: teacher-forced log-probabilities of transformers'
    own greedy output, and greedy / beam output (aiayn's length limit given to generate)."""
    import transformers

    from aiayn import Translator
    from aiayn.config import BOS_ID
    from aiayn.decoding.hypotheses import max_length

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = transformers.MarianTokenizer.from_pretrained(str(hf_dir))
        model = transformers.MarianMTModel.from_pretrained(str(hf_dir)).eval()
    t = Translator.load(run, "torch", device="cpu", precision="fp32")
    native = t.engine.vocab.tgt.ids.to_native                                   # aiayn id -> Marian id
    start, pad = model.config.decoder_start_token_id, model.config.pad_token_id
    to_marian = lambda j: start if j == BOS_ID else int(native[j])       # noqa: E731
    result: dict[str, Any] = {"sentences": len(src)}
    d = t.engine.decode
    worst = 0.0
    for beam in beams:
        ours = [[to_marian(j) for j in h[0].tokens] for h in t.engine.translate_hypotheses(src, beam=beam)]
        theirs = []
        for line in src:
            enc = tok([line], return_tensors="pt")
            limit = max_length(enc["input_ids"].shape[1] - 1, d.max_len_a, d.max_len_b, t.engine.model.cfg.max_positions)
            with torch.no_grad():                    # aiayn's limit counts the words; transformers' counts the EOS
                ids = model.generate(**enc, num_beams=beam, do_sample=False, max_new_tokens=limit + 1,
                                     length_penalty=d.lenpen, early_stopping=True)[0].tolist()[1:]
            theirs.append([j for j in ids if j != pad][: ids.index(0) if 0 in ids else None])
        same = sum(a == b for a, b in zip(ours, theirs, strict=True))
        result["greedy" if beam == 1 else f"beam{beam}"] = {"identical": same, "share": round(same / len(src), 4)}
        if beam == 1:
            for line, y in zip(src[:200], theirs[:200], strict=False):      # teacher-forced on transformers' output
                enc = tok([line], return_tensors="pt")
                with torch.no_grad():
                    hf = model(**enc, decoder_input_ids=torch.tensor([[start] + y])).logits[0].log_softmax(-1)
                    s = t.engine.vocab.src.encode([line])[0] + [2]
                    inv = {int(n): i for i, n in enumerate(native) if n >= 0}
                    ys = [inv[j] for j in y]
                    a = t.engine.model(torch.tensor([s]), torch.tensor([[BOS_ID] + ys]))[0]
                cols = [i for i in range(a.shape[1]) if i != 0]
                worst = max(worst, (a[:, cols] - hf[:, [to_marian(i) for i in cols]]).abs().max().item())
    result["max_abs_logprob_difference"] = worst
    return result


def evaluate(run: Path, prefix: Path) -> dict[str, Any]:
    r = json.loads(aiayn("evaluate", "--model", str(run), "--src", f"{prefix}.de", "--ref", f"{prefix}.en", "--json",
                         "--hyps", str(run / "hyps" / f"{prefix.parent.name}-{prefix.name}.hyp")))
    return {k: r[k] for k in ("bleu", "bleu_lc", "chrf", "sentences")}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "finetune")
    ap.add_argument("--updates", type=int, default=1200, help="updates of the general model")
    ap.add_argument("--finetune-updates", type=int, default=300)
    a = ap.parse_args(argv)
    w = a.work
    report: dict[str, Any] = {"splits": splits(w)}
    text = w / "text"
    if not (w / "data-general" / "manifest.json").is_file():
        aiayn("prepare", "--train", str(text / "general/train"), "--valid", str(text / "general/valid"), "--test",
              str(text / "general/test"), "--src", "de", "--tgt", "en", "--vocab-size", "8000", "--out",
              str(w / "data-general"))
    general = w / "general"
    if not (general / "averaged").is_dir():
        aiayn("train", "--data", str(w / "data-general"), "--out", str(general), "--config", "multi30k-de-en-short",
              "--set", "norm=post", "--set", "lr_factor=1.0", "--set", "max_minutes=0", "--max-steps", str(a.updates))
    last = [json.loads(x) for x in (general / "metrics.jsonl").read_text().splitlines() if '"elapsed_s"' in x][-1]
    report["general_train"] = {"updates": last["step"], "seconds": round(last["elapsed_s"])}
    shutil.rmtree(w / "hf", ignore_errors=True)
    aiayn("export", "--model", str(general), "--format", "huggingface", "--out", str(w / "hf"))
    report["opus_layout"] = opus_layout(w / "hf", w / "opus-mt-de-en", beam=5, lenpen=2.0)
    shutil.rmtree(w / "imported", ignore_errors=True)
    report["import"] = aiayn("import", "--from", "huggingface", str(w / "opus-mt-de-en"), "--out",
                             str(w / "imported")).strip()
    domain_src = (text / "domain/test.de").read_text(encoding="utf-8").splitlines()
    report["exactness"] = exactness(w / "imported", w / "opus-mt-de-en", domain_src, beams=(1, 5))
    print(json.dumps(report["exactness"]), flush=True)
    if not (w / "data-domain" / "manifest.json").is_file():
        aiayn("prepare", "--train", str(text / "domain/train"), "--valid", str(text / "domain/valid"), "--test",
              str(text / "domain/test"), "--src", "de", "--tgt", "en", "--vocab-from", str(w / "imported"), "--out",
              str(w / "data-domain"))
    report["before"] = {"domain": evaluate(w / "imported", text / "domain/test"),
                        "general": evaluate(w / "imported", text / "general/test")}
    print(json.dumps(report["before"]), flush=True)
    tuned = w / "finetuned"
    shutil.rmtree(tuned, ignore_errors=True)
    t0 = time.time()
    aiayn("train", "--data", str(w / "data-domain"), "--out", str(tuned), "--init-from", str(w / "imported"),
          "--set", "warmup=100", "--set", "lr_factor=0.5", "--set", "p_drop=0.1", "--set", "save_every_steps=50",
          "--set", "valid_every_steps=50", "--set", "average_last=0", "--set", "max_minutes=0",
          "--max-steps", str(a.finetune_updates))
    report["finetune_seconds"] = round(time.time() - t0)
    report["finetune_settings"] = {"updates": a.finetune_updates, "warmup": 100, "lr_factor": 0.5, "p_drop": 0.1,
                                   "checkpoint": "best (domain valid BLEU)"}
    report["after"] = {"domain": evaluate(tuned, text / "domain/test"),
                       "general": evaluate(tuned, text / "general/test")}
    print(json.dumps(report["after"]), flush=True)
    out = record.write("finetune", report)
    print(f"recorded in {out}")


if __name__ == "__main__":
    main()
