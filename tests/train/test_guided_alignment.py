"""Guided alignment (Garg et al. 2019): word links of the training pairs (`aiayn align`, eflomal), the targets they
give the aligning head, the loss term, and a head that learns the alignment it is taught, which `translate
--alignments` then reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from aiayn import ModelConfig, Transformer, Translator
from aiayn.attention import attention
from aiayn.cli.main import main
from aiayn.data.datadir import DataDir, DataError
from aiayn.decoding.align import method, parse_links
from aiayn.decoding.lexicon import GuidedTargets, piece_words, word_text
from aiayn.loss import SequenceLoss, guided_alignment_loss

PIECES = ["<pad>", "<s>", "</s>", "<unk>", "▁Ein", "▁Fahr", "rad", ".", "▁A", "▁bi", "cycle", "\u00a05", "▁"]
STARTS = np.array([p.startswith("▁") for p in PIECES])


def test_pieces_group_into_the_words_the_aligner_reads() -> None:
    ids = np.array([4, 5, 6, 7])                                   # ▁Ein ▁Fahr rad .
    assert piece_words(ids, STARTS).tolist() == [0, 1, 1, 1]
    assert piece_words(np.array([6, 4]), STARTS).tolist() == [0, 1]     # the first piece starts a word, marked or not
    assert word_text(ids, STARTS, PIECES.__getitem__) == "ein fahrrad."
    # a no-break space inside a piece must not split the aligner's word (word i is the model's word i); a lone ▁
    assert word_text(np.array([5, 11, 12, 7]), STARTS, PIECES.__getitem__) == "fahr5 ."
    assert word_text(np.array([5, 12]), STARTS, PIECES.__getitem__) == "fahr _"      # never an empty word


def test_each_link_is_spread_over_the_pieces_of_its_words(tmp_path: Path) -> None:
    # pair 0: Ein | Fahrrad.  ->  A | bicycle.   (links 0-0 1-1);  pair 1: Ein -> A | bi (no links)
    src = np.array([[4, 5, 6, 7, 2], [4, 2, 0, 0, 0]])            # padded, EOS included (S = 5)
    tgt = np.array([[8, 9, 10, 7, 2], [8, 9, 2, 0, 0]])           # target outputs y_1 .. EOS (T = 5)
    links = [np.array([0, 0, 1, 1]), np.array([], dtype=np.int64)]
    g = GuidedTargets(links, 2, STARTS, STARTS, tmp_path / "train.align")  # type: ignore[arg-type]
    a = g(np.array([0, 1]), src, tgt, np.array([4, 1]), np.array([4, 2]))
    assert a.shape == (2, 5, 5)
    expect = torch.zeros(5, 5)
    expect[0, 0] = 1.0                                            # A -> Ein
    expect[1:4, 1:4] = 1 / 3                                      # bi, cycle, . -> each piece of Fahrrad.
    assert torch.allclose(a[0], expect)
    assert a[0, :, 4].sum() == 0 and a[0, 4].sum() == 0           # EOS: neither attended to nor supervised
    assert a[1].sum() == 0                                        # a pair without links teaches nothing
    # the batch's order is the indices' order
    assert torch.equal(g(np.array([1, 0]), src[::-1].copy(), tgt[::-1].copy(), np.array([1, 4]), np.array([2, 4]))[1],
                       a[0])
    bad = GuidedTargets([np.array([0, 0, 2, 1])], 1, STARTS, STARTS, tmp_path / "train.align")  # type: ignore[arg-type]
    with pytest.raises(DataError, match=r"train\.align: the alignment of pair 1 links words beyond its 2 source"):
        bad(np.array([0]), src[:1], tgt[:1], np.array([4]), np.array([4]))
    with pytest.raises(DataError, match="1 alignments for 2 pairs"):
        GuidedTargets(links[:1], 2, STARTS, STARTS, tmp_path / "train.align")  # type: ignore[arg-type]


def test_attention_returns_its_probabilities_before_dropout() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    out, probs = attention(q, k, v, p_drop=0.5, training=True)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 3, 4))     # a distribution the guided loss can take a log of
    assert not torch.allclose(out, attention(q, k, v)[0])         # while the output is dropped out


def _tiny(**over: Any) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(src_vocab_size=16, tgt_vocab_size=16, d_model=32, d_ff=64, n_heads=4, n_layers=3,
                                   p_drop=0.0, alignment_heads=2, **over)).eval()


def test_the_loss_adds_the_cross_entropy_of_the_aligning_heads() -> None:
    m = _tiny()
    assert m.cfg.aligning_layer == 1                              # the penultimate of 3 layers
    src = torch.tensor([[4, 5, 6, 2], [7, 8, 2, 0]])
    tgt_in, tgt_out = torch.tensor([[1, 9, 10], [1, 11, 0]]), torch.tensor([[9, 10, 2], [11, 2, 0]])
    align = torch.zeros(2, 3, 4)
    align[0, 0, 0] = align[1, 0, 1] = 1.0
    align[0, 1, 1] = align[0, 1, 2] = 0.5
    plain = SequenceLoss(m, 0.1, 0)(src, tgt_in, tgt_out)
    assert torch.equal(SequenceLoss(m, 0.1, 0, guided=0.3)(src, tgt_in, tgt_out)[0], plain[0])   # no targets: no term
    loss, nll = SequenceLoss(m, 0.1, 0, guided=0.3)(src, tgt_in, tgt_out, align)
    heads = m.attention_maps(src, tgt_in).cross[1][:, :2].mean(1)          # (B, T, S): heads 0 and 1 of layer 1
    by_hand = -sum(align[b, t, s] * heads[b, t, s].log() for b, t, s in align.nonzero().tolist())
    assert torch.allclose(loss - plain[0], 0.3 * by_hand, atol=1e-5) and torch.equal(nll, plain[1])
    assert torch.allclose(guided_alignment_loss(m.attention_maps(src, tgt_in).cross[1][:, :2], align), by_hand)
    loss.backward()                                                          # the term trains the heads' projections
    assert m.decoder[1].cross_attn.q_proj.weight.grad is not None
    assert m.decoder[2].cross_attn.q_proj.weight.grad is not None


def test_alignment_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="alignment_heads=5: expected 0 .. n_heads"):
        ModelConfig(n_heads=4, d_model=32, alignment_heads=5)
    with pytest.raises(ValueError, match="alignment_layer=3: the decoder has 3 layers"):
        ModelConfig(n_layers=3, alignment_heads=1, alignment_layer=3)
    assert ModelConfig(n_layers=1, alignment_heads=1).aligning_layer == 0     # -2 on a 1-layer decoder: its layer
    assert method(_tiny(alignment_layer=0))[::2] == (0, 2)
    assert method(_tiny(alignment_layer=-1)) == (2, 0, 2)


@pytest.fixture(scope="module")
def copy_data(copy_dir: DataDir, tmp_path_factory: pytest.TempPathFactory) -> DataDir:
    out = tmp_path_factory.mktemp("guided") / "copy"
    shutil.copytree(copy_dir.path, out)
    return DataDir(out)


@pytest.mark.ci      # CI's (make test-ci): eflomal over the corpus, 10 s
def test_aiayn_align_stores_eflomal_links_of_the_model_words(copy_data: DataDir) -> None:
    pytest.importorskip("eflomal", reason="the eflomal aligner (aiayn[align]) is not installed")
    assert main(["align", str(copy_data.path)]) == 0
    d = DataDir(copy_data.path)
    info = d.manifest["alignments"]["train"]
    links = d.alignments("train")
    assert links is not None and len(links) == d.pairs("train") == info["pairs"]
    pairs = np.concatenate([np.asarray(links[i]).reshape(-1, 2) for i in range(200)])
    assert (pairs[:, 0] == pairs[:, 1]).mean() > 0.9              # a copy's words align on the diagonal
    assert d.hash == DataDir(copy_data.path).hash                  # the same data: runs trained on it still resume


def test_guided_alignment_without_links_is_a_clear_error(copy_dir: DataDir, tmp_path: Path, capsys: Any) -> None:
    assert main(["train", "--data", str(copy_dir.path), "--out", str(tmp_path / "run"), "--preset", "tiny",
                 "--set", "guided_alignment=0.1", "max_steps=1"]) != 0
    err = capsys.readouterr().err
    assert "guided_alignment needs word alignments" in err and f"aiayn align {copy_dir.path}" in err


@pytest.mark.ci      # CI's (make test-ci): a model trained to align, 8 s
def test_a_head_learns_the_alignment_it_is_taught(copy_model: Path, copy_data: DataDir, tmp_path: Path) -> None:
    """A copy model attends, where it outputs word j, to source word j (test_alignments.py). Taught instead that
    word j is linked with source word j + 1 (the last with itself), its aligning head moves there, and
    translate --alignments reads that head; the copies stay (mostly) copies."""
    d = DataDir(copy_data.path)
    src, _ = d.split("train")
    shifted = [[k for j in range(len(src[i])) for k in (min(j + 1, len(src[i]) - 1), j)] for i in range(len(src))]
    d.write_alignments("train", shifted, {"aligner": "test: j+1"})
    run = tmp_path / "guided"
    assert main(["train", "--data", str(d.path), "--out", str(run), "--init-from", str(copy_model), "--set",
                 "guided_alignment=1", "max_steps=150", "valid_every_steps=150", "save_every_steps=150",
                 "average_last=0", "tensorboard=false", "alignment_layer=-1"]) == 0
    assert json.loads((run / "config.json").read_text())["model"]["alignment_heads"] == 1   # recorded with the model
    t, before = Translator.load(run, "torch", device="cpu"), Translator.load(copy_model, "torch", device="cpu")
    lines = ["a b c d e f", "j i h g", "c c a b e e d", "b a j"]
    assert method(t.engine.model) == (1, 0, 1)
    got = t.translate_aligned(lines)
    assert sum(x == line for (x, _), line in zip(got, lines, strict=True)) >= 3     # still (mostly) copies
    taught = [(i, j) for (line, (_, text)) in zip(lines, got, strict=True) for i, j in parse_links(text)
              if j < len(line.split()) - 1]
    assert sum(i == j + 1 for i, j in taught) >= 0.8 * len(taught), got
    untaught = [(i, j) for _, text in before.translate_aligned(lines) for i, j in parse_links(text)]
    assert sum(i == j + 1 for i, j in untaught) < 0.3 * len(untaught)
