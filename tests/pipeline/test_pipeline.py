"""The request pipeline behind every front end: one engine interface (engine.py) and what the server's batchers do with
a request's lines. Fast: the tiny fixture model, no server process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from aiayn import Translator
from aiayn.config import DecodeConfig
from aiayn.engines.base import Unsupported, require
from aiayn.serving.batcher import Batcher, DecodeMetrics, Limits, WholeBatcher
from aiayn.serving.models import decoded
from aiayn.translation.pipeline import Request, prepare

LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy-f06e6aa" / "run"
LINES = ["Ein Mann fährt mit dem Fahrrad.", "   ", "Zwei Hunde spielen im Schnee."]


@pytest.fixture(scope="module")
def legacy() -> Translator:
    return Translator.load(LEGACY, "torch", device="cpu", beam=2, workers=1)


@pytest.mark.parametrize("kind", [Batcher, WholeBatcher])
def test_a_served_line_is_encoded_once_and_answered_as_the_cli(kind: Any, legacy: Translator,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import CollectorRegistry

    want = legacy.engine.translate_hypotheses(LINES, nbest=2)
    encoded: list[list[str]] = []
    original = legacy.engine.vocab.src.encode

    def counted(lines: list[str]) -> Any:
        encoded.append(list(lines))
        return original(lines)

    monkeypatch.setattr(legacy.engine.vocab.src, "encode", counted)

    async def run() -> Any:
        limits = Limits(workers=1, max_batch_tokens=6000, max_wait_ms=0, max_queue_lines=100, timeout_s=30)
        b = kind(legacy.engine, limits, DecodeMetrics(CollectorRegistry()).model("m"))
        try:
            prepared = prepare(legacy.engine, Request(LINES, decode={"nbest": 2}, alignments=True))
            done = await decoded(legacy.engine, prepared, b.translate)
            return await b.translate(prepared.ids, prepared.decode), done.translations
        finally:
            b.close()

    got, translations = asyncio.run(run())
    # once, the request's sentences together (a blank line has none; the alignments reuse the ids)
    assert encoded == [[line for line in LINES if line.strip()]], encoded
    sentences = [hs for line, hs in zip(LINES, want, strict=True) if line.strip()]      # (the batcher's: sentences)
    assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in sentences]
    texts = [legacy.engine.detokenize([h.tokens for h in hs]) for hs in want]
    assert [[t.text for t in ts] for ts in translations] == texts
    assert all(t.alignment is not None for ts in translations for t in ts)


def test_what_an_engine_cannot_do_is_refused_by_name(legacy: Translator) -> None:
    from aiayn.engines.ctranslate2 import CTranslate2Engine

    for feature in ("constraints", "alignments", "html", "attention"):
        require(legacy.engine, feature)                                  # aiayn's own engine does all of it
        with pytest.raises(Unsupported, match="need aiayn's own engine"):
            require(CTranslate2Engine.__new__(CTranslate2Engine), feature)


def test_one_rule_for_nbest_and_the_beam() -> None:
    from aiayn.config import beam_for_nbest

    assert beam_for_nbest({"nbest": 3}, 2) == {"nbest": 3, "beam": 3}          # a beam not given grows to nbest
    assert beam_for_nbest({"nbest": 3}, 5) == {"nbest": 3}                     # the engine's beam is enough
    assert beam_for_nbest({"nbest": 1}, 1) == {"nbest": 1}
    assert beam_for_nbest({"nbest": 3, "beam": 2}, 4) == {"nbest": 3, "beam": 2}   # one given is kept: then refused
    with pytest.raises(ValueError, match="nbest=3 cannot exceed beam=2"):
        DecodeConfig(**beam_for_nbest({"nbest": 3, "beam": 2}, 4))


def test_the_plan_skips_blank_lines_and_keeps_plain_translations_that_hold_their_phrases() -> None:
    """engine.plan, the one rule every engine and both batchers follow: blank lines are never decoded; with
    keep_plain, constraints are searched only for the lines whose plain translation lacks a phrase."""
    from aiayn.decoding.constraints import Constraints
    from aiayn.decoding.hypotheses import Hypothesis
    from aiayn.engines.base import hypotheses

    calls: list[tuple[list[list[int]], Any]] = []

    def decode(ids: list[list[int]], cons: Any) -> list[list[Hypothesis]]:
        calls.append((ids, cons))
        return [[Hypothesis([t + 100 for t in x] if cons is None else [7, 7], -1.0, -1.0)] for x in ids]

    class Engine:                                    # an engine's one primitive: decode_lines, the plan's calls
        def decode_lines(self, ids: Any, decode_: Any, cons: Any, stop: Any = None) -> list[list[Hypothesis]]:
            return decode(ids, cons)

    def run(d: DecodeConfig, ids: Any, cons: Any) -> list[list[Hypothesis]]:
        return hypotheses(Engine(), ids, d, cons)  # type: ignore[arg-type]

    ids = [[1, 2], [], [3], [4, 5]]
    cons = [Constraints([[101]]), Constraints([[7]]), Constraints([[7]]), None]       # line 0 holds its phrase
    out = run(DecodeConfig(beam=2, keep_plain=True), ids, cons)
    assert calls == [([[1, 2], [3], [4, 5]], None), ([[3]], [cons[2]])]             # the blank line: never
    assert [h[0].tokens for h in out] == [[101, 102], [], [7, 7], [104, 105]]
    calls.clear()
    run(DecodeConfig(beam=2, keep_plain=False), ids, cons)
    assert calls == [([[1, 2], [3], [4, 5]], [cons[0], cons[2], cons[3]])]         # one constrained search
    calls.clear()
    assert run(DecodeConfig(beam=2, nbest=2), [[], []], None) == [[Hypothesis([], 0.0, 0.0)] * 2] * 2
    assert calls == []                                                            # nothing to decode: no call


def test_prepare_refuses_in_each_front_ends_words_and_finish_shapes_the_answer(legacy: Translator) -> None:
    """One prepare for every front end: what HTML refuses is named in the CLI's flags, aiayn's fields or
    LibreTranslate's; finish gives each input its nbest translations, with their alignments when asked."""
    from aiayn.translation.pipeline import NAMES, finish, translate

    cli = {"nbest": "--nbest", "alignments": "--alignments", "glossary": "--glossary", "constraints": "--constraints",
           "format": "--format html", "unit": "line"}
    for names, words in ((cli, "--format html gives one translation per line (an HTML fragment), its markup placed by "
                                "the word alignment: it takes no --nbest, --alignments, --constraints, --glossary"),
                         (NAMES, "format html gives one translation per fragment"),
                         ({"nbest": "alternatives"}, "it takes no alternatives")):
        with pytest.raises(ValueError) as e:
            prepare(legacy.engine, Request(["<b>Hund</b>"], decode={"nbest": 2}, format="html", names=names))
        assert words in str(e.value)
    with pytest.raises(ValueError, match="format 'pdf'"):
        prepare(legacy.engine, Request(["x"], format="pdf"))
    got = translate(legacy.engine, Request(LINES, decode={"nbest": 2}, alignments=True)).translations
    assert [len(ts) for ts in got] == [2, 2, 2] and got[1][0].text == "" and got[1][0].alignment == ""
    want = legacy.engine.translate_hypotheses(LINES, nbest=2)
    assert [[t.text for t in ts] for ts in got] == [legacy.engine.detokenize([h.tokens for h in hs]) for hs in want]
    prepared = prepare(legacy.engine, Request([], decode={"nbest": 3}))
    assert finish(legacy.engine, prepared, []) == [] and prepared.decode.beam >= 3          # the nbest rule: beam grows


