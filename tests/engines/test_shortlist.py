"""The lexical shortlist: built from a data dir (co-occurrence or eflomal), saved in the run dir, used by every
search; where the full vocabulary's best token is a candidate, greedy output is the full search's; a token left out
is never produced; the restricted output layer computes the full layer's columns (fp32 and int8); a CTranslate2
export decodes over the same candidates (use_vmap) with the same output; clear refusals."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from aiayn import Translator
from aiayn.cli.main import main
from aiayn.data.datadir import DataDir
from aiayn.decoding.lexicon import build
from aiayn.decoding.search import BeamSearch
from aiayn.decoding.shortlist import Shortlist, restricted
from aiayn.engines.torch import source_batch, source_ids
from aiayn.quantize import int8

from ..helpers import cli_error


@pytest.fixture(scope="module")
def run(copy_model: Path, copy_dir: DataDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the session's copy-task model with a shortlist made by the command: 3 candidates per source token,
    no frequent ones (so that a sentence's candidates are few, and mostly its own tokens)."""
    out = tmp_path_factory.mktemp("shortlist") / "run"
    shutil.copytree(copy_model, out)
    assert main(["shortlist", "--model", str(out), "--data", str(copy_dir.path), "--k", "3", "--frequent", "0"]) == 0
    return out


def _lines(copy_dir: DataDir, n: int = 120) -> list[str]:
    return copy_dir.raw_lines("valid", "src")[:n]


def _candidates(t: Translator, line: str) -> set[int]:
    assert t.engine.shortlist is not None
    src = source_batch(t.engine.model, [source_ids(t.engine.model, t.engine.vocab.src.encode([line])[0])], t.engine.device)
    return set(t.engine.shortlist.candidates(src, t.engine.model.cfg).tolist())


def test_greedy_output_is_the_full_searchs_where_its_tokens_are_candidates(run: Path, copy_dir: DataDir) -> None:
    t = Translator.load(run, "torch", precision="fp32")
    sl = t.engine.shortlist
    assert sl is not None and sl.meta["method"] == "cooc" and sl.meta["k"] == 3
    assert t.engine.shortlist.meta["valid"]["candidates_per_sentence"] < 40              # of 281: a real restriction
    inside = 0
    for line in _lines(copy_dir, 60):                                  # one line per batch: its own candidates
        cands = _candidates(t, line)
        full = t.engine.translate_hypotheses([line], beam=1)[0][0]
        short = t.engine.translate_hypotheses([line], beam=1, shortlist=True)[0][0]
        assert set(short.tokens) <= cands                              # never a token outside the list
        if set(full.tokens) <= cands:
            inside += 1
            assert short.tokens == full.tokens
            assert short.logprob >= full.logprob - 1e-4                # renormalized over fewer tokens: never lower
    assert inside >= 50, inside


def _without(sl: Shortlist, token: int) -> Shortlist:
    """The shortlist with ``token`` taken out of every candidate list."""
    table = sl.table.copy()
    table[table == token] = -1
    return Shortlist(table, sl.always[sl.always != token], sl.meta)


def _common_token(t: Translator, lines: list[str]) -> int:
    """A target token the model's outputs of ``lines`` use often (not a special one)."""
    ids = np.concatenate([h[0].tokens for h in t.engine.translate_hypotheses(lines, beam=1)])
    counts = np.bincount(ids)
    counts[:4] = 0
    return int(counts.argmax())


def test_a_token_left_out_is_never_produced_in_any_search(run: Path, copy_dir: DataDir) -> None:
    t = Translator.load(run, "torch", precision="fp32")
    assert t.engine.shortlist is not None
    lines = _lines(copy_dir, 60)
    x = _common_token(t, lines)
    t.engine.shortlist = _without(t.engine.shortlist, x)
    for decode in (dict(beam=1), dict(beam=4), dict(beam=4, nbest=3), dict(sampling=True, beam=1)):
        hyps = t.engine.translate_hypotheses(lines, shortlist=True, **decode)
        assert all(x not in h.tokens for hs in hyps for h in hs), decode
        if not decode.get("sampling"):
            assert all(hs[0].tokens for hs in hyps), decode                # and the others still translate
    full = t.engine.translate_hypotheses(lines, beam=1)
    assert sum(x in h[0].tokens for h in full) >= 10                       # which the full search would produce


@pytest.mark.parametrize("kind", ["fp32", "int8"])
def test_the_restricted_output_layer_computes_the_full_layers_columns(kind: str) -> None:
    torch.manual_seed(0)
    layer = nn.Linear(32, 500, bias=True)
    if kind == "int8":
        layer = int8(nn.Sequential(layer))[0]
    ids = torch.tensor([0, 2, 7, 99, 100, 480, 499])
    h = torch.randn(5, 1, 32)
    with torch.inference_mode():     # the same values up to the summation order of a matrix product of another width
        torch.testing.assert_close(restricted(layer, ids)(h), layer(h)[..., ids], rtol=1e-6, atol=1e-6)


