"""Configuration: presets, the precedence chain preset -> YAML -> --set, and clear errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from aiayn.config import REQUEST_OPTIONS, DecodeConfig, RunConfig, TrainConfig
from aiayn.training.recipes import parse_sets, resolve
from aiayn.translation.pipeline import option_hints


def test_precedence_preset_then_yaml_then_set(tmp_path: Path) -> None:
    y = tmp_path / "r.yaml"
    y.write_text("preset: small\nmodel: {p_drop: 0.3, d_ff: 512}\ntrain: {warmup: 800, max_tokens: 2048}\n")
    cfg = resolve(yaml_path=y, sets=["d_ff=768", "train.warmup=1000", "train.precision=fp32", "beam=5"])
    assert cfg.model.d_model == 256            # preset
    assert cfg.model.p_drop == 0.3             # YAML over preset
    assert cfg.model.d_ff == 768               # --set over YAML
    assert cfg.train.warmup == 1000 and cfg.train.max_tokens == 2048
    assert cfg.train.precision == "fp32" and cfg.decode.beam == 5


def test_explicit_preset_wins_over_yaml_preset(tmp_path: Path) -> None:
    y = tmp_path / "r.yaml"
    y.write_text("preset: small\n")
    assert resolve(preset="base", yaml_path=y).model.d_model == 512


def test_unknown_key_lists_valid_keys() -> None:
    with pytest.raises(ValueError, match=r"unknown config key 'max_token'.*max_tokens"):
        parse_sets(["max_token=100"])


def test_wrong_type_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"TrainConfig.max_tokens='lots'"):
        resolve(sets=["max_tokens=lots"])
    with pytest.raises(ValueError, match="warmup"):
        resolve(sets=["warmup=1.5"])
    with pytest.raises(ValueError, match="precision"):
        resolve(sets=["train.precision=fp8"])


def test_a_run_s_config_json_is_a_config_to_train_with(tmp_path: Path) -> None:
    """A run's config.json given back to --config (YAML reads JSON), and 1e-9 in --set: PyYAML (YAML 1.1) reads
    a number without a dot, such as 1e-09, as a string, which a float field takes as the number it spells."""
    cfg = resolve(preset="small", sets=["adam_eps=1e-9", "lr_factor=2"])
    assert cfg.train.adam_eps == 1e-9 and cfg.train.lr_factor == 2.0
    cfg.save(tmp_path / "config.json")
    assert resolve(yaml_path=tmp_path / "config.json") == cfg
    for bad in ("1e", "nan", "e-9", "1.0.0"):
        with pytest.raises(ValueError, match=f"adam_eps='{bad}': expected a number"):
            resolve(sets=[f"adam_eps={bad}"] if bad != "nan" else ["adam_eps='nan'"])


def test_bad_yaml_is_a_clear_error(tmp_path: Path) -> None:
    y = tmp_path / "bad.yaml"
    y.write_text("model: [1, 2\n")
    with pytest.raises(ValueError, match="invalid YAML"):
        resolve(yaml_path=y)
    y.write_text("modle: {d_model: 5}\n")
    with pytest.raises(ValueError, match="unknown section"):
        resolve(yaml_path=y)
    with pytest.raises(ValueError, match="not found"):
        resolve(yaml_path=tmp_path / "missing.yaml")


def test_run_config_json_round_trip(tmp_path: Path) -> None:
    cfg = resolve(preset="small", sets=["label_smoothing=0.2", "lenpen=1.0"])
    cfg.save(tmp_path / "config.json")
    assert RunConfig.load(tmp_path / "config.json") == cfg


def test_train_and_decode_validation() -> None:
    with pytest.raises(ValueError, match="update_freq"):
        TrainConfig(update_freq=0)
    with pytest.raises(ValueError, match="nbest"):
        DecodeConfig(beam=2, nbest=3)
    with pytest.raises(ValueError, match="label_smoothing"):
        TrainConfig(label_smoothing=1.0)
    assert TrainConfig(lr_factor=2).lr_factor == 2.0  # ints are accepted for float fields


@pytest.mark.parametrize("recipe", sorted(Path(__file__).parents[2].joinpath("aiayn", "configs").glob("*.yaml")))
def test_shipped_recipes_resolve(recipe: Path) -> None:
    resolve(yaml_path=recipe)


@pytest.mark.parametrize("command", ["train", "demo"])
def test_repeated_set_flags_all_apply(command: str) -> None:
    """``--set a=1 --set b=2 c=3`` keeps every override (argparse's default would keep only the last flag)."""
    from aiayn.cli.main import build_parser

    required = ["--data", "d", "--out", "o"] if command == "train" else []
    a = build_parser().parse_args([command, *required, "--set", "d_model=192", "--set", "n_layers=4", "d_ff=768"])
    assert a.set == ["d_model=192", "n_layers=4", "d_ff=768"]
    cfg = resolve("small", None, a.set)
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.d_ff) == (192, 4, 768)