# --- a request's options: one home, every front end's field made from it ---------------------------------------------


def test_every_option_of_a_request_is_a_flag_and_a_field_of_both_apis_made_from_its_one_field() -> None:
    """pipeline.Request holds each option once (type, default, help, bounds, needs): translate's flag, aiayn's request
    model and LibreTranslate's own field are made from it, so that an option is one field (CONTRIBUTING.md)."""
    import argparse
    import dataclasses

    from aiayn.cli.translate import add_translate
    from aiayn.serving import api
    from aiayn.serving.api import request_models
    from aiayn.serving.serve import ServeConfig
    from aiayn.translation.pipeline import option_hints

    parser = argparse.ArgumentParser()
    add_translate(parser.add_subparsers())
    flags = {flag for action in parser._subparsers._group_actions[0].choices["translate"]._actions  # type: ignore[union-attr]
             for flag in action.option_strings}
    model = request_models(ServeConfig())[0].model_fields
    options = option_hints()
    assert {"format", "alignments", "protect", "sentences", "sentence_tokens", "repair", "runon"} <= set(options)
    for f in dataclasses.fields(Request):
        if f.name not in options:
            continue
        assert "--" + f.name.replace("_", "-") in flags, f.name
        assert model[f.name].description == f.metadata["help"], f.name            # the field's own help
        assert f.name in (*api.OPTIONS, *api.LT_NAMES, *api.UNANSWERED), f.name
    assert set(api.OPTIONS) >= {"sentences", "sentence_tokens", "repair", "runon", "protect"}
    # bounds and types are the field's: checked where a request is made, named
    with pytest.raises(ValueError, match="sentence_tokens=-1"):
        Request(["x"], sentence_tokens=-1)
    with pytest.raises(ValueError, match="repair='yes': expected bool"):
        Request(["x"], repair="yes")  # type: ignore[arg-type]
    assert Request(["x"], protect=["url"]).protect == ("url",)
    assert Request.of(["x"], beam=2, repair=True) == Request(["x"], decode={"beam": 2}, repair=True)


