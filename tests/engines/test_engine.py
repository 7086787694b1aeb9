"""--engine ctranslate2 behind translate, evaluate and serve: the same output as aiayn's engine (the conversion is
exact in fp32), every decoding setting mapped or refused by name, the conversion cached and rebuilt when the weights
change, and the server's answers on it equal to the CLI's at every concurrency."""

from __future__ import annotations

import dataclasses
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from aiayn import Translator
from aiayn.checkpoint import MODEL
from aiayn.cli.main import main
from aiayn.config import DecodeConfig
from aiayn.data.corpora import BUNDLED
from aiayn.engines.processes import ProcessEngine
from aiayn.engines.torch import TorchEngine
from aiayn.rundir import RunDir
from aiayn.serving.models import Served

from ..helpers import LEGACY, Server, cli_error, copy_lines, workers_of

pytest.importorskip("ctranslate2", reason="CTranslate2 is the optional aiayn[export] extra")
from aiayn.engines.auto import AutoEngine, ctranslate2, decode_processes, load  # noqa: E402
from aiayn.engines.ctranslate2 import OPTIONS  # noqa: E402


@pytest.fixture()
def run(copy_model: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(copy_model, out, ignore=shutil.ignore_patterns("engines"))
    return out


def test_every_decoding_setting_maps_to_ctranslate2_or_is_refused_by_name(run: Path) -> None:
    assert set(OPTIONS) == {f.name for f in dataclasses.fields(DecodeConfig)}
    with pytest.raises(ValueError, match="length_norm='gnmt'"):
        ctranslate2(run, length_norm="gnmt")
    c = Translator(ctranslate2(run, device="cpu"))
    with pytest.raises(ValueError, match="sampling with beam=4"):
        c.translate(["a b c"], sampling=True, beam=4)
    with pytest.raises(ValueError, match="precision="):
        c.translate(["a b c"], precision="int8")


def test_it_translates_as_aiayn_does_and_its_conversion_is_cached(run: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    lines = copy_lines(40) + ["", "   "]
    torch_ = Translator.load(run, "torch", device="cpu", workers=1)
    c = Translator(ctranslate2(run, device="cpu"))
    cache = RunDir(run).engine_cache("ctranslate2")
    made = sorted(d.name for d in cache.iterdir())
    assert len(made) == 1 and (cache / made[0] / "check.json").is_file()      # checked on the validation lines
    for beam in (1, 4):
        assert c.translate(lines, beam=beam) == torch_.translate(lines, beam=beam)
    ours, theirs = (t.engine.translate_hypotheses(lines[:8], beam=4, nbest=3) for t in (torch_, c))
    for a, b in zip(ours, theirs, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-3)
    # the commands, with the cached conversion (no second one)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    assert main(["translate", "--model", str(run), "--engine", "ctranslate2", "--device", "cpu", "--beam", "4",
                 "--input", str(src), "--output", str(tmp_path / "out.txt")]) == 0
    assert (tmp_path / "out.txt").read_text().splitlines() == torch_.translate(lines, beam=4)
    assert sorted(d.name for d in cache.iterdir()) == made
    assert main(["evaluate", "--model", str(run), "--engine", "ctranslate2", "--src", str(src), "--ref", str(src),
                 "--json"]) == 0
    assert '"bleu"' in capsys.readouterr().out
    assert main(["evaluate", "--model", str(run), "--engine", "ctranslate2", "--src", str(src), "--ref", str(src),
                 "--length-norm", "gnmt"]) == 2
    assert "length_norm='gnmt'" in cli_error(capsys.readouterr().err, "evaluate")