def test_bf16_on_a_cpu_without_native_bf16_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from aiayn import precision

    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: False)
    monkeypatch.setattr(precision, "cpu_has_bf16_instructions", lambda: False)
    cpu = torch.device("cpu")
    with pytest.warns(UserWarning, match="without native bf16"):
        assert precision.resolve("bf16", cpu) == "bf16"
    assert precision.resolve("auto", cpu) == "fp32"          # auto never picks the emulated path
    monkeypatch.setattr(precision, "cpu_has_bf16_instructions", lambda: True)     # listed, but measured slow
    with pytest.warns(UserWarning, match="measure no faster"):
        assert precision.resolve("bf16", cpu) == "bf16"
    assert precision.resolve("auto", cpu) == "fp32"
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)
    assert precision.resolve("auto", cpu) == "bf16"


def test_fast_bf16_is_measured_not_read_from_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU that lists AVX512-BF16 is not enough: a 2-core Xeon VM listed it and ran bf16 matrix products at 0.54x
    fp32 (training at 0.61x), so auto must follow the probe; AIAYN_CPU_BF16 pins the choice either way."""
    from aiayn import precision

    monkeypatch.delenv("AIAYN_CPU_BF16", raising=False)
    for listed, speedup, fast in ((True, 0.55, False), (True, 2.5, True), (False, 2.5, False), (True, 1.29, False)):
        monkeypatch.setattr(precision, "bf16_speedup", lambda speedup=speedup: speedup)
        monkeypatch.setattr(precision, "cpu_has_bf16_instructions", lambda listed=listed: listed)
        precision.cpu_has_fast_bf16.cache_clear()
        assert precision.cpu_has_fast_bf16() is fast, (listed, speedup)
    for pinned, fast in (("fast", True), ("slow", False), ("FAST", True)):
        monkeypatch.setenv("AIAYN_CPU_BF16", pinned)
        precision.cpu_has_fast_bf16.cache_clear()
        assert precision.cpu_has_fast_bf16() is fast
    monkeypatch.setenv("AIAYN_CPU_BF16", "yes")
    precision.cpu_has_fast_bf16.cache_clear()
    with pytest.raises(ValueError, match="AIAYN_CPU_BF16='yes'"):
        precision.cpu_has_fast_bf16()
    precision.cpu_has_fast_bf16.cache_clear()


def test_the_bf16_probe_measures_both_precisions() -> None:
    from aiayn import precision

    ratio = precision.bf16_speedup()
    assert 0.001 < ratio < 100            # a rate over a rate: emulated bf16 is ~0.01, native ~2.5


def test_ctranslate2_auto_follows_what_ctranslate2_has(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU where CTranslate2 lists no bfloat16, auto was bf16 (from the flags) and every translation failed."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from aiayn.engines.ctranslate2 import precision_of
    from aiayn.runtime import DeviceName

    cpu, gpu = DeviceName("cpu"), DeviceName("cuda", 0)
    for types, device, auto in (({"float32", "int8"}, cpu, "fp32"), ({"float32", "bfloat16", "int8"}, cpu, "bf16"),
                                ({"float32", "float16", "int8"}, gpu, "fp16"), ({"float16", "bfloat16"}, gpu, "bf16")):
        monkeypatch.setattr(ctranslate2, "get_supported_compute_types", lambda *a, types=types: types)
        assert precision_of("auto", device) == auto
        if "bfloat16" not in types:
            with pytest.raises(ValueError, match="no efficient bfloat16"):
                precision_of("bf16", device)
    monkeypatch.setattr(ctranslate2, "get_supported_compute_types", lambda *a: {"float32", "int8"})
    assert precision_of("int8", cpu) == "int8" and precision_of("fp32", cpu) == "fp32"


def _subparser(name: str):  # type: ignore[no-untyped-def]
    import argparse

    from aiayn.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_a_command_parsed_alone_has_the_arguments_it_has_among_all() -> None:
    """main builds only the invoked command's arguments (the others' can import PyTorch): each command built alone has
    the same help, hence the same options and defaults, as in the full parser, and `aiayn --help` lists them all."""
    import argparse

    from aiayn.cli.main import COMMANDS, build_parser

    def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices

    full = commands(build_parser())
    assert list(full) == list(COMMANDS)
    for name in COMMANDS:
        alone = commands(build_parser(name))
        assert alone[name].format_help() == full[name].format_help(), name
    listing = build_parser(None).format_help()
    assert all(name in listing and " ".join(help.split()[:3]) in " ".join(listing.split()) for name, help in
               COMMANDS.items())


def test_every_decoding_setting_is_a_flag_and_a_request_field_with_its_bounds() -> None:
    """DecodeConfig is the one description: each field is a flag of translate, evaluate (not nbest) and serve,
    and each per_request field is a field of the server's request model that enforces the same bounds."""
    import dataclasses

    pytest.importorskip("pydantic")
    from pydantic import ValidationError

    from aiayn.serving.api import request_models
    from aiayn.serving.serve import ServeConfig

    flags = {cmd: {s for a in _subparser(cmd)._actions for s in a.option_strings} for cmd in ("translate", "evaluate",
                                                                                                 "serve")}
    request, _ = request_models(ServeConfig(max_beam=10**6))
    for f in dataclasses.fields(DecodeConfig):
        flag = "--" + f.name.replace("_", "-")
        assert flag in flags["translate"], f.name
        assert (flag in flags["evaluate"]) == (f.name != "nbest"), f.name
        # serve's own --workers / --max-batch-tokens (ServeConfig) decide what these two do elsewhere
        assert (_dest(_subparser("serve"), flag) == f"decode.{f.name}") == (f.name not in ("workers", "batch_tokens"))
        assert (f.name in request.model_fields) == bool(f.metadata["per_request"]), f.name
        if not f.metadata["per_request"]:
            continue
        value = f.default
        request.model_validate({"text": ["x"], f.name: value})            # the default is accepted
        for key, outside in (("ge", -1), ("gt", 0), ("le", 1)):
            bound = f.metadata[key]
            if bound is None:
                continue
            bad = type(value)(bound + outside) if key != "gt" else type(value)(bound)
            with pytest.raises(ValidationError):
                request.model_validate({"text": ["x"], f.name: bad})
            with pytest.raises(ValueError, match=f.name):
                DecodeConfig(**{f.name: bad})


