"""One way to run any benchmark, from the repository's root:

    python -m benchmarks                 # the list, with what each measures
    python -m benchmarks NAME [ARGS]     # run one (NAME --help: its options)
    make bench [NAME=serve ARGS="..."]   # the same, after installing the peers (NAME defaults to throughput)

Each records what it measured the same way (record.py: the command, the commit, the machine, the date, the figures)
in benchmarks/results/. How to add one: CONTRIBUTING.md.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (module in benchmarks/, what it measures)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "throughput": ("run", "make bench: training and translation speed of aiayn and its peers on the same batches, "
                          "every row in its own process, one table"),
    "train": ("train_bench", "one training-speed row in its own process; --profile: where aiayn's step spends its "
                             "time, against this CPU's matmul rate"),
    "translate": ("translate_bench", "one translation-speed row (random weights, forced output length); --model: a "
                                     "trained run on real sentences, with and without the incremental cache"),
    "decode-ab": ("decode_ab", "decoding speed of the working tree against a revision, interleaved in one process"),
    "train-ab": ("train_ab", "training speed of the working tree against a revision, `aiayn train` alternating"),
    "export": ("export_bench", "a trained run exported to CTranslate2 against aiayn: speed, BLEU, identical lines"),
    "serve": ("serve_bench", "load test of `aiayn serve` against `aiayn translate` on the same lines; --replay: the "
                             "server's batcher without HTTP, against the CLI's and arrival-order batches"),
    "length-norm": ("length_norm", "beam search's length normalisation and alpha, chosen on a validation set"),
    "prepare": ("prepare_bench", "`aiayn prepare`: time, memory, encoding speed against raw SentencePiece"),
    "scale": ("scale_bench", "corpora larger than memory: prepare and the first minutes of training"),
    "recipe-sweep": ("recipe_sweep", "recipe trials at a fixed number of updates, scored on the validation set"),
    "finetune-domain": ("finetune_domain", "a pretrained Marian model imported and fine-tuned on a domain"),
    "argos": ("argos_bench", "a run exported as an Argos package, run by the real argostranslate against aiayn on "
                             "the same lines: identical translations"),
    "realfiles": ("realfiles_bench", "real catalogues, READMEs, subtitles, XLIFF, pages, office documents and EPUBs "
                                     "(make realfiles) through aiayn translate, measured as their tools measure them"),
    "many-users": ("many_users", "two replicas behind nginx sharing one Redis and one key database: one limit, one "
                                 "cache, a 20,000-character paragraph, Redis gone and back, /detect among all"),
    "bilingual": ("bilingual", "one model per direction of Multi30k's de, en, fr, cs, each trained as make demo's "
                               "(1,200 updates): test_2016_flickr BLEU, what a many-language model is held against"),
    "multilingual": ("multilingual", "one model for the twelve directions of Multi30k's de, en, fr, cs (or only those "
                                     "to and from English) with as many updates as their bilingual models together: "
                                     "test BLEU per direction, zero-shot and through English"),
    "multilingual-serving": ("multilingual_serving", "one server holding a multilingual model against one holding a "
                                                     "bilingual model per direction: every direction through "
                                                     "libretranslatepy, and each server's memory"),
    "chaos": ("chaos", "five minutes of two replicas behind nginx under 8 clients while Redis, PostgreSQL and the "
                       "replicas are killed and restarted: statuses, budgets, downloads, logs, memory"),
    "detect": ("detect_bench", "language detection on short texts (two and three words of Multi30k's de, en, fr, cs "
                               "lines): the detector alone, and the served languages first where it is unsure"),
    "suggestions-finetune": ("suggestions_finetune", "corrections sent to POST /suggest, exported and fine-tuned on: "
                                                     "BLEU on their domain and on Multi30k before and after"),
    "shortlist-methods": ("shortlist_methods", "how to build the shortlist (co-occurrence or eflomal, k), chosen on the "
                                               "validation set"),
    "fast": ("fast_bench", "speed against quality: a teacher and its distilled students, greedy / beam 4, with and "
                           "without the shortlist, int8 / fp32, aiayn and CTranslate2, 1 and 2 workers"),
    "constraints": ("constraints_bench", "lexically constrained beam search: phrases from the reference kept, BLEU, "
                                         "speed against unconstrained; a glossary's term use and BLEU"),
    "alignments": ("alignments", "word alignments from each decoder layer's attention against eflomal's, on the "
                                 "model's own translations: precision, recall, AER"),
    "markup": ("markup_bench", "HTML through translation on test lines with inline tags: well-formed output, every tag "
                               "kept, BLEU of the text, tags placed on eflomal's words"),
    "engines": ("engines_bench", "the same requests through aiayn's engine and CTranslate2 (one pipeline): identical "
                                 "text, word alignments and HTML, and the time each takes"),
    "pdf": ("pdf_bench", "real PDFs through aiayn translate with a trained run: paragraphs translated, still in the "
                         "source language, overlaps, qpdf --check, fonts embedded, annotations, time per page"),
    "pdf-corpus": ("pdf_corpus", "the PDF benchmark's real PDFs built again: Debian's, LibreOffice's (and their .docx), "
                                 "LaTeX's two-column class notes and slides"),
    "documents": ("documents_bench", "a long Word document through aiayn translate --input/--output: time, paragraphs and "
                                     "bold runs in and out"),
    "files": ("files_bench", "documents that come back whole (placeholders, inline tags, structure) on real files from "
                             "public projects, and /translate_file under a burst of uploads and zip bombs"),
    "paragraphs": ("paragraphs", "consecutive test sentences joined into one input: BLEU and length with and without "
                                 "sentence splitting, against each sentence translated on its own"),
    "runon": ("runon", "captions without their final stops joined several to an input, against the same captions one "
                       "by one: BLEU and length lost, per share of stops removed and captions joined"),
    "confidence": ("confidence_bench", "calibrated confidence per sentence: Pearson r with sentence chrF and ROC AUC "
                                       "for the sentences under the threshold, on the run it was fitted on and others; "
                                       "its cost in decoding time; a fallback cascade's BLEU and speed"),
    "pivot": ("pivot_bench", "a pair translated through a pivot language (two models in turn) against a direct model "
                             "of the same size and budget: BLEU, chrF, speed"),
    "repair": ("repair_bench", "degenerate output on a test set: sentences flagged (loop, copy, length) and BLEU with "
                               "and without decoding them again"),
    "static-step": ("static_step", "a decoder step of static shape (a cache allocated at its limit, written by position) "
                                   "against today's, eager and compiled with torch.compile"),
    "cli": ("cli_bench", "`aiayn translate` over a test set repeated, start-up included, aiayn's engine against "
                         "CTranslate2: sentences/s, the ratio, BLEU, identical lines"),
    "startup": ("startup_bench", "a first translation: one sentence through `aiayn translate` in a new process, per "
                                 "engine, against `import torch` alone"),
    "gpu": ("gpu_bench", "on a CUDA GPU: the compiled static-shape step in CUDA graphs against today's step and "
                         "CTranslate2, greedy and beam 4; training tokens/s with train.compile off and on"),
    "split": ("split_bench", "sentence splitters (sentencex, pysbd, blingfire, a baseline) on Universal Dependencies' "
                             "held-out text: boundary precision, recall, F1 and speed per language"),
    "request-path": ("request_path", "LibreTranslate's POST /translate traced through aiayn's modules, per engine: "
                                     "the modules entered, in order, and any call back up"),
    "index": ("index", "the records' index, benchmarks/RECORDS.md: each benchmark's records, its newest, who cites them"),
    "ci-log": ("ci_log", "a CI transcript summarised into results/ci.md, one section a run"),
}


def usage() -> str:
    width = max(map(len, BENCHMARKS))
    rows = "\n".join(f"  {name:{width}}  {what}" for name, (_, what) in BENCHMARKS.items())
    return f"usage: python -m benchmarks NAME [ARGS]   (NAME --help for its options)\n\n{rows}"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, args = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"python -m benchmarks: no benchmark {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))                    # the benchmarks import one another as top-level modules
    import record

    record.COMMAND[:] = ["python", "-m", "benchmarks", name, *args]
    importlib.import_module(BENCHMARKS[name][0]).main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
