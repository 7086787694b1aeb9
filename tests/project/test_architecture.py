"""The structure itself: one owner per concept, the import rules of docs/architecture.md, old run directories
still loading and resuming, precision validated everywhere, no process-wide side effects in constructors."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import sacrebleu
import torch
from safetensors.torch import load_file

from aiayn import DecodeConfig, RunDir, TrainConfig, Translator, precision
from aiayn.cli.main import main
from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data.datadir import DataDir
from aiayn.quantize import Int8Linear, int8
from aiayn.training.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aiayn"
LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy-f06e6aa"


# --- the import rules of docs/architecture.md ----------------------------------------------------------------------


def _documented_rules() -> dict[str, dict[str, str]]:
    """module -> {imported module: "" | "late" | "types"} from the table at the end of docs/architecture.md."""
    rules: dict[str, dict[str, str]] = {}
    table = (ROOT / "docs" / "architecture.md").read_text().split("| module | may import |")[1]
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        name, allowed = (c.strip() for c in line.strip("|").split("|"))
        rules[name.replace("\\", "")] = {m.group(1): m.group(2) or "" for m in
                                         re.finditer(r"([\w.]+)(?: \((late|types)\))?", allowed)}
    return rules


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name under aiayn ("translate", "serving.serve"). A group's
    ``__init__.py`` is its docstring only (test_groups_are_entered_through_their_modules), so it is not listed."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] != "__init__" or len(parts) == 1:
            found[".".join(parts)] = path
    return found


def _resolve(parts: tuple[str, ...], names: list[str]) -> list[str]:
    """The modules that ``from <parts> import <names>`` reaches (parts relative to the package root)."""
    if parts and PACKAGE.joinpath(*parts).with_suffix(".py").is_file():
        return [".".join(parts)]
    return [".".join([*parts, n]) for n in names if PACKAGE.joinpath(*parts, f"{n}.py").is_file()]


def _actual_imports(path: Path) -> dict[str, str]:
    """Intra-package imports of a module: dotted name -> "" (module level), "late" (in a function), "types"
    (TYPE_CHECKING)."""
    found: dict[str, str] = {}
    here = path.relative_to(PACKAGE).parent.parts

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = "late"
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                inner = "types"
            if isinstance(child, ast.ImportFrom) and child.level >= 1:
                base = here[: len(here) - (child.level - 1)]
                parts = (*base, *child.module.split(".")) if child.module else base
                for name in _resolve(parts, [a.name for a in child.names]):
                    found[name] = min(found.get(name, inner), inner, key=["", "late", "types"].index)
            visit(child, inner)

    visit(ast.parse(path.read_text()), "")
    return found


def test_every_module_imports_exactly_what_docs_architecture_says() -> None:
    rules, modules = _documented_rules(), _modules()
    assert set(rules) == set(modules), f"docs/architecture.md lists {sorted(set(rules) ^ set(modules))} wrongly"
    for name in sorted(modules):
        allowed, actual = rules[name], _actual_imports(modules[name])
        for dep, how in actual.items():
            assert dep in allowed, f"{name} imports {dep}, which docs/architecture.md does not allow"
            assert how == allowed[dep], f"{name} imports {dep} {how or 'at module level'}, not {allowed[dep]}"
        unused = set(allowed) - set(actual)
        assert not unused, f"docs/architecture.md says {name} imports {sorted(unused)}, which it does not"


def test_groups_are_entered_through_their_modules() -> None:
    """A group is a folder of modules, one per stage (data/, decoding/, translation/, training/, engines/, serving/,
    documents/, interop/, cli/): its __init__.py holds a docstring naming its entrance and imports nothing, so that
    importing one module of a group (the CLI's `--engine` choice) does not load the others (FastAPI, CTranslate2)."""
    groups = [p.parent for p in PACKAGE.glob("*/__init__.py")]
    assert {g.name for g in groups} == {"data", "decoding", "translation", "training", "engines", "serving",
                                        "documents", "interop", "cli"}
    for group in groups:
        tree = ast.parse((group / "__init__.py").read_text())
        assert ast.get_docstring(tree) and len(tree.body) == 1, f"{group.name}/__init__.py does more than name its entrance"


def test_the_root_holds_the_papers_core_the_entrance_and_the_run() -> None:
    """docs/architecture.md, "Where things are": the root keeps the paper's model and training objective, the
    package's entrance, and the run every stage shares (its directory, checkpoints, where and how precisely it
    computes); everything else lives in its stage's folder."""
    core = {"model", "attention", "cache", "dropout", "loss", "optim", "config"}
    entrance = {"__init__", "__main__", "translator", "demo"}
    run = {"rundir", "checkpoint", "atomic", "runtime", "precision", "quantize", "quoting"}
    assert {p.stem for p in PACKAGE.glob("*.py")} == core | entrance | run


LAYERS = {"data": 1, "decoding": 3, "engines": 4, "translation": 5, "training": 6, "documents": 6, "interop": 6,
          "serving": 7, "cli": 9}
ROOT_LAYERS = {"rundir": 2, "translator": 8, "demo": 8, "__init__": 9, "__main__": 9}   # the rest of the root: 0


def test_layers_run_one_way() -> None:
    """docs/architecture.md, "The modules": no module imports one of a layer above its own, not even in a function
    (an annotation's type excepted), so that a request walks down and nothing calls back up: the engines import
    nothing above engines/ (the CTranslate2 conversion and Argos packages are read there), translation/ nothing of
    training/ or serving/."""
    def layer(name: str) -> int:
        return LAYERS[name.split(".")[0]] if "." in name else ROOT_LAYERS.get(name, 0)

    climbs = [f"{name} -> {dep}" for name, path in _modules().items()
              for dep, how in _actual_imports(path).items() if how != "types" and layer(dep) > layer(name)]
    assert climbs == []


def _reached(name: str, rules: dict[str, dict[str, str]], kinds: tuple[str, ...]) -> set[str]:
    """The modules ``name`` imports, and those they import, through imports of the given kinds."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for dep, how in rules[todo.pop()].items():
            if how in kinds and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_engines_import_neither_the_pipeline_nor_serving_and_the_core_not_serving() -> None:
    """An engine is called by the pipeline and by the server's batchers, never the other way (a request does not
    climb back up): no module of engines/ imports the pipeline or anything of serving/, not even in a function or for
    its types, nor reaches them through what it imports at load time. Nothing but the server's own modules and the
    command line imports serving/."""
    rules = _documented_rules()
    for name in (n for n in rules if n.startswith("engines.")):
        direct = set(rules[name])
        loaded = _reached(name, rules, ("",))
        for found in (direct, loaded):
            climbs = sorted(m for m in found if m == "pipeline" or m.startswith("serving."))
            assert not climbs, f"{name} imports {climbs}: an engine knows neither the pipeline nor the server"
    for name, deps in rules.items():
        if not name.startswith(("serving.", "cli.")):
            assert not [d for d in deps if d.startswith("serving.")], f"{name} imports the server ({sorted(deps)})"


def test_no_import_cycles() -> None:
    """Not even through an import inside a function or for type annotations only."""
    rules = _documented_rules()

    def visit(name: str, path: list[str]) -> None:
        for dep in rules[name]:
            assert dep not in path, f"import cycle: {' -> '.join([*path, name, dep])}"
            visit(dep, [*path, name])

    for name in rules:
        visit(name, [])


def _functions_and_classes() -> list[tuple[int, str, str]]:
    found = []
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                found.append((node.end_lineno - node.lineno + 1, kind, f"{path.name}:{node.lineno} {node.name}"))  # type: ignore[operator]
    return found


def test_functions_and_classes_stay_short() -> None:
    """CONTRIBUTING.md, "What the architecture test enforces": a function past 60 lines or a class past 150 is split where
    a reader would pause."""
    for lines, kind, where in _functions_and_classes():
        assert lines <= (60 if kind == "function" else 150), f"{kind} {where} is {lines} lines long"


def _spelled_outside(allowed: dict[str, set[str]]) -> list[str]:
    """Places where a string constant equal to a key of ``allowed`` appears outside the modules allowed for it."""
    wrong = []
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in allowed \
                    and path.name not in allowed[node.value]:
                wrong.append(f"{path.name}:{node.lineno} {node.value!r}")
    return wrong


def test_only_datadir_py_and_tokenizer_py_spell_data_directory_paths() -> None:
    """A data directory's layout is DataDir's (data/datadir.py), its tokenizer files tokenizer.py's; a CTranslate2 export
    keeps its SentencePiece model under a name of its own (export.EXPORT_SPM), and transformers' MarianTokenizer
    reads a vocab.json of its own (written by export.py, read by pretrained.py)."""
    owners = {"manifest.json": {"datadir.py"}, "vocab.json": {"tokenizer.py", "export.py", "pretrained.py"},
              "spm.model": {"tokenizer.py", "ctranslate2.py"},
              "spm.src.model": {"tokenizer.py"}, "spm.tgt.model": {"tokenizer.py"}}
    assert _spelled_outside(owners) == []
    assert (PACKAGE / "engines" / "ctranslate2.py").read_text().count('"spm.model"') == 1


def test_only_rundir_spells_run_directory_paths() -> None:
    """The run directory's layout is known in rundir.py alone (pretrained.py names transformers' config.json once,
    as pretrained.HF_CONFIG)."""
    names = {"last", "best", "averaged", "checkpoints", "config.json", "metrics.jsonl", "data.json", "hyps",
             "demo.json", "tb"}
    for path in _modules().values():
        if path.name == "rundir.py":
            continue
        tree = ast.parse(path.read_text())
        keys = {id(k) for d in ast.walk(tree) if isinstance(d, ast.Dict) for k in d.keys}   # JSON fields, not paths
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in keys:
                if (path.name, node.value) == ("pretrained.py", "config.json"):
                    assert path.read_text().count('"config.json"') == 1
                    continue
                assert node.value not in names and not node.value.startswith("step_"), \
                    f"{path.name} spells the run-dir path {node.value!r}: ask RunDir"


def test_public_api() -> None:
    import aiayn

    assert {"Translator", "Transformer", "ModelConfig", "RunDir", "configure"} <= set(aiayn.__all__)
    assert not (ROOT / "configs").is_symlink(), "recipes live in aiayn/configs only"


def test_the_python_api_is_its_own_type_on_the_command_lines_engine() -> None:
    """Translator has the methods it documents and hands nothing on to its engine (``t.engine`` is what decodes), and
    loads the engine the command line loads by default."""
    import argparse
    import inspect

    from aiayn.cli.common import add_decode_flags
    from aiayn.translator import Translator

    assert not {"__getattr__", "__setattr__", "__delattr__"} & set(vars(Translator))
    p = argparse.ArgumentParser()
    add_decode_flags(p)
    assert inspect.signature(Translator.load).parameters["engine"].default == p.get_default("engine") == "auto"


def test_no_module_keeps_counts_of_requests() -> None:
    """What happened to a request comes back with it (pipeline.Translated): no module-level dict, Counter or list of
    aiayn/ is added to (an augmented assignment to a subscript of a module-level name) inside a function."""
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        globals_ = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(fn):
                if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript):
                    base = node.target.value
                    while isinstance(base, ast.Subscript):
                        base = base.value
                    assert not (isinstance(base, ast.Name) and base.id in globals_), \
                        f"{name}.{fn.name} counts into the module-level {base.id}"


# --- run directories written before the architecture change --------------------------------------------------------


@pytest.fixture()
def legacy(tmp_path: Path) -> Path:
    """A copy of the fixture written by the code at f06e6aa (tests/fixtures/make_legacy_run.py)."""
    shutil.copytree(LEGACY, tmp_path / "legacy")
    return tmp_path / "legacy"


def test_a_legacy_run_translates_as_it_did(legacy: Path) -> None:
    expected = json.loads((legacy / "expected.json").read_text(encoding="utf-8"))
    src = (legacy / "data" / "valid.de").read_text(encoding="utf-8").splitlines()
    t = Translator.load(legacy / "run", "torch", device="cpu")
    assert t.translate(src, beam=1) == expected["greedy"]
    assert t.translate(src, beam=4) == expected["beam4"]
    assert DataDir(legacy / "data").special_ids == {"pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID,
                                                    "unk_id": UNK_ID}


def _sha256s(weights: dict[str, torch.Tensor]) -> dict[str, str]:
    return {k: hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest() for k, v in sorted(weights.items())}


def _without_key_bias(name: str, w: torch.Tensor, d_model: int) -> torch.Tensor:
    """A weight without the part of a fused projection's bias that biases the keys (qkv_proj: its middle third;
    kv_proj: its first half). A key bias adds the same amount to every score of a query, which the softmax cancels:
    its gradient is zero in exact arithmetic, and Adam divides the rounding noise left in its place by that noise's
    own size, so these few entries take full-size steps in directions set by rounding, while what the model computes
    does not depend on them at all."""
    if name.endswith("qkv_proj.bias"):
        return torch.cat([w[:d_model], w[2 * d_model :]])
    return w[d_model:] if name.endswith("kv_proj.bias") else w


@pytest.mark.slow
def test_a_legacy_run_resumes_to_the_same_weights(legacy: Path) -> None:
    """Resumed by today's code from step 60 to 70: what the code at f06e6aa gave, within the rounding of this CPU's
    kernels. The record (resumed-step70.safetensors, with f06e6aa's sha256s in expected.json) was made on an AVX2 CPU,
    where today's code still gives it bit for bit; AVX-512, AMX or other kernels round fp32 matrix products
    differently. Each weight's change over the 10 steps is compared: with the kernels forced down to SSE4 it is within
    2.3e-5 of the record's (relative); an update-rate schedule one step off puts it up to 0.31 off, Adam's second
    moments restored 2% off up to 0.16."""
    expected = json.loads((legacy / "expected.json").read_text(encoding="utf-8"))
    record = load_file(str(legacy / "resumed-step70.safetensors"))
    assert _sha256s(record) == expected["resumed_weights_sha256"], "the record is not what f06e6aa wrote"
    run = RunDir(legacy / "run")
    before, step60 = run.metrics.read_text(), load_file(str(run.last / "model.safetensors"))
    threads = torch.get_num_threads()
    try:
        assert main(["train", "--data", str(legacy / "data"), "--out", str(legacy / "run"), "--max-steps", "70"]) == 0
    finally:
        torch.set_num_threads(threads)
    assert json.loads((run.last / "checkpoint.json").read_text())["step"] == expected["resumed_step"] == 70
    got = load_file(str(run.last / "model.safetensors"))
    assert got.keys() == record.keys()
    d_model = run.config().model.d_model
    for name in sorted(record):
        ours, theirs = (_without_key_bias(name, w[name] - step60[name], d_model) for w in (got, record))
        off = float((ours - theirs).norm() / theirs.norm())
        assert off < 1e-3, f"{name} changed from step 60 to 70 by {off:.2g} (relative) otherwise than at f06e6aa"
    assert run.metrics.read_text().startswith(before)               # the old records are kept


# --- the run directory's owner -------------------------------------------------------------------------------------


def _fake_checkpoint(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"")
    (path / "checkpoint.json").write_text("{}")


def test_step_checkpoints_are_ordered_by_number_and_pruned(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    for step in (9, 100, 10):
        _fake_checkpoint(run.step_dir(step))
    (run.checkpoints / "step_x").mkdir()                       # not a step checkpoint: ignored, not a crash
    _fake_checkpoint(run.checkpoints / "step_11.old")
    assert [run.step_of(p) for p in run.step_checkpoints()] == [9, 10, 100]
    run.prune_steps(0)                                         # 0 keeps them all
    assert len(run.step_checkpoints()) == 3
    run.prune_steps(2)
    assert [p.name for p in run.step_checkpoints()] == ["step_10", "step_100"]


def test_locate_prefers_averaged_then_best_then_last_then_the_newest_step(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="no such run"):
        RunDir.locate(run.path)
    run.path.mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        RunDir.locate(run.path)
    run.config_file.write_text("{}")
    with pytest.raises(FileNotFoundError, match="no checkpoint yet"):
        RunDir.locate(run.path)
    for ckpt in (run.step_dir(5), run.step_dir(40), run.last, run.best, run.averaged):
        _fake_checkpoint(ckpt)
        assert RunDir.locate(run.path)[1] == ckpt
    assert RunDir.locate(run.step_dir(5))[1] == run.step_dir(5)
    assert RunDir.locate(run.step_dir(5))[0].path == run.path


def test_a_broken_config_json_is_named(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.config_file.write_text('{"model": {"d_model": 512,')
    with pytest.raises(ValueError, match=r"config\.json: not valid JSON"):
        run.saved_config()
    run.config_file.write_text('{"model": {"d_modle": 512}}')
    with pytest.raises(ValueError, match=r"config\.json: unknown ModelConfig key\(s\) d_modle"):
        run.saved_config()


# --- precision: one validated concept --------------------------------------------------------------------------------


def test_unknown_precisions_are_refused_everywhere(legacy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cpu = torch.device("cpu")
    for bad in ("fp8", "float32", "", "INT8"):
        with pytest.raises(ValueError, match="expected one of auto, fp32, bf16, fp16, int8"):
            precision.resolve(bad, cpu)
        with pytest.raises(ValueError, match="DecodeConfig.precision"):
            DecodeConfig(precision=bad)  # type: ignore[arg-type]
    for bad in ("fp8", "int8", "auto"):          # autocast takes a resolved training precision only
        with pytest.raises(ValueError, match="autocast precision"):
            precision.autocast(cpu, bad)
    with pytest.raises(ValueError, match="int8 is for translation"):
        TrainConfig(precision="int8")
    from aiayn.training.recipes import resolve

    assert resolve(sets=["decode.precision=int8"]).decode.precision == "int8"   # a run's default for translate
    with pytest.raises(ValueError, match="DecodeConfig.precision='fp8'"):
        Translator.load(legacy / "run", "torch", precision="fp8")
    with pytest.raises(SystemExit):
        main(["translate", "--model", str(legacy / "run"), "--precision", "fp8"])
    assert "invalid choice: 'fp8'" in capsys.readouterr().err
    assert main(["train", "--data", "d", "--out", str(legacy / "x"), "--set", "train.precision=int8"]) == 2
    assert "int8 is for translation" in capsys.readouterr().err


def test_a_translators_device_and_precision_are_fixed_when_it_is_made(legacy: Path) -> None:
    t = Translator.load(legacy / "run", "torch", device="cpu", precision="int8")
    assert t.engine.decode.precision == t.engine.precision == "int8"
    assert any(isinstance(m, Int8Linear) for m in t.engine.model.modules())
    with pytest.raises(ValueError, match="precision is set when it is made"):
        t.translate(["Hallo"], precision="fp32")
    with pytest.raises(ValueError, match="unknown DecodeConfig key"):
        t.translate(["Hallo"], beams=2)


def test_int8_quantizes_any_module() -> None:
    """Every nn.Linear computes in int8, and its outputs are fp32's up to rounding: the least-squares scale between
    them within 0.5% of 1 (measured: 0.05%), the error 3% of the output (measured: 2.2%, the 8-bit weights' and
    7-bit inputs' rounding). A weight scale 2% off fails the first."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    q = int8(net)
    assert sum(isinstance(m, Int8Linear) for m in q.modules()) == 2
    assert all(isinstance(m, torch.nn.Linear) for m in (net[0], net[2]))     # the original is left alone
    x = torch.randn(512, 64)
    with torch.no_grad():
        want, got = net(x), q(x)
    scale = float((got * want).sum() / (want * want).sum())
    assert abs(scale - 1) < 0.005, f"int8 outputs are {scale:.4f} x fp32's"
    assert float((got - want).norm() / want.norm()) < 0.03


# --- process-wide settings, library evaluate ---------------------------------------------------------------------------


def test_constructors_do_not_change_process_settings(legacy: Path, tmp_path: Path) -> None:
    from aiayn.training.recipes import resolve
    from aiayn.training.train import Trainer

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        Translator.load(legacy / "run", "torch", device="cpu")
        Trainer(legacy / "data", tmp_path / "run", resolve("tiny", sets=["threads=2", "train.device=cpu"]))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_evaluate_translates_scores_and_keeps_the_hypotheses(legacy: Path) -> None:
    t = Translator.load(legacy / "run", "torch", device="cpu")
    src = (legacy / "data" / "test.de").read_text(encoding="utf-8").splitlines()
    ref = (legacy / "data" / "test.en").read_text(encoding="utf-8").splitlines()
    r = evaluate(t, src, ref, legacy / "h" / "test.hyp", beam=1)
    hyps = (legacy / "h" / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert r["sentences"] == 20 and "tok:13a" in r["signature"]
    assert r["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [ref]).score, abs=0.005)   # this tiny model: 0
    half = hyps[:10] + ref[10:]                  # references half equal to the hypotheses: a score inside (0, 100)
    r = evaluate(t, src, half, legacy / "h" / "half.hyp", tokenize="char", beam=1)
    expected = sacrebleu.corpus_bleu(hyps, [half], tokenize="char").score
    assert 0 < r["bleu"] < 100 and r["bleu"] == pytest.approx(expected, abs=0.005) and "tok:char" in r["signature"]
    assert (legacy / "h" / "test.hyp").read_text(encoding="utf-8").splitlines() == t.translate(src, beam=1)
    with pytest.raises(ValueError, match="20 source lines but 19 reference lines"):
        evaluate(t, src, ref[:-1])