def _dest(parser, flag: str) -> str | None:  # type: ignore[no-untyped-def]
    """Where ``parser`` puts the value of ``flag`` (None: no such flag)."""
    return next((a.dest for a in parser._actions if flag in a.option_strings), None)


def test_every_server_setting_is_a_serve_flag_with_its_bounds() -> None:
    """ServeConfig is the server's one description: each field is one flag of aiayn serve, with its type and bounds,
    and a value out of bounds is refused naming the field."""
    pytest.importorskip("pydantic")
    import dataclasses

    from aiayn.cli.main import build_parser
    from aiayn.serving.serve import ServeConfig

    serve = _subparser("serve")
    for f in dataclasses.fields(ServeConfig):
        flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        assert _dest(serve, flag) == f"serve.{f.name}", f.name
        for key, outside in (("ge", -1), ("gt", 0), ("le", 1)):
            bound = f.metadata[key]
            if bound is not None:
                bad = type(f.default)(bound + outside)
                with pytest.raises(ValueError, match=f"ServeConfig.{f.name}="):
                    ServeConfig(**{f.name: bad})
    a = build_parser().parse_args(["serve", "--model", "m", "--timeout", "5", "--max-beam", "3", "--workers", "2"])
    assert (vars(a)["serve.timeout_s"], vars(a)["serve.max_beam"], vars(a)["serve.workers"]) == (5.0, 3, 2)
    assert "decode.workers" not in vars(a)                      # --workers has one meaning here: decoding threads