def test_a_min_len_past_the_length_limit_ends_at_the_limit_as_in_aiayns_search(run: Path) -> None:
    """min_len beyond a line's length limit (max_len_a * n + max_len_b): the limit wins in both engines (CTranslate2
    refuses a minimum above its maximum: the default engine answered such a request with a 500). Greedy search gives
    the same words; beam search the same lengths (at a forced end aiayn's search counts p(EOS) in a beam's score,
    CTranslate2, with EOS forbidden up to its maximum, does not: the beams may rank differently)."""
    lines = copy_lines(6, seed=5)
    torch_ = Translator.load(run, "torch", device="cpu", workers=1)
    c = Translator(ctranslate2(run, device="cpu"))
    ask = {"min_len": 30, "max_len_a": 1.0, "max_len_b": 3}
    want = torch_.translate(lines, beam=1, **ask)
    assert c.translate(lines, beam=1, **ask) == want
    assert [len(t.split()) for t in want] == [len(line.split()) + 3 for line in lines]      # (the limit cut them)
    assert [len(t.split()) for t in c.translate(lines, beam=4, **ask)] == [len(line.split()) + 3 for line in lines]
    # in aiayn's search a min_len past the limit is a min_len at the limit: the same beams, scored the same (it gave
    # every beam's forced EOS -1e4, and float32 ranked sums that large by their rounding)
    five = ["a b c d e", "f g h i j", "c a d e b"]                   # limit 8 each
    at, past = (torch_.engine.translate_hypotheses(five, beam=4, nbest=2, min_len=n, max_len_a=1.0, max_len_b=3)
                for n in (8, 30))
    assert [[(h.tokens, h.score) for h in hs] for hs in at] == [[(h.tokens, h.score) for h in hs] for hs in past]


def test_a_run_that_records_no_data_dir_is_converted_unchecked(run: Path, caplog: pytest.LogCaptureFixture) -> None:
    """data.json's data_dir null (a run kept without its data, as the tests' own): converted, said not checked."""
    info = json.loads((run / "data.json").read_text())
    (run / "data.json").write_text(json.dumps({**info, "data_dir": None}))
    lines = copy_lines(8, seed=2)
    assert Translator(ctranslate2(run, device="cpu")).translate(lines) == \
        Translator.load(run, "torch", device="cpu", workers=1).translate(lines)
    assert "the conversion is not checked" in caplog.text
    assert not list(RunDir(run).engine_cache("ctranslate2").glob("*/check.json"))


def test_a_stop_is_asked_between_waves_that_give_what_one_call_gives(run: Path) -> None:
    """With ``stop`` (a server's batch), CTranslate2 is called in waves of one batch per thread, shortest lines first:
    each line's hypotheses as in one call, in its place; a stop that comes true stops it before the next wave."""
    from aiayn.decoding.hypotheses import Stopped

    c = ctranslate2(run, device="cpu")
    lines = copy_lines(40, seed=9)
    ids = c.encode(lines)
    d = c.settings(beam=4, nbest=2, batch_tokens=80)                # waves of 20 source tokens: many
    one = c.decode_lines(ids, d, None)
    waves = c.decode_lines(ids, d, None, stop=lambda: False)
    assert [[h.tokens for h in hs] for hs in waves] == [[h.tokens for h in hs] for hs in one]
    assert [h.score for hs in waves for h in hs] == pytest.approx([h.score for hs in one for h in hs], abs=1e-4)
    asked: list[int] = []
    with pytest.raises(Stopped):
        c.decode_lines(ids, d, None, stop=lambda: asked.append(1) or len(asked) > 1)
    assert len(asked) == 2                                         # before the first wave, then before the second


def test_a_stale_conversion_is_rebuilt_when_the_weights_change(run: Path) -> None:
    lines = copy_lines(20)
    before = Translator(ctranslate2(run, device="cpu")).translate(lines)
    cache = RunDir(run).engine_cache("ctranslate2")
    old = sorted(d.name for d in cache.iterdir())
    ckpt = RunDir.locate(run)[1]
    weights = load_file(str(ckpt / MODEL))
    name = next(k for k in weights if k.endswith("out_proj.weight") and k.startswith("decoder"))
    weights[name] = torch.zeros_like(weights[name])                       # a different model
    save_file(weights, str(ckpt / MODEL))
    after = Translator(ctranslate2(run, device="cpu"))
    new = sorted(d.name for d in cache.iterdir())
    assert len(new) == 1 and new != old                                   # converted again, the stale one removed
    assert after.translate(lines) == Translator.load(run, "torch", device="cpu", workers=1).translate(lines) != before


def test_the_server_on_ctranslate2_answers_as_the_cli(run: Path) -> None:
    ctranslate2(run, device="cpu")                         # converted before the server starts
    lines = copy_lines(48, seed=3)
    want = Translator.load(run, "torch", device="cpu", workers=1).translate(lines, beam=4)
    s = Server("--engine", "ctranslate2", "--workers", "2", "--beam", "4", model=run)
    try:
        for concurrency in (1, 16):
            with ThreadPoolExecutor(concurrency) as pool:
                answers = list(pool.map(lambda i: s.post("/translate", {"text": lines[i : i + 3]}),
                                        range(0, len(lines), 3)))
            assert [a[0] for a in answers] == [200] * len(answers)
            assert [t for a in answers for t in a[2]["translations"]] == want
        _, _, info = s.request("GET", "/info")
        assert info["models"][0]["engine"] == "ctranslate2" and info["models"][0]["memory_bytes"] > 0
        assert s.post("/attention", {"text": "a b c"})[0] == 400                # aiayn's own engine only
    finally:
        assert s.stop() == 0
    assert "Traceback" not in s.output()


