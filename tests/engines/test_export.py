"""aiayn export: every variant into CTranslate2 and Hugging Face transformers, loaded with the real libraries,
translating exactly as aiayn does (greedy); the refusals; the command with its built-in check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from aiayn import ModelConfig, RunConfig, Transformer, Translator
from aiayn.checkpoint import save
from aiayn.cli.main import main
from aiayn.data.tokenizer import Vocab
from aiayn.interop.export import ExportError, ctranslate2_translate, export, huggingface_translate
from aiayn.rundir import RunDir

LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy-f06e6aa"
LINES = (LEGACY / "data" / "valid.de").read_text(encoding="utf-8").splitlines() + ["", "Ein Hund.", "日本語 🙂"]


def make_run(path: Path, decode: dict[str, object] | None = None, eos: float = 1.0, **model: object) -> Path:
    """A run dir with a small random model of the given variant, on the fixture's 400-piece vocabulary. The
    decoder's last LayerNorm is scaled up so that each step's best token wins by a clear margin (otherwise an
    untrained model's near-ties would make "identical output" a test of float rounding); ``eos`` scales EOS's
    output embedding (> 1: outputs of many lengths, as a trained model's)."""
    torch.manual_seed(0)
    cfg = RunConfig.from_dict({"model": {**ModelConfig.preset("tiny", vocab_size=400).to_dict(), "d_model": 32,
                                         "n_heads": 4, "max_positions": 128, **model},
                               "decode": {"max_len_a": 0.0, "max_len_b": 12, **(decode or {})}})
    net = Transformer(cfg.model)
    last = net.dec_norm if cfg.model.norm == "pre" else net.decoder[-1].res_ffn.norm
    with torch.no_grad():
        last.weight.mul_(8.0)
        last.bias.normal_(0.0, 1.0)
        net.out_proj.weight[cfg.model.eos_id] *= eos
    run = RunDir(path)
    run.create(cfg, Vocab.from_files(LEGACY / "data" / "spm.model"), {"src": "de", "tgt": "en"})
    save(run.last, net, {"step": 0})
    return path


def _pairs(t: Translator) -> list[tuple[list[int], list[int]]]:
    """(source ids + EOS, target ids) pairs to score: each source with a piece of itself reversed as a target."""
    src = t.engine.vocab.src.encode([line for line in LINES if line])
    return [(s + [2], list(reversed(s))[:10]) for s in src]


def _aiayn_logprobs(t: Translator, src: list[int], tgt: list[int]) -> torch.Tensor:
    """log p(y_i | y_<i, x) of each target token and the final EOS, teacher-forced."""
    with torch.no_grad():
        logp = t.engine.model(torch.tensor([src]), torch.tensor([[1] + tgt]))[0]              # (T, V)
    return logp.gather(1, torch.tensor(tgt + [2])[:, None]).squeeze(1)


VARIANTS = [dict(norm=n, tie=t, positions=p) for n in ("post", "pre") for t in ("all", "decoder", "none")
            for p in ("sinusoidal", "learned")]
VARIANTS += [dict(norm="post", tie="all", positions="sinusoidal", activation=a) for a in ("swish", "gelu")]
# a deeper encoder than decoder (3 + 2 layers; a random 3 + 1 model says the same few words to every line), post-
# and pre-norm
VARIANTS += [dict(norm=n, tie="all", positions="sinusoidal", n_enc_layers=3, n_dec_layers=2) for n in ("post", "pre")]


def _name(v: dict[str, object]) -> str:
    return "-".join(f"{k}{x}" if isinstance(x, int) else str(x) for k, x in v.items())


@pytest.mark.parametrize("variant", VARIANTS, ids=_name)
def test_ctranslate2_export_translates_like_aiayn(variant: dict[str, str], tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    run = make_run(tmp_path / "run", **variant)
    out = export(run, "ctranslate2", tmp_path / "ct2")
    assert {"model.bin", "spm.model", "aiayn-export.json"} <= {p.name for p in out.iterdir()}
    import ctranslate2

    t = Translator.load(run, "torch", device="cpu")
    engine, piece = ctranslate2.Translator(str(out), device="cpu"), t.engine.vocab.src.piece
    pieces = lambda ids: [piece(i) for i in ids]  # noqa: E731
    for src, tgt in _pairs(t):            # the whole network's arithmetic: teacher-forced log-probabilities
        theirs = engine.score_batch([pieces(src[:-1])], [pieces(tgt)])[0].log_probs
        torch.testing.assert_close(torch.tensor(theirs), _aiayn_logprobs(t, src, tgt), atol=1e-4, rtol=1e-5)
    ours = t.translate(LINES, beam=1)                  # the search: the same tokens, the same length rule
    assert len(set(ours)) > 2
    assert ctranslate2_translate(out, LINES, beam=1) == ours


HF_VARIANTS = [v for v in VARIANTS if not (v["norm"] == "post" and v["positions"] == "learned")
               and not (v["norm"] == "pre" and v["tie"] != "all")]


@pytest.mark.parametrize("variant", HF_VARIANTS, ids=_name)
def test_huggingface_export_translates_like_aiayn(variant: dict[str, str], tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    run = make_run(tmp_path / "run", **variant)
    out = export(run, "huggingface", tmp_path / "hf")
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out))
    expected = "MarianMTModel" if variant["norm"] == "post" else "PegasusForConditionalGeneration"
    assert type(model).__name__ == expected
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    t = Translator.load(run, "torch", device="cpu")
    for src, tgt in _pairs(t):
        assert tok([t.engine.vocab.src.decode([src[:-1]])[0]])["input_ids"][0] == src        # the same ids, EOS added
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([[1] + tgt])).logits[0]
        theirs = logits.log_softmax(-1).gather(1, torch.tensor(tgt + [2])[:, None]).squeeze(1)
        torch.testing.assert_close(theirs, _aiayn_logprobs(t, src, tgt), atol=1e-4, rtol=1e-5)
    expect = [x.strip() for x in t.translate(LINES, beam=1)]     # MarianTokenizer strips what it decodes
    assert len(set(expect)) > 2
    assert huggingface_translate(out, LINES, beam=1) == expect


def _nbest_aiayn(t: Translator, lines: list[str]) -> list[list[tuple[list[int], float]]]:
    return [[(h.tokens, h.score) for h in hyps] for hyps in t.engine.translate_hypotheses(lines)]


def _nbest_huggingface(out: Path, lines: list[str], beam: int, lenpen: float, limit: int
                       ) -> list[list[tuple[list[int], float]]]:
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    result = []
    for line in lines:
        with torch.inference_mode():      # aiayn's length rule: at most `limit` tokens, then EOS (forced)
            g = model.generate(**tok([line], return_tensors="pt"), num_beams=beam, num_return_sequences=beam,
                               length_penalty=lenpen, early_stopping=True, max_new_tokens=limit + 1,
                               forced_eos_token_id=2, output_scores=True, return_dict_in_generate=True)
        seqs = [s[1:].tolist() for s in g.sequences]                                    # without the start token
        result.append([(s[:s.index(2)], float(x)) for s, x in zip(seqs, g.sequences_scores, strict=True)])
    return result


def test_beam_search_gives_the_n_best_lists_of_transformers_generate(tmp_path: Path) -> None:
    """With ``length_norm="length"`` aiayn's beam search is the one of transformers' ``generate``: the same 4 best
    hypotheses of each input, in the same order, with the same scores. With the paper's GNMT penalty some n-best
    lists differ (which is why the setting exists). (CTranslate2's beam search is the same but for one thing that
    only an untrained model like this one shows: it never ends a translation at the first step, and renormalises
    that step's probabilities without EOS; on the demo model its 1-best is aiayn's on 999 of 1,000 lines.)"""
    pytest.importorskip("transformers")
    decode = {"beam": 4, "nbest": 4, "lenpen": 1.0, "length_norm": "length", "max_len_b": 30}
    run = make_run(tmp_path / "run", decode=decode, eos=15.0)
    out = export(run, "huggingface", tmp_path / "hf")
    t = Translator.load(run, "torch", device="cpu")
    # the inputs whose 4 best end by themselves (each engine treats a hypothesis cut at the length limit its own way)
    lines = [line for line, hyps in zip(LINES, t.engine.translate_hypotheses(LINES), strict=True)
             if line.strip() and max(len(h.tokens) for h in hyps) < 30]
    ours = _nbest_aiayn(t, lines)
    lengths = {len(tokens) for hyps in ours for tokens, _ in hyps}
    assert len(lines) >= 10 and len(lengths) >= 10, (len(lines), lengths)     # many inputs, of many lengths
    theirs = _nbest_huggingface(out, lines, 4, 1.0, 30)
    for line, a, b in zip(lines, ours, theirs, strict=True):
        assert [tokens for tokens, _ in a] == [tokens for tokens, _ in b], line
        torch.testing.assert_close(torch.tensor([s for _, s in a]), torch.tensor([s for _, s in b]),
                                   atol=1e-4, rtol=1e-5)
    gnmt = _nbest_aiayn(Translator.load(run, "torch", device="cpu", length_norm="gnmt"), lines)
    assert [[x for x, _ in h] for h in gnmt] != [[x for x, _ in h] for h in ours]


@pytest.mark.parametrize("variant, message", [
    (dict(norm="post", positions="learned"), "post-norm model with learned positions"),
    (dict(norm="pre", tie="decoder"), "pre-norm model with tie='decoder'"),
    (dict(norm="pre", tie="none"), "pre-norm model with tie='none'"),
])
def test_what_hugging_face_cannot_express_is_refused(variant: dict[str, str], message: str, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    run = make_run(tmp_path / "run", **variant)
    with pytest.raises(ExportError, match=message):
        export(run, "huggingface", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_the_command_checks_and_refuses_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ctranslate2")
    run = make_run(tmp_path / "run")
    src = tmp_path / "src.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert main(["export", "--model", str(run), "--format", "ctranslate2", "--out", str(tmp_path / "ct2"),
                 "--check", str(src)]) == 0
    out = capsys.readouterr().out
    assert f"greedy  identical {len(LINES)}/{len(LINES)} (100.0%)" in out and "beam4" in out
    info = json.loads((tmp_path / "ct2" / "aiayn-export.json").read_text())
    assert info["format"] == "ctranslate2" and info["languages"] == ["de", "en"]
    # an occupied --out, a quantization Hugging Face cannot take, an unknown format: one clear line each
    assert main(["export", "--model", str(run), "--format", "ctranslate2", "--out", str(tmp_path / "ct2")]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert main(["export", "--model", str(run), "--format", "huggingface", "--out", str(tmp_path / "x"),
                 "--quantization", "int8"]) == 2
    assert "Hugging Face exports are written in fp32" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", "--model", str(run), "--format", "onnx", "--out", str(tmp_path / "y")])
    # int8 weights: loaded and run by CTranslate2 (identity is not expected of quantized weights)
    assert main(["export", "--model", str(run), "--format", "ctranslate2", "--out", str(tmp_path / "q"),
                 "--quantization", "int8", "--check", str(src)]) == 0
    assert "int8: identity is expected of float32 exports only" in capsys.readouterr().out


def test_the_ctranslate2_engine_decodes_with_the_runs_minimum_length(tmp_path: Path) -> None:
    """CTranslate2's own default forbids EOS at the first step, aiayn's min_len 0 allows it: the engine passes the
    run's min_len, so beam search ends the same way in both (a distilled student once differed on 41 of 300 lines)."""
    pytest.importorskip("ctranslate2")
    from aiayn.engines.ctranslate2 import CTranslate2Engine

    # eos 5: a line whose best first token is EOS (an empty output); greedy only (beam 4 on this random model is an
    # open difference between the engines when EOS leads at the first step, issue 40's note)
    for min_len, eos, beams in ((0, 5.0, (1,)), (6, 1.0, (1, 4))):
        run = make_run(tmp_path / f"run{min_len}", decode={"min_len": min_len}, eos=eos)
        out = export(run, "ctranslate2", tmp_path / f"ct2-{min_len}")
        engine, t = CTranslate2Engine.from_export(out), Translator.load(run, "torch", device="cpu")
        assert engine.decode.min_len == min_len
        for beam in beams:
            ours = t.translate(LINES, beam=beam)
            assert Translator(engine).translate(LINES, beam=beam) == ours
            lengths = [len(h[0].tokens) for h, src in zip(t.engine.translate_hypotheses(LINES, beam=beam), LINES,
                                                          strict=True) if src.strip()]
            assert min(lengths) >= min_len