def _another_value(f: Any, value: Any) -> Any:
    """A valid value of settings field ``f`` other than ``value``: a new field needs no entry in a test's table."""
    import typing

    hint = typing.get_type_hints(DecodeConfig)[f.name]
    if typing.get_origin(hint) is typing.Literal:
        return next(v for v in typing.get_args(hint) if v != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, str):
        return "cpu" if value != "cpu" else "auto"
    step = 1 if isinstance(value, int) else 0.5
    le = f.metadata["le"]
    return value + step if le is None or value + step <= le else value - step


def test_sentences_that_differ_in_any_decoding_field_never_share_a_search() -> None:
    """DecodeConfig.batch_key holds every field but those a search applies to each sentence on its own (the length
    limit, nbest): the server groups requests by it, and BeamSearch refuses a sentence whose key differs."""
    import dataclasses

    import torch

    from aiayn import ModelConfig, Transformer
    from aiayn.decoding.search import BeamSearch

    base = DecodeConfig(beam=2, nbest=1)
    model = Transformer(ModelConfig.preset("tiny")).eval()
    src = torch.tensor([[5, 6, 2]])
    for f in dataclasses.fields(DecodeConfig):
        other = dataclasses.replace(base, **{f.name: _another_value(f, getattr(base, f.name))})
        search = BeamSearch(model, base)
        if f.metadata["per_sentence"]:
            assert other.batch_key() == base.batch_key(), f.name
            search.admit(src, ["x"], other)                                  # decoded together, each by its own
        else:
            assert other.batch_key() != base.batch_key(), f.name
            with pytest.raises(ValueError, match=f"differ from the running search's in {f.name}"):
                search.admit(src, ["x"], other)
    # keep_plain is applied before any search (which lines a constrained search decodes again), so sentences that
    # differ in it may share one
    assert {f.name for f in dataclasses.fields(DecodeConfig) if f.metadata["per_sentence"]} == \
        {"max_len_a", "max_len_b", "nbest", "keep_plain"}
    # how a text is cut and checked is a request's option, not a model's setting (pipeline.Request): a run saved
    # with them reads without them, and a recipe that sets one is told where it went
    assert not set(REQUEST_OPTIONS) & {f.name for f in dataclasses.fields(DecodeConfig)}
    assert set(REQUEST_OPTIONS) <= set(option_hints())
    with pytest.raises(ValueError, match="decode.repair is a request's option"):
        resolve(sets=["decode.repair=true"])


def test_a_run_saved_with_the_request_options_in_its_decode_section_reads_without_them(tmp_path: Path) -> None:
    import json

    saved = RunConfig().to_dict()
    saved["decode"].update({"sentences": False, "sentence_tokens": 7, "repair": True, "runon": False, "beam": 3})
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert RunConfig.load(tmp_path / "config.json").decode == DecodeConfig(beam=3)


def test_the_demo_trains_the_short_recipe_only_where_the_run_sees_fewer_than_10_epochs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """make demo's recipe follows the epochs its minutes buy on this kind of CPU (demo.EPOCHS_PER_MINUTE): the
    short recipe (no dropout, lower rate, last 6 averaged) below 10 epochs, the full one beyond; on GPUs the full one."""
    from aiayn import demo

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(demo, "cpu_has_fast_bf16", lambda: False)            # AVX2: 0.32 epochs a minute
    assert demo.recipe("de", "en", 15) == "multi30k-de-en-short"
    assert demo.recipe("en", "de", 30) == "multi30k-en-de-short"              # 9.6 epochs
    assert demo.recipe("de", "en", 60) == "multi30k-de-en"
    monkeypatch.setattr(demo, "cpu_has_fast_bf16", lambda: True)             # AVX-512 BF16: 0.5 a minute
    assert demo.recipe("de", "en", 15) == "multi30k-de-en-short"
    assert demo.recipe("de", "en", 19.9) == "multi30k-de-en-short"           # 9.95 epochs: fewer than 10
    assert demo.recipe("de", "en", 20) == "multi30k-de-en"                   # exactly 10: the full recipe
    assert demo.recipe("de", "en", 30) == "multi30k-de-en"
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert demo.recipe("de", "en", 15) == "multi30k-de-en"
    short, full = resolve(yaml_path="multi30k-de-en-short"), resolve(yaml_path="multi30k-de-en")
    assert (short.model.p_drop, short.train.lr_factor, short.train.average_last) == (0.0, 1.5, 6)
    assert (full.model.p_drop, full.train.lr_factor, full.train.average_last) == (0.1, 2.0, 8)
    assert short.model == dataclasses.replace(full.model, p_drop=0.0)      # the same model otherwise