def test_lines_decoded_under_a_rounded_up_limit_come_out_as_under_their_own(run: Path) -> None:
    """ctranslate2_limited groups lines by a limit rounded up (few large calls); a line whose search ran on to
    within a token of its own limit is decoded again under it. With limits tight enough to cut many lines short, on
    a model made worse (searches that wander, beams that end unevenly), every line equals its own-limit call's."""
    from aiayn.decoding.hypotheses import max_length
    from aiayn.engines.ctranslate2 import ctranslate2_limited

    ckpt = RunDir.locate(run)[1]
    weights = load_file(str(ckpt / MODEL))
    g = torch.Generator().manual_seed(0)
    for name, w in weights.items():
        if name.startswith("decoder") and w.is_floating_point():
            w += w.std() * torch.randn(w.shape, generator=g)
    save_file(weights, str(ckpt / MODEL))
    c = ctranslate2(run, device="cpu")
    lines = copy_lines(60, seed=5)
    pieces = [[c.vocab.src.piece(t) for t in ids] for ids in c.vocab.src.encode(lines)]
    cut = 0
    for beam, lenpen, nbest in ((4, 1.0, 1), (4, 0.0, 1), (1, 0.0, 1), (4, 0.6, 3)):
        options = dict(beam_size=beam, length_penalty=lenpen, return_scores=True, num_hypotheses=nbest)
        for a, b in ((0.5, 1), (1.0, 0), (1.0, 3)):
            limit = lambda n: max_length(n, a, b, c.cfg.max_positions)  # noqa: B023, E731 - used in this iteration
            own = [c.translator.translate_batch([p], max_decoding_length=limit(len(p)), **options)[0] for p in pieces]
            got = ctranslate2_limited(c.translator, pieces, limit, **dict(options))
            assert [h for h, _, _ in got] == [r.hypotheses for r in own], (beam, lenpen, nbest, a, b)
            assert [x for _, s, _ in got for x in s] == pytest.approx([x for r in own for x in r.scores], abs=1e-4)
            cut += sum(max(map(len, r.hypotheses)) >= limit(len(p)) - 1 for r, p in zip(own, pieces, strict=True))
    assert cut > 100                                      # the limits bite: the check is what keeps these lines right


def test_auto_decodes_on_ctranslate2_and_hands_what_it_cannot_to_aiayns_engine_saying_why(
        run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """--engine auto (the default): translate and evaluate run on CTranslate2 and say so; constraints go to aiayn's own
    engine, loaded then and said why; word alignments come from CTranslate2's attention, equal to aiayn's; without
    CTranslate2 installed, auto is aiayn's own engine."""
    import importlib.util
    import logging

    caplog.set_level(logging.INFO)
    lines = copy_lines(24, seed=11)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(lines) + "\n")
    own = Translator.load(run, "torch", device="cpu", workers=1)
    base = ["translate", "--model", str(run), "--device", "cpu", "--input", str(src), "--output", str(out), "--quiet"]
    assert main(base) == 0
    assert out.read_text().splitlines() == Translator(ctranslate2(run, device="cpu")).translate(lines)
    assert "--engine auto: CTranslate2" in caplog.text and "aiayn's own engine decodes it" not in caplog.text
    assert main([*base, "--alignments"]) == 0
    assert [tuple(r.split(" ||| ")) for r in out.read_text().splitlines()] == own.translate_aligned(lines)
    phrases = [[_absent(line)] for line in lines]                        # what the copy task would not write
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(p) + "\n" for p in phrases))
    started: list[int] = []                         # aiayn's engine for auto: in worker processes, as --engine torch
    real_load = ProcessEngine.load
    monkeypatch.setattr(ProcessEngine, "load", classmethod(
        lambda cls, path, n, **kw: started.append(n) or real_load(path, n, **kw)))
    assert main([*base, "--beam", "4", "--constraints", str(tmp_path / "c.jsonl")]) == 0
    assert out.read_text().splitlines() == own.translate(lines, beam=4, constraints=phrases)
    assert all(p[0] in t for p, t in zip(phrases, out.read_text().splitlines(), strict=True))
    assert "--engine auto: constraints (a glossary): aiayn's own engine decodes it" in caplog.text
    assert started == ([n] if (n := decode_processes(run, {"device": "cpu"})) else [])
    assert main([*base, "--no-processes", "--beam", "4", "--constraints", str(tmp_path / "c.jsonl")]) == 0
    assert out.read_text().splitlines() == own.translate(lines, beam=4, constraints=phrases) and len(started) <= 1
    assert main(["evaluate", "--model", str(run), "--device", "cpu", "--src", str(src), "--ref", str(src)]) == 0
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ctranslate2" else real(name, *a))
    assert isinstance(load(run, "auto", device="cpu"), TorchEngine)
    assert "CTranslate2 is not installed" in caplog.text