def test_a_sentence_joining_a_running_search_adds_its_candidates(run: Path, copy_dir: DataDir) -> None:
    t = Translator.load(run, "torch", precision="fp32")
    a, b = _lines(copy_dir, 2)
    search = BeamSearch(t.engine.model, t.engine.decode.replace(beam=2, shortlist=True), t.engine.shortlist)
    src = lambda line: source_batch(t.engine.model, [source_ids(t.engine.model, t.engine.vocab.src.encode([line])[0])],  # noqa: E731
                                    t.engine.device)
    search.admit(src(a), ["a"])
    first = set(search.out.ids.tolist())                                   # type: ignore[union-attr]
    search.step()
    search.admit(src(b), ["b"])
    assert set(search.out.ids.tolist()) == first | _candidates(t, b)       # type: ignore[union-attr]
    done = {}
    while search.active:
        done.update(search.step())
    assert set(done) == {"a", "b"}


def test_eflomal_alignments_build_a_shortlist(copy_dir: DataDir, copy_model: Path) -> None:
    pytest.importorskip("eflomal")
    cfg = Translator.load(copy_model, "torch").engine.model.cfg
    sl = build(copy_dir.path, cfg, k=2, frequent=5, method="eflomal", max_pairs=2000)
    assert sl.meta["pairs"] == 2000 and sl.table.shape == (cfg.src_vocab_size, 2)
    src, _ = copy_dir.split("train")
    seen = np.unique(np.concatenate([np.asarray(src[i]) for i in range(2000)]))
    seen = seen[seen > 3]
    # the copy task aligns every token with itself: its own id is among its candidates
    assert np.mean([s in sl.table[s] for s in seen]) > 0.95
    assert sl.meta["valid"]["tokens"] > 0.95


@pytest.mark.ci      # CI's (make test-ci): an export to CTranslate2 with its shortlist, 4 s
def test_the_ctranslate2_export_decodes_over_the_same_candidates(run: Path, copy_dir: DataDir,
                                                                 tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    from aiayn.engines.conversion import VMAP
    from aiayn.engines.ctranslate2 import CTranslate2Engine
    from aiayn.interop.export import export

    t = Translator.load(run, "torch", precision="fp32", device="cpu")
    lines = _lines(copy_dir, 40)
    assert t.engine.shortlist is not None
    reduced = tmp_path / "run"
    shutil.copytree(run, reduced)
    _without(t.engine.shortlist, _common_token(t, lines)).save(reduced)       # a list the full search's output needs
    out = export(reduced, "ctranslate2", tmp_path / "ct2")
    vmap = (out / VMAP).read_text(encoding="utf-8").splitlines()
    assert vmap[0].startswith("\t") and len(vmap) > 5          # the always-allowed tokens, then one line per token
    ours_t = Translator.load(reduced, "torch", precision="fp32", device="cpu")
    engine = Translator(CTranslate2Engine.from_export(out))
    for beam in (1, 4):
        ours = [ours_t.translate([line], beam=beam, shortlist=True)[0] for line in lines]    # one line per batch,
        theirs = [engine.translate([line], beam=beam, shortlist=True)[0] for line in lines]  # as in both engines
        full = [engine.translate([line], beam=beam)[0] for line in lines]
        assert ours == theirs
        assert sum(a != b for a, b in zip(ours, full, strict=True)) >= 10      # the list changed what they say


def test_refusals(run: Path, copy_model: Path, multi30k_dir: DataDir, tmp_path: Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    line = tmp_path / "in.txt"
    line.write_text("abc\n")
    assert main(["translate", "--model", str(copy_model), "--shortlist", "--input", str(line)]) == 2
    assert "has no shortlist; build one with `aiayn shortlist" in cli_error(capsys.readouterr().err, "translate")
    assert main(["shortlist", "--model", str(run), "--data", str(multi30k_dir.path)]) == 2
    assert "was not made with" in cli_error(capsys.readouterr().err, "shortlist")
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    (bad / "shortlist.npz").write_bytes(b"not an npz")
    assert main(["translate", "--model", str(bad), "--input", str(line)]) == 2
    assert "not a shortlist written by `aiayn shortlist`" in cli_error(capsys.readouterr().err, "translate")


# (moved from the hardening tests: a guard issue 51's audit broke without a test failing)
def test_a_shortlist_always_allows_eos() -> None:
    from aiayn.config import ModelConfig
    from aiayn.decoding.shortlist import Shortlist

    cfg = ModelConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=8, d_ff=16, n_heads=2, n_layers=1)
    table = np.full((10, 2), -1)
    table[5] = [6, 7]                                                  # token 5's candidates, EOS not among them
    ids = Shortlist(table, np.array([], dtype=np.int32)).candidates(torch.tensor([[5, cfg.eos_id]]), cfg).tolist()
    assert cfg.eos_id in ids and 6 in ids and 7 in ids and cfg.bos_id not in ids and cfg.pad_id not in ids, ids
