"""A calibrated confidence per sentence (hypotheses.py): its features, the regression and its measures, where it is
shown (the CLI, the pipeline, documents), the fallback cascade, and run-on text cut at its openers (spans.py).
Fast: the tiny fixture model, no server process (the APIs' fields: test_serve.py, test_libretranslate.py)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aiayn import Translator
from aiayn.config import Norms
from aiayn.decoding.hypotheses import (
    BUNDLED,
    NAMES,
    Calibration,
    Hypothesis,
    features,
    fit,
    for_run,
    of_text,
    pearson,
    roc_auc,
)
from aiayn.translation.pipeline import Request, translate
from aiayn.translation.spans import Pieces, cut_runon, split

from ..helpers import cli_error

LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy-f06e6aa" / "run"
LINES = ["Ein Mann fährt mit dem Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch."]


@pytest.fixture(scope="module")
def legacy() -> Translator:
    return Translator.load(LEGACY, "torch", device="cpu", beam=3, workers=1)


# --- the measures and the regression -------------------------------------------------------------------------------


def test_roc_auc_is_the_share_of_pairs_ranked_right_ties_half() -> None:
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 60).astype(float).tolist()          # many ties
    positive = (rng.random(60) < 0.4).tolist()
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    pairs = [1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg]
    assert roc_auc(scores, positive) == pytest.approx(sum(pairs) / len(pairs))
    assert math.isnan(roc_auc([1.0, 2.0], [True, True]))
    assert pearson([1, 2, 3], [2, 4, 6.5]) > 0.99 and math.isnan(pearson([1, 1, 1], [1, 2, 3]))


def test_fit_finds_what_separates_good_from_bad_and_fills_missing_features() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, len(NAMES)))
    good = (x[:, 0] - 0.5 * x[:, 3] + 0.3 * rng.normal(size=400)) > 0
    cal = fit(x.tolist(), good.tolist())
    p = np.array(cal(x.tolist()))
    assert roc_auc(p.tolist(), good.tolist()) > 0.95
    assert cal.weights[0] > 0 > cal.weights[3]
    assert ((p >= 0) & (p <= 1)).all()
    row = x[0].tolist()
    row[1] = math.nan                                                 # a feature the engine did not give
    assert 0.0 <= cal([row])[0] <= 1.0


def test_a_calibration_is_saved_and_read_back_and_a_wrong_file_is_refused_by_name(tmp_path: Path) -> None:
    cal = fit([[float(i % 7), 1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0] for i in range(50)], [i % 7 > 2 for i in range(50)])
    cal.save(tmp_path / "calibration.json")
    back = for_run(tmp_path)
    assert back.weights == pytest.approx(cal.weights) and back.source == str(tmp_path / "calibration.json")
    assert for_run(tmp_path / "missing").source == str(BUNDLED)      # a run without one: the package's
    (tmp_path / "calibration.json").write_text(json.dumps({**json.loads((tmp_path / "calibration.json").read_text()),
                                                          "names": ["x"]}))
    with pytest.raises(ValueError, match="calibration.json: calibrated on other features"):
        for_run(tmp_path)
    (tmp_path / "calibration.json").write_text("{not json")
    with pytest.raises(ValueError, match="calibration.json: not a calibration file"):
        for_run(tmp_path)


def test_features_read_the_runner_up_the_length_and_the_unknown_tokens() -> None:
    norms = Norms(ratio=(0.5, 2.0))
    h = Hypothesis([5, 6, 7], score=-0.2, logprob=-1.2, runner_up=(-0.5, [5, 6, 8]))
    f = dict(zip(NAMES, features([9, 3, 3, 3], h, norms, None, unk_id=3), strict=True))
    assert f["mean_logprob"] == pytest.approx(-1.2 / 4)
    assert f["margin"] == pytest.approx(0.3) and f["agreement"] == pytest.approx(2 / 3)
    assert f["unknown"] == pytest.approx(0.75) and f["off_norms"] == 0.0
    alone = dict(zip(NAMES, features([9], Hypothesis([5] * 8, -1, -2), norms, "loop", unk_id=3), strict=True))
    assert math.isnan(alone["margin"]) and math.isnan(alone["agreement"])     # greedy search: no runner-up
    assert alone["loop"] == 1.0 and alone["off_norms"] == pytest.approx(math.log(4.5 / 2.0))
    assert of_text([0.9, None, 0.4]) == 0.4 and of_text([]) == 1.0 and of_text([None]) is None


# --- through the engines ---------------------------------------------------------------------------------------------


def test_beam_search_tells_the_best_its_runner_up(legacy: Translator) -> None:
    hyps = legacy.engine.translate_hypotheses(LINES, nbest=2)
    for best, second in hyps:
        assert best.runner_up == (second.score, second.tokens)
        assert second.runner_up is None


def test_every_translation_has_its_confidence_and_a_text_its_least_sure_sentences(legacy: Translator) -> None:
    out = translate(legacy.engine, Request([*LINES, " ".join(LINES), ""])).translations
    sure = [ts[0].confidence for ts in out]
    assert all(c is not None and 0.0 <= c <= 1.0 for c in sure)
    assert sure[3] == pytest.approx(min(sure[:3]))                   # the three sentences of one text
    assert sure[4] == 1.0                                             # a blank line: nothing to doubt


def test_the_run_s_own_calibration_is_the_one_used(legacy: Translator, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(LEGACY, run, ignore=shutil.ignore_patterns("engines"))
    Calibration([0.0] * len(NAMES), -3.0, [0.0] * len(NAMES), [1.0] * len(NAMES)).save(run / "calibration.json")
    t = Translator.load(run, "torch", device="cpu", beam=3, workers=1)
    assert t.engine.calibration.source == str(run / "calibration.json")
    assert t.translations(LINES[:1])[0].confidence == pytest.approx(1 / (1 + math.exp(3.0)))


def test_translate_scores_prints_json_lines_with_the_confidence(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from aiayn.cli.main import main

    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    assert main(["translate", "--model", str(LEGACY), "--engine", "torch", "--input", str(src), "--scores",
                 "--no-processes"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["line"] for r in rows] == [0, 1, 2]
    assert all(0.0 <= r["confidence"] <= 1.0 and r["text"] for r in rows)


def test_min_confidence_out_of_range_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from aiayn.cli.main import main

    with pytest.raises(SystemExit):
        main(["translate", "--model", str(LEGACY), "--min-confidence", "1.5"])
    assert "expected a number in [0, 1]" in capsys.readouterr().err


def test_calibrate_fits_on_the_lines_given_and_stores_it_in_the_run(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from aiayn.cli.main import main

    run = tmp_path / "run"
    shutil.copytree(LEGACY, run, ignore=shutil.ignore_patterns("engines"))
    here = Path(__file__).parents[2] / "aiayn" / "bundled" / "multi30k"
    import gzip

    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    src.write_text("\n".join(gzip.open(here / "val.de.gz", "rt").read().splitlines()[:120]) + "\n")
    ref.write_text("\n".join(gzip.open(here / "val.en.gz", "rt").read().splitlines()[:120]) + "\n")
    assert main(["calibrate", "--model", str(run), "--engine", "torch", "--src", str(src), "--ref", str(ref),
                 "--threshold", "1.2"]) == 0          # (the fixture model is weak: chrF 1 at its median)
    out = capsys.readouterr().out
    assert "fitted on: 120 sentences, Pearson r" in out and "ROC AUC" in out
    cal = Calibration.load(run / "calibration.json")
    assert cal.threshold == 1.2 and cal.fitted["fitted"]["sentences"] == 120
    assert main(["calibrate", "--model", str(run), "--src", str(src)]) == 2
    assert "--src and --ref go together" in cli_error(capsys.readouterr().err, "calibrate")
    assert main(["calibrate", "--model", str(run), "--engine", "torch", "--src", str(src), "--ref", str(ref),
                 "--threshold", "101"]) == 2
    assert "none of the 120 sentences scores chrF 101 or more" in cli_error(capsys.readouterr().err, "calibrate")


# --- the cascade -----------------------------------------------------------------------------------------------------


class _Sure:
    """A calibration that gives every sentence the same confidence."""

    def __init__(self, value: float, source: str) -> None:
        self.value, self.source, self.threshold = value, source, 50.0

    def __call__(self, rows: Any) -> list[float]:
        return [self.value] * len(rows)


def test_the_unsure_lines_go_to_the_fallback_whose_surer_translations_are_kept(legacy: Translator,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    first = Translator.load(LEGACY, "torch", device="cpu", beam=1, workers=1)
    first.engine.calibration = _Sure(0.2, "first")                           # type: ignore[assignment]
    second = Translator.load(LEGACY, "torch", device="cpu", beam=3, workers=1)
    second.engine.calibration = _Sure(0.9, "second")                         # type: ignore[assignment]
    from aiayn.translation.route import Route

    def along(min_confidence: float) -> Any:
        return Route((first.engine,), Route((second.engine,)), min_confidence).follow(Request(LINES))

    out, counts = along(0.5)
    assert [ts[0].confidence for ts in out] == [0.9] * 3 and counts["fallback.sent"] == counts["fallback.kept"] == 3
    out, counts = along(0.1)                                            # all surer than 0.1: none sent
    assert [ts[0].confidence for ts in out] == [0.2] * 3 and counts["fallback.sent"] == 0
    second.engine.calibration = _Sure(0.1, "second")                         # type: ignore[assignment]
    out, counts = along(0.5)                                            # sent, but the first's is surer
    assert [ts[0].confidence for ts in out] == [0.2] * 3 and (counts["fallback.sent"], counts["fallback.kept"]) == (3, 0)


# --- documents ---------------------------------------------------------------------------------------------------------


PO = '''msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"
"Language: en\\n"

msgid "Ein Hund läuft."
msgstr ""

msgid "Zwei Katzen schlafen."
msgstr ""
'''


@pytest.mark.parametrize("review", [True, False])
def test_a_po_entry_less_sure_than_the_threshold_is_fuzzy_even_when_trusted(tmp_path: Path, review: bool) -> None:
    from translate.storage import factory

    from aiayn.documents.common import Options, Scored
    from aiayn.documents.formats import translate_document

    src = tmp_path / "in.po"
    src.write_text(PO)
    sure = {"Ein Hund läuft.": 0.9, "Zwei Katzen schlafen.": 0.2}
    translate_document(src, tmp_path / "out.po", lambda texts, fmt, kinds: [Scored(t.upper(), sure[t]) for t in texts],
                       options=Options("de", "en", review=review, min_confidence=0.5))
    store = factory.getobject(str(tmp_path / "out.po"))
    fuzzy = {str(u.source): u.isfuzzy() for u in store.units if not u.isheader()}
    assert fuzzy == {"Ein Hund läuft.": review, "Zwei Katzen schlafen.": True}


def test_an_xliff_target_less_sure_than_the_threshold_needs_review(tmp_path: Path) -> None:
    from aiayn.documents.common import Options, Scored
    from aiayn.documents.formats import translate_document

    src = tmp_path / "in.xlf"
    src.write_text('<?xml version="1.0" encoding="UTF-8"?>\n<xliff version="1.2" '
                   'xmlns="urn:oasis:names:tc:xliff:document:1.2"><file source-language="de" target-language="en" '
                   'datatype="plaintext" original="x"><body>\n<trans-unit id="1"><source>Ein Hund läuft.</source>'
                   '</trans-unit>\n<trans-unit id="2"><source>Zwei <g id="a">Katzen</g> schlafen.</source>'
                   '</trans-unit>\n</body></file></xliff>\n')
    sure = {"Ein Hund läuft.": 0.9}
    translate_document(src, tmp_path / "out.xlf",
                       lambda texts, fmt, kinds: [Scored(t, sure.get(t, 0.1)) for t in texts],
                       options=Options("de", "en", review=False, min_confidence=0.5))
    out = (tmp_path / "out.xlf").read_text()
    units = out.split("<trans-unit")[1:]
    assert 'state="translated"' in units[0] and 'state="needs-review-translation"' in units[1]


# --- run-on text -------------------------------------------------------------------------------------------------------


def test_run_on_text_is_cut_before_its_openers_only() -> None:
    openers = frozenset({"Ein", "Eine", "Zwei", "Die"})
    text = "Ein Mann mit einem Hut Ein Hund läuft über Gras Zwei Kinder spielen"
    assert cut_runon(split(text, "de"), openers).sentences == ["Ein Mann mit einem Hut", "Ein Hund läuft über Gras",
                                                               "Zwei Kinder spielen"]
    for whole in ("Er sagte: Die Sonne scheint hell", "Ein Hut Ein", "Hut Ein Mann"):   # a clause mark; lone words
        assert len(cut_runon(split(whole, "de"), openers).spans) == 1, whole
    assert cut_runon(split("Er liest Zwei Ein Bücher", "de"), openers).sentences == ["Er liest", "Zwei Ein Bücher"]
    assert cut_runon(Pieces("x", ((0, 1),)), ()) == Pieces("x", ((0, 1),))


def test_the_openers_are_counted_from_the_training_source(multi30k_dir: Any) -> None:
    norms = multi30k_dir.norms()
    openers, starters = set(norms.openers), dict(norms.starters)
    assert {"Ein", "Eine", "Zwei", "Drei"} <= openers
    assert not {"Mann", "Hund", "Frau", "Männer"} & openers          # capitalized nouns start sentences rarely
    assert 0.05 <= starters["Leute"] < 0.8 and "Mann" not in starters and starters["Ein"] > 0.99
    assert norms.ratio is not None and norms.short is not None and norms.ratio[0] < norms.short < 1.0
    assert Norms.from_dict(norms.to_dict()) == norms


def test_evaluate_says_how_the_confidence_agrees_with_sentence_chrf(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    from aiayn.cli.main import main

    here = Path(__file__).parents[2] / "aiayn" / "bundled" / "multi30k"
    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    src.write_text("\n".join(gzip.open(here / "test_2016_flickr.de.gz", "rt").read().splitlines()[:60]) + "\n")
    ref.write_text("\n".join(gzip.open(here / "test_2016_flickr.en.gz", "rt").read().splitlines()[:60]) + "\n")
    assert main(["evaluate", "--model", str(LEGACY), "--engine", "torch", "--src", str(src), "--ref", str(ref),
                 "--json", "--no-processes", "--hyps", str(tmp_path / "hyps")]) == 0
    c = json.loads(capsys.readouterr().out)["confidence"]
    assert -1 <= c["pearson"] <= 1 and c["calibration"] == str(BUNDLED) and c["threshold"] == 50
    # the fixture model is weak: every sentence is under the threshold, where an AUC cannot be measured (null)
    assert c["below_threshold"] == 1.0 and c["roc_auc"] is None


class _ByLength:
    """A calibration that is surer of shorter sources (``shorter``) or of longer ones."""

    def __init__(self, shorter: bool) -> None:
        self.shorter, self.source, self.threshold = shorter, "test", 50.0

    def __call__(self, rows: Any) -> list[float]:
        n = [row[NAMES.index("log_src_len")] for row in rows]
        return [1 / (1 + x) if self.shorter else x / (1 + x) for x in n]


@pytest.mark.parametrize("shorter", [True, False])
def test_the_length_guard_cuts_a_short_translation_at_its_likeliest_starter_and_keeps_the_surer(
        shorter: bool) -> None:
    import dataclasses

    t = Translator.load(LEGACY, "torch", device="cpu", beam=3, workers=1)
    t.engine.calibration = _ByLength(shorter)                                # type: ignore[assignment]
    text = "Ein Mann mit einem roten Hut fährt mit dem Fahrrad Zwei kleine Hunde spielen im Schnee am Strand"
    whole, left, right = t.translate([text, text[:text.index("Zwei")], text[text.index("Zwei"):]], runon=False)
    # every translation counts as short here; "Zwei" a starter but no opener (cut_runon leaves it)
    t.engine.norms = dataclasses.replace(t.engine.norms, short=100.0, starters=(("Zwei", 0.3), ("Hut", 0.01)))
    out, counts = translate(t.engine, Request([text]))
    assert counts["guard.cut"] == 1
    assert out[0][0].text == (f"{left} {right}" if shorter else whole)
    assert counts["guard.kept"] == shorter
    assert translate(t.engine, Request([text], runon=False)).translations[0][0].text == whole      # off with runon


def test_serve_hands_its_unsure_texts_to_the_fallback(tmp_path: Path) -> None:
    """aiayn serve --fallback RUN --min-confidence X: a text less sure than X translated again by the fallback model,
    kept where surer, in both APIs, counted in /metrics; a fallback for a pair no model serves is refused by name."""
    import shutil

    from ..helpers import Server

    first, back = tmp_path / "first", tmp_path / "back"
    for run, bias in ((first, -4.0), (back, 4.0)):                   # the first unsure of all, the fallback sure
        shutil.copytree(LEGACY, run, ignore=shutil.ignore_patterns("engines"))
        Calibration([0.0] * len(NAMES), bias, [0.0] * len(NAMES), [1.0] * len(NAMES)).save(run / "calibration.json")
    s = Server("--no-processes", "--engine", "torch", "--fallback", str(back), "--min-confidence", "0.5", model=first)
    try:
        status, _, body = s.post("/translate", {"text": LINES[:2]})
        assert status == 200 and body["confidence"] == [round(1 / (1 + math.exp(-4.0)), 4)] * 2, body
        status, _, lt = s.post("/translate", {"q": LINES[0], "source": "de", "target": "en"})
        assert status == 200 and lt["confidence"] == body["confidence"][0]
        _, _, text = s.request("GET", "/metrics")
        for outcome in ("sent", "kept"):                             # counted by the route (the model) they took
            assert re.search(r'aiayn_fallback_texts_total\{model="[^"]+",outcome="' + outcome + r'"\} 3.0', text.decode())
    finally:
        assert s.stop() == 0


def test_translate_fallback_on_the_command_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from aiayn.cli.main import main

    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    with caplog.at_level(logging.INFO):
        assert main(["translate", "--model", str(LEGACY), "--engine", "torch", "--no-processes", "--beam", "1",
                     "--fallback", str(LEGACY), "--min-confidence", "1", "--input", str(src), "--output",
                     str(tmp_path / "out.txt")]) == 0
    assert "--fallback: 3 lines under confidence 1 translated again" in caplog.text
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 3