def test_the_demo_prints_the_recorded_figure_for_this_kind_of_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """make demo says what to expect from its own records: each record exists and holds the figure quoted."""
    import json

    from aiayn import demo

    root = Path(__file__).parents[2]
    for (src, tgt, _minutes, _kind), (bleu_lc, steps, record) in demo.RECORDED.items():
        text = (root / record).read_text()
        if record.endswith(".json"):
            r = json.loads(text)
            assert (r["bleu_lc"], r["steps"]) == (bleu_lc, steps) and f"{src}-{tgt}" in r["run_dir"]
        else:
            assert f"{bleu_lc:.2f}" in text and f"{steps:,}" in text, record
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(demo, "cpu_has_fast_bf16", lambda: False)
    assert "expect about 38.2 lowercased BLEU" in demo.expectation("de", "en", 15)
    assert "1,276 updates in 15 minutes" in demo.expectation("de", "en", 15)
    assert demo.expectation("de", "en", 7).startswith("no recorded de->en run of 7 minutes on a 2-core AVX2")
    monkeypatch.setattr(demo, "cpu_has_fast_bf16", lambda: True)
    bf16 = demo.expectation("de", "en", 30)
    assert "expect about 42.1 lowercased BLEU" in bf16 and "AVX-512 BF16" in bf16 and "3,628 updates" in bf16
    assert "38.2" not in demo.expectation("de", "en", 15)              # an AVX2 figure is not quoted for bf16
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert demo.expectation("de", "en", 15).startswith("no recorded demo run on a GPU")


def test_the_fixed_length_demo_says_the_mean_of_its_records() -> None:
    """make demo (demo.UPDATES) prints the mean lowercased BLEU of its records, each of which exists, is a run of that
    many updates and lies within 0.5 of it."""
    import json

    from aiayn import demo

    root = Path(__file__).parents[2]
    assert (("de", "en", demo.UPDATES)) in demo.RECORDED_UPDATES
    for (src, tgt, updates), (bleu_lc, records) in demo.RECORDED_UPDATES.items():
        runs = [json.loads((root / r).read_text()) for r in records]
        assert all(r["steps"] == updates and f"{src}-{tgt}" in r["run_dir"] for r in runs)
        assert sum(r["bleu_lc"] for r in runs) / len(runs) == pytest.approx(bleu_lc, abs=0.05)
        assert all(abs(r["bleu_lc"] - bleu_lc) <= 0.5 for r in runs)
        assert demo.expect_updates(src, tgt, updates).startswith(f"expect {bleu_lc:.1f} lowercased BLEU")


def test_cpu_only_is_told_without_pytorch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether aiayn translate may decode in worker processes is decided before PyTorch is imported: cpu always, auto
    only where no GPU driver shows (NVIDIA's, AMD's) and not on a Mac (MPS), a named GPU never."""
    import os
    import sys

    from aiayn.runtime import cpu_only

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    assert cpu_only("cpu") and cpu_only("auto") and not cpu_only("cuda") and not cpu_only("cuda:1")
    monkeypatch.setattr(os.path, "exists", lambda p: p == "/dev/nvidiactl")
    assert cpu_only("cpu") and not cpu_only("auto")
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not cpu_only("auto") and not cpu_only("mps")
