"""Property-based tests (hypothesis) over bad and arbitrary input: tokenizer round trips on any Unicode,
``prepare`` on generated broken files, ``translate`` on arbitrary lines, ``--set`` parsing. Each either works or
fails with aiayn's own clear error — never another exception, never lines lost. Derandomized, so CI runs the
same cases every time; the case counts are in each ``settings``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from aiayn import Translator
from aiayn.data import tokenizer as tokenizer_module
from aiayn.data.datadir import DataError, Source
from aiayn.data.prepare import PrepareOptions, prepare
from aiayn.data.tokenizer import Tokenizer
from aiayn.training.recipes import resolve

LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy-f06e6aa"
SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])

# Any Unicode text a user could type or a file could hold: every category but surrogates (not valid in UTF-8).
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer(LEGACY / "data" / "spm.model")        # 400 pieces, byte fallback: most text is bytes


@settings(max_examples=400, **SETTINGS)  # type: ignore[arg-type]
@given(line=ANY_TEXT)
def test_tokenizer_round_trip_on_any_unicode(tokenizer: Tokenizer, line: str) -> None:
    """decode(encode(line)) == line for every line without control characters or leading/trailing/doubled
    whitespace; for the others, the text survives up to that whitespace (SentencePiece's identity normalization
    keeps every character; its decoder drops the leading space marker)."""
    ids = tokenizer.encode([line])[0]
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    back = tokenizer.decode([ids])[0]
    assert back.split() == line.split() or back == line


@settings(max_examples=300, **SETTINGS)  # type: ignore[arg-type]
@given(line=st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=60))
def test_tokenizer_round_trip_is_exact_without_whitespace_or_controls(tokenizer: Tokenizer, line: str) -> None:
    assert tokenizer.decode(tokenizer.encode([line]))[0] == line


@settings(max_examples=150, **SETTINGS)  # type: ignore[arg-type]
@given(lines=st.lists(ANY_TEXT, min_size=1, max_size=6), copies=st.sampled_from([1, 8]))
def test_a_few_lines_are_tokenized_as_a_batch_of_many(tokenizer: Tokenizer, lines: list[str], copies: int) -> None:
    """Up to tokenizer.SMALL lines are encoded and decoded one at a time (SentencePiece's batch call has a fixed
    cost): the same ids and text as the batch call gives the same lines among many (``copies`` x, past SMALL)."""
    many = lines * (copies + tokenizer_module.SMALL // len(lines))
    assert len(lines) <= tokenizer_module.SMALL < len(many)
    ids, ids_many = tokenizer.encode(lines), tokenizer.encode(many)
    assert ids == ids_many[: len(lines)]
    assert tokenizer.decode(ids) == tokenizer.decode(ids_many)[: len(lines)]


# --- prepare on broken files ---------------------------------------------------------------------------------------

GOOD = [("ein Hund läuft", "a dog runs"), ("zwei Katzen", "two cats"), ("ein Mann", "a man")] * 20
DAMAGE = st.sampled_from(["latin-1 line", "CR line ends", "CRLF line ends", "NUL byte", "BOM", "megabyte line",
                          "missing line", "extra line", "empty file", "lone CR inside", "U+2028 inside",
                          "invalid UTF-8 tail", "gzip garbage"])


def _file(lines: list[str], damage: str, side: str, row: int) -> bytes:
    text = [line.encode() for line in lines]
    if damage == "latin-1 line":
        text[row] = lines[row].encode("latin-1", errors="replace")
    if damage == "NUL byte":
        text[row] += b"\x00"
    if damage == "megabyte line" and side == "src":
        text[row] = b"x " * 500_000
    if damage == "missing line" and side == "tgt":
        del text[row]
    if damage == "extra line" and side == "src":
        text.insert(row, b"one more")
    if damage == "lone CR inside":
        text[row] += b"\rtail"
    if damage == "U+2028 inside":
        text[row] += "\u2028x".encode()
    if damage == "invalid UTF-8 tail":
        text[row] += b"\xc3"
    end = b"\r\n" if damage == "CRLF line ends" else b"\r" if damage == "CR line ends" else b"\n"
    data = end.join(text) + end
    if damage == "BOM":
        data = b"\xef\xbb\xbf" + data
    if damage == "empty file" and side == "tgt":
        data = b""
    return data


@settings(max_examples=40, **SETTINGS)  # type: ignore[arg-type]
@given(damage=DAMAGE, row=st.integers(0, len(GOOD) - 1), errors=st.sampled_from(["strict", "replace"]))
def test_prepare_on_broken_files_works_or_says_which_file_and_line(tmp_path: Path, damage: str, row: int,
                                                                   errors: str) -> None:
    d = tmp_path / damage.replace(" ", "_") / f"{row}-{errors}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for side, lang, i in (("src", "de", 0), ("tgt", "en", 1)):
        (d / f"train.{lang}").write_bytes(_file([p[i] for p in GOOD], damage, side, row))
        (d / f"valid.{lang}").write_bytes("\n".join(p[i] for p in GOOD[:5]).encode() + b"\n")
    sources = {"train": Source(d / "train.de", d / "train.en"), "valid": Source(d / "valid.de", d / "valid.en")}
    opts = PrepareOptions(src="de", tgt="en", vocab_size=300, encoding_errors=errors)
    try:
        out = prepare(sources, d / "out", opts)
    except DataError as e:                      # a clear refusal: names a file (and a line where there is one)
        assert "train." in str(e) or "valid." in str(e) or "no sentence pairs" in str(e), str(e)
        assert not (d / "out").exists()         # nothing half-written
        event(f"refused: {damage}")
        return
    except ValueError as e:                     # e.g. a vocabulary too large for what is left
        assert "--vocab-size" in str(e), str(e)
        event(f"vocabulary refused: {damage}")
        return
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    s = manifest["splits"]["train"]
    assert s["pairs_in"] == len(GOOD)           # no line lost or merged: alignment kept
    assert s["pairs"] + sum(s["dropped"].values()) == s["pairs_in"]
    event(f"prepared: {damage}")


# --- translate on arbitrary lines -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator() -> Translator:
    return Translator.load(LEGACY / "run", "torch", device="cpu", max_len_b=8)


@settings(max_examples=60, **SETTINGS)  # type: ignore[arg-type]
@given(lines=st.lists(st.one_of(ANY_TEXT, st.sampled_from(["", " ", "\t", "\n", "a\nb", "\r\n", "\u2028"])),
                      max_size=12), beam=st.sampled_from([1, 3]))
def test_translate_arbitrary_lines_n_in_n_out(translator: Translator, lines: list[str], beam: int) -> None:
    out = translator.translate(lines, beam=beam)
    assert len(out) == len(lines)
    assert all("\n" not in o and "\r" not in o for o in out)
    assert all(o == "" for o, line in zip(out, lines, strict=True) if not line.strip())


# --- --set parsing ------------------------------------------------------------------------------------------------------

KEYS = st.sampled_from(["d_model", "max_tokens", "p_drop", "norm", "tie", "precision", "train.warmup", "decode.beam",
                        "model.n_heads", "lr_factor", "valid_bleu", "compile", "nonsense", "model.nonsense",
                        "bogus.d_model", "", "max_tokens.x"])
VALUES = st.one_of(st.integers(-5, 5000).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
                   st.sampled_from(["true", "false", "post", "pre", "all", "none", "bf16", "int8", "", "[1, 2]",
                                    "{a: 1}", "null", "~", "'quoted'", ": :", "- x"]), ANY_TEXT)


@settings(max_examples=500, **SETTINGS)  # type: ignore[arg-type]
@given(items=st.lists(st.tuples(KEYS, VALUES).map(lambda kv: f"{kv[0]}={kv[1]}") | ANY_TEXT, max_size=4))
def test_set_parsing_gives_a_config_or_a_clear_error(items: list[str]) -> None:
    assume(all("\x00" not in i for i in items))
    try:
        cfg = resolve("tiny", None, items)
    except ValueError as e:
        message = str(e)
        # one line, naming what is wrong: the item (no key=value), or the key (its last part) it came from
        named = [i.split("=", 1)[0].strip().split(".")[-1] if "=" in i else i for i in items]
        assert "\n" not in message, (items, message)
        assert any(n and (n in message or repr(n) in message) for n in named) or "expected key=value" in message, \
            (items, message)
        return
    assert cfg.model.d_model % cfg.model.n_heads == 0 and cfg.train.max_tokens > 0