@pytest.mark.ci      # CI's (make test-ci): a server on auto, 6 s (make test: one on CTranslate2)
def test_the_server_on_auto_names_its_engine_and_serves_constraints_and_attention(run: Path) -> None:
    """What CTranslate2 cannot do goes to aiayn's own engine, loaded when first needed into worker processes (on a CPU,
    as --engine torch), and the model stays auto when the server unloads and loads it again."""
    ctranslate2(run, device="cpu")                         # converted before the server starts
    lines = copy_lines(12, seed=13)
    own = Translator.load(run, "torch", device="cpu", workers=1)
    s = Server("--engine", "auto", "--beam", "4", "--workers", "2", model=run)
    try:
        assert workers_of(s.proc.pid) == []                # not loaded until something needs it
        _, _, info = s.request("GET", "/info")
        assert info["models"][0]["engine"] == "ctranslate2"
        metrics = s.request("GET", "/metrics")[2].decode()
        assert 'aiayn_model_engine{engine="ctranslate2"' in metrics and s.metric("aiayn_model_engine") == 1
        status, _, body = s.post("/translate", {"text": lines})
        assert status == 200 and body["translations"] == own.translate(lines, beam=4)
        phrases = [[_absent(line)] for line in lines]
        status, _, body = s.post("/translate", {"text": lines, "constraints": phrases})
        assert status == 200 and body["translations"] == own.translate(lines, beam=4, constraints=phrases)
        assert all(p[0] in t for p, t in zip(phrases, body["translations"], strict=True))
        assert len(workers_of(s.proc.pid)) == 2            # its model in two worker processes, none in the server's
        assert s.post("/attention", {"text": lines[0]})[0] == 200
    finally:
        assert s.stop() == 0
    assert "Traceback" not in s.output() and "aiayn's own engine decodes it" in s.output()
    served = Served.load(run, "auto", lazy=True, device="cpu")          # unloaded (--memory-budget) and loaded again
    for _ in range(2):
        served.open()
        assert isinstance(served.translator, AutoEngine) and served.describe()["engine"] == "ctranslate2"
        served.close()


def _absent(line: str) -> str:
    """Three times a letter, where the copy-task line lacks it so: the copy model would not write it unconstrained."""
    return next(p for p in (f"{c} {c} {c}" for c in "abcdefghij") if f" {p} " not in f" {line} ")


