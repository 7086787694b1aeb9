"""Subword tokenization with one joint SentencePiece model, shared by source and target (paper §5.1).

Ids are fixed (``config.PAD_ID`` .. ``UNK_ID``: pad 0, bos 1, eos 2, unk 3) and recorded in the data manifest.
Byte fallback is on, so any character — CJK, emoji, characters never seen in training — survives
a round trip as UTF-8 byte pieces instead of collapsing to <unk>. Normalization is ``identity`` and
whitespace is kept as written by default, so ``decode(encode(line)) == line`` for ordinary text.
"""

from __future__ import annotations

import io
import logging
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import sentencepiece as spm

from .config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

log = logging.getLogger(__name__)


class Tokenizer:
    """Text <-> subword ids with a SentencePiece model. Thread-parallel batch encoding and decoding."""

    def __init__(self, model: str | Path | bytes, num_threads: int | None = None) -> None:
        self.sp = spm.SentencePieceProcessor()
        if isinstance(model, bytes):
            self.sp.LoadFromSerializedProto(model)
        else:
            self.sp.Load(str(model))
        self.num_threads = num_threads or os.cpu_count() or 1
        ids = (self.sp.pad_id(), self.sp.bos_id(), self.sp.eos_id(), self.sp.unk_id())
        if ids != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            raise ValueError(f"SentencePiece model has special ids (pad, bos, eos, unk) = {ids}; "
                             f"aiayn needs {(PAD_ID, BOS_ID, EOS_ID, UNK_ID)} (train it with Tokenizer.train)")

    @property
    def vocab_size(self) -> int:
        return int(self.sp.GetPieceSize())

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Subword ids of each line, without BOS/EOS."""
        return self.sp.Encode(lines, out_type=int, num_threads=self.num_threads)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text of each id sequence; special ids (pad, bos, eos) are dropped."""
        return self.sp.Decode(ids, num_threads=self.num_threads)

    def pieces(self, line: str) -> list[str]:
        return self.sp.EncodeAsPieces(line)

    def serialized(self) -> bytes:
        return self.sp.serialized_model_proto()

    @staticmethod
    def train(
        sentences: Iterable[str],
        out_path: str | Path,
        vocab_size: int,
        model_type: str = "bpe",
        character_coverage: float | None = None,
        normalization: str = "identity",
        sample_size: int = 2_000_000,
        num_threads: int | None = None,
        seed: int = 1,
    ) -> Tokenizer:
        """Train a joint model on ``sentences`` (source and target lines together); write ``out_path``.

        ``character_coverage`` defaults to 1.0 for alphabetic text and 0.9995 when the sample has more
        than 1,000 distinct characters (CJK); rarer characters are then spelled as byte pieces.
        SentencePiece keeps a reservoir sample of ``sample_size`` sentences, so memory does not grow
        with the corpus.
        """
        if model_type not in ("bpe", "unigram"):
            raise ValueError(f"model_type={model_type!r}: expected 'bpe' or 'unigram'")
        sample: list[str] = []
        alphabet: set[str] = set()

        def stream() -> Iterator[str]:
            for line in sentences:
                if len(sample) < 20_000:
                    sample.append(line)
                    alphabet.update(line)
                if line:
                    yield line

        if character_coverage is None:
            # peek at the start of the corpus to choose the coverage
            it = iter(stream())
            head = [line for _, line in zip(range(20_000), it, strict=False)]
            character_coverage = 0.9995 if len(alphabet) > 1000 else 1.0
            lines: Iterable[str] = _chain(head, it)
        else:
            lines = stream()
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.Train(
                sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size, model_type=model_type,
                character_coverage=character_coverage, byte_fallback=True, normalization_rule_name=normalization,
                remove_extra_whitespaces=False, split_digits=True, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                unk_id=UNK_ID, input_sentence_size=sample_size, shuffle_input_sentence=True,
                num_threads=num_threads or os.cpu_count() or 1, max_sentence_length=16384,
                minloglevel=2,
            )
        except RuntimeError as e:
            msg = str(e)
            limit = re.search(r"value <= (\d+)", msg)
            if "Vocabulary size too high" in msg:
                most = f"at most {limit.group(1)} pieces can be learned from it" if limit else msg.strip()
                raise ValueError(f"--vocab-size {vocab_size} is too large for this corpus: {most}; "
                                 "choose a smaller --vocab-size") from None
            small = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg)
            if small:
                raise ValueError(f"--vocab-size {vocab_size} is too small: the characters and 256 byte pieces alone "
                                 f"need {small.group(2)}; raise --vocab-size or lower --character-coverage") from None
            raise ValueError(f"SentencePiece training failed: {msg.strip()}") from None
        Path(out_path).write_bytes(model.getvalue())
        tok = Tokenizer(out_path)
        log.info("trained %s vocabulary of %d pieces (character coverage %s)", model_type, tok.vocab_size,
                 character_coverage)
        return tok


def _chain(head: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from head
    yield from rest
