"""Word alignments (align.py): pieces grouped into words, which decoder row a target piece reads, grow-diag-final-and,
precision / recall / AER, and alignments from a model that copies its input (the right alignment is the diagonal),
through the Python API, `aiayn translate --alignments` and the server's field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from aiayn import Translator
from aiayn.cli.main import main
from aiayn.decoding.align import align, format_links, parse_links, token_links, word_links, words
from aiayn.decoding.lexicon import symmetrize
from benchmarks.alignments import agreement


def test_pieces_make_words_where_sentencepiece_marks_a_start() -> None:
    assert words(["▁Ein", "▁Fahr", "rad", "▁.", "x"]) == [0, 1, 1, 2, 2]
    assert words(["ab", "▁c"]) == [0, 1]                          # the first piece starts a word, marked or not
    pieces_src, pieces_tgt = ["▁Ein", "▁Fahr", "rad"], ["▁A", "▁bi", "cycle"]
    assert word_links([(0, 0), (1, 1), (2, 2), (2, 1)], pieces_src, pieces_tgt) == [(0, 0), (1, 1)]


def test_a_target_piece_reads_the_row_its_shift_names() -> None:
    # rows: decoder inputs BOS y1 y2 (T = 3); columns: x1 x2 EOS. Row r attends most to column (r + 1) % 2.
    cross = torch.tensor([[0.1, 0.8, 0.1], [0.7, 0.2, 0.1], [0.2, 0.3, 0.5]])
    assert token_links(cross, n_src=2, n_tgt=2, shift=0) == [(1, 0), (0, 1)]      # rows 0, 1 (y_t is the output)
    assert token_links(cross, n_src=2, n_tgt=2, shift=1) == [(0, 0), (1, 1)]      # rows 1, 2; EOS never linked
    assert token_links(cross, n_src=0, n_tgt=2, shift=1) == []


def test_grow_diag_final_and_and_the_error_rate() -> None:
    fwd, rev = [(0, 0), (1, 1), (2, 1)], [(0, 0), (1, 1), (1, 2), (3, 3)]
    # intersection (0,0) (1,1); grown: (2,1) and (1,2) touch (1,1) diagonally/beside and add an unaligned word;
    # final-and: (3,3) joins two unaligned words
    assert symmetrize(fwd, rev) == [(0, 0), (1, 1), (1, 2), (2, 1), (3, 3)]
    assert symmetrize([(0, 1)], [(1, 0)]) == [(0, 1), (1, 0)]
    a = agreement([[(0, 0), (1, 1), (2, 2)], []], [[(0, 0), (1, 2)], [(0, 0)]])
    assert a == {"precision": round(100 / 3, 2), "recall": round(100 / 3, 2), "aer": round(100 * (1 - 2 / 6), 2)}
    assert parse_links("0-0 12-3") == [(0, 0), (12, 3)] and format_links([(0, 0), (12, 3)]) == "0-0 12-3"
    with pytest.raises(ValueError, match="ref.txt:3: '1:2' is not an alignment link"):
        parse_links("0-0 1:2", "ref.txt:3")


LINES = ["a b c d e f", "j i h g", "", "c c a b"]


def _check(lines: list[str], outputs: list[str], links: list[str]) -> float:
    """Every link within the words of its line and its translation, every target word linked; the share of links
    on the diagonal (a copy's right alignment)."""
    diagonal = total = 0
    for line, out, text in zip(lines, outputs, links, strict=True):
        pairs = parse_links(text)
        n, m = len(line.split()), len(out.split())
        assert all(0 <= i < n and 0 <= j < m for i, j in pairs), (line, out, text)
        assert {j for _, j in pairs} == set(range(m)), (line, out, text)
        diagonal += sum(i == j for i, j in pairs)
        total += len(pairs)
    return diagonal / max(1, total)


def test_a_copy_is_aligned_on_the_diagonal(copier: Translator) -> None:
    """A model that copies attends, where it outputs word j, to source word j: read there (shift 0) the links are the
    diagonal; read one row later (shift 1, where word j is the input) they are the next word's."""
    got = copier.translate_aligned(LINES)
    outputs, links = [t for t, _ in got], [x for _, x in got]
    assert outputs == copier.translate(LINES) and outputs[2] == "" and links[2] == ""
    _check(LINES, outputs, links)
    src = copier.engine.vocab.src.encode(LINES)
    tokens = [h[0].tokens for h in copier.engine.translate_hypotheses(LINES)]
    pieces = (copier.engine.vocab.src.piece, copier.engine.vocab.tgt.piece)
    at = {shift: [format_links(x) for x in align(copier.engine.model, pieces, src, tokens, -1, shift, copier.engine.device)]
          for shift in (0, 1)}
    assert _check(LINES, outputs, at[0]) >= 0.9, at[0]
    later = [(i, j) for text in at[1] for i, j in parse_links(text)]
    assert sum(i == j + 1 for i, j in later) >= 0.7 * len(later), at[1]


def test_cli_and_server_print_the_alignment(copy_model: Path, write: Any, tmp_path: Path) -> None:
    src, out = write("in.txt", "\n".join(LINES) + "\n"), tmp_path / "out.txt"
    assert main(["translate", "--model", str(copy_model), "--device", "cpu", "--input", str(src), "--output",
                 str(out), "--alignments", "--quiet"]) == 0
    rows = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(rows) == len(LINES) and all(" ||| " in r for r in rows)
    t = Translator.load(copy_model, "torch", device="cpu")
    assert [tuple(r.split(" ||| ")) for r in rows] == t.translate_aligned(LINES)
    assert main(["translate", "--model", str(copy_model), "--device", "cpu", "--input", str(src), "--output",
                 str(out), "--alignments", "--nbest", "2", "--quiet"]) == 0
    rows = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(rows) == 2 * len(LINES) and all(r.count("\t") == 2 and " ||| " in r for r in rows)