def test_the_command_line_on_ctranslate2_translates_without_pytorch(run: Path, tmp_path: Path) -> None:
    """`aiayn translate --engine ctranslate2` (and auto, which picks it) imports no PyTorch (issue 54: `import torch`
    alone is most of a first translation's time): with torch made unimportable in a new process, it translates as
    aiayn's engine does, word alignments included (read from CTranslate2's attention)."""
    import subprocess
    import sys

    lines = copy_lines(12)
    torch_ = Translator.load(run, "torch", device="cpu", workers=1)
    parameters = sum(p.numel() for p in torch_.engine.model.parameters())
    assert ctranslate2(run, device="cpu").parameters == parameters      # the conversion (that needs PyTorch), once
    info = next(RunDir(run).engine_cache("ctranslate2").glob("*/aiayn-export.json"))
    info.write_text(json.dumps({k: v for k, v in json.loads(info.read_text()).items() if k != "parameters"}))
    assert ctranslate2(run, device="cpu").parameters == parameters      # a conversion from before they were recorded
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    no_torch = "import sys; sys.modules['torch'] = None; from aiayn.cli.main import main; sys.exit(main(sys.argv[1:]))"

    def translate(*args: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", no_torch, "translate", "--model", str(run), "--input", str(src),
                               "--quiet", *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        return done.stdout.splitlines()

    assert translate("--engine", "ctranslate2", "--beam", "4") == torch_.translate(lines, beam=4)
    import ctranslate2 as ct2

    auto = translate("--engine", "ctranslate2", "--precision", "auto", "--beam", "4")   # what CTranslate2 has here
    assert len(auto) == len(lines)
    if "bfloat16" not in ct2.get_supported_compute_types("cpu"):
        assert auto == torch_.translate(lines, beam=4)                   # fp32 (it was bf16, and failed)
    want = [f"{h} ||| {a}" for h, a in zip(torch_.translate(lines), torch_.engine.alignments(lines, [
        h[0].tokens for h in torch_.engine.translate_hypotheses(lines)]), strict=True)]
    assert translate("--alignments", "--beam", "1") == want                 # --engine auto: CTranslate2
    help_ = subprocess.run([sys.executable, "-c", no_torch, "translate", "--help"], capture_output=True, text=True,
                           timeout=60)
    assert help_.returncode == 0 and "--engine" in help_.stdout


def test_ctranslate2_gives_the_runner_up_and_the_log_probability_aiayn_gives(run: Path) -> None:
    """The confidence reads the best hypothesis' log-probability and its runner-up (hypotheses.features): CTranslate2
    is asked for two hypotheses where one is wanted, and its length-normalised score turned back into the sum of
    log-probabilities, as aiayn's own search has them."""
    lines = ["a b c d e", "j i h g", "c c d"]
    fast = ctranslate2(run, device="cpu", beam=4)
    own = Translator.load(run, "torch", device="cpu", beam=4, workers=1)
    got, want = fast.translate_hypotheses(lines), own.engine.translate_hypotheses(lines)
    for (g,), (w,) in zip(got, want, strict=True):
        assert g.tokens == w.tokens and g.logprob == pytest.approx(w.logprob, abs=2e-3)
        assert g.runner_up is not None and w.runner_up is not None
        assert g.runner_up[0] == pytest.approx(w.runner_up[0], abs=2e-3)
    sure = [t.confidence for t in Translator(fast).translations(lines)]
    assert sure == pytest.approx([t.confidence for t in own.translations(lines)], abs=1e-3)


# (moved from the hardening tests: a guard issue 51's audit broke without a test failing)
def test_ctranslate2_is_asked_for_beam_size_hypotheses_to_see_where_its_search_ended() -> None:
    from aiayn.engines.ctranslate2 import ctranslate2_limited

    asked: list[dict[str, Any]] = []

    class Result:
        def __init__(self, n: int) -> None:
            self.hypotheses, self.scores, self.attention = [["a"]] * n, [-1.0] * n, []

    class Fake:
        def translate_batch(self, batch: list[list[str]], **options: Any) -> list[Any]:
            asked.append(options)
            return [type("Done", (), {"result": lambda self, n=options["num_hypotheses"]: Result(n)})()
                    for _ in batch]

    out = ctranslate2_limited(Fake(), [["x"] * 3], lambda n: n + 5, beam_size=4, length_penalty=1.0, num_hypotheses=2)
    assert asked[0]["num_hypotheses"] == 4 and len(out[0][0]) == 2


def test_ctranslate2_aligns_from_its_searchs_attention_as_from_a_second_pass(run: Path) -> None:
    """CTranslate2 returns each hypothesis's attention while it decodes (return_attention), and the word alignment
    read from it is the one a second pass forced to the same tokens gives, both ways, for beam search and greedy: the
    rows are the hypothesis's own, none shifted. On a model of real text (the legacy one, German lines of Multi30k's
    test set, decoded in one batch), whose first rows differ between lines: CTranslate2's beam search returns a line's
    first row from another line of its batch, which the engine replaces."""
    import gzip

    with gzip.open(BUNDLED / "multi30k" / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        german = [next(f).strip() for _ in range(40)]
    for model, lines in ((run, copy_lines(40, seed=3)), (LEGACY, german)):
        for beam in (4, 1):
            fast = ctranslate2(model, device="cpu", beam=beam)
            hyps = [h[0] for h in fast.translate_hypotheses(lines)]
            assert all(h.attention is not None and len(h.attention) == len(h.tokens) for h in hyps)
            tokens, attention = [h.tokens for h in hyps], [h.attention for h in hyps]
            for source in (False, True):
                kept = fast.alignments(lines, tokens, source, attention=attention)
                assert kept == fast.alignments(lines, tokens, source), (model, beam, source)