def test_an_option_that_needs_a_capability_is_refused_by_an_engine_without_it(legacy: Translator) -> None:
    import dataclasses

    class Unaligned:                                                # an engine that cannot align
        def __getattr__(self, name: str) -> Any:
            return getattr(legacy.engine, name)

        capabilities = dataclasses.replace(legacy.engine.capabilities, alignments=False)

    with pytest.raises(Unsupported, match="alignments"):
        prepare(Unaligned(), Request(["Ein Hund."], alignments=True))  # type: ignore[arg-type]


# --- a new engine: one module and its line in engines/auto.py's table ------------------------------------------------


def test_a_new_engine_is_its_class_and_its_line_in_the_factory_table(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """An engine written against the protocol alone (here: one that copies its source, the seeds' copy task) and put
    in ENGINES is served by every front end: the Python API, `aiayn translate --engine NAME` (sentences, blank lines,
    confidence), and it is refused by name for what it cannot do. Nothing else changes."""
    from aiayn.cli.main import main
    from aiayn.decoding.hypotheses import Hypothesis
    from aiayn.engines import auto
    from aiayn.engines.base import About, EngineBase
    from aiayn.rundir import RunDir

    class Copier(EngineBase):                   # its constructor and decode_lines: EngineBase gives the rest
        engine, workers, precision = "copy", 1, "fp32"

        def __init__(self, path: Path, **settings: Any) -> None:
            run = RunDir.locate(path)[0]
            super().__init__(About.of_run(run))
            self.vocab, self.cfg = run.vocab(), run.config().model
            self.decode = run.config().decode.replace(**settings)
            self.device = type("Cpu", (), {"type": "cpu", "__str__": lambda self: "cpu"})()

        def decode_lines(self, ids: list[list[int]], decode: DecodeConfig, cons: Any, stop: Any = None) -> Any:
            return [[Hypothesis(list(x), -0.1 * len(x), -0.1 * len(x))] * max(1, decode.nbest) for x in ids]

    monkeypatch.setitem(auto.ENGINES, "copy", lambda path, processes, serving, **settings: Copier(path, **settings))
    lines = ["Ein Hund rennt. Zwei Katzen schlafen.", "", "Hallo Welt"]
    assert Translator.load(LEGACY, engine="copy").translate(lines) == lines
    with pytest.raises(Unsupported, match="constraints"):
        Translator.load(LEGACY, engine="copy").translate(lines, constraints=[["Hund"], None, None])
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(LEGACY), "--engine", "copy", "--input", str(src), "--output", str(out),
                 "--quiet"]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == lines


def test_a_requests_decoding_settings_are_checked_where_it_is_made() -> None:
    """A request's DecodeConfig overrides are a checked, read-only value made with the request (config.overrides):
    an unknown name, a wrong type or a value out of bounds is a ValueError naming the field, before any engine sees
    it; a float field takes an int as a float; None is not given."""
    with pytest.raises(ValueError, match="beam=0: expected a value >= 1"):
        Request(["x"], decode={"beam": 0})
    with pytest.raises(ValueError, match="unknown DecodeConfig key.*bogus.*valid keys"):
        Request(["x"], decode={"bogus": 1})
    with pytest.raises(ValueError, match="length_norm='nope': expected one of"):
        Request(["x"], decode={"length_norm": "nope"})
    with pytest.raises(ValueError, match="nbest='2': expected int"):
        Request(["x"], decode={"nbest": "2"})
    r = Request(["x"], decode={"lenpen": 1, "beam": None})
    assert dict(r.decode) == {"lenpen": 1.0} and isinstance(r.decode["lenpen"], float)
    with pytest.raises(TypeError):
        r.decode["beam"] = 2  # type: ignore[index]
