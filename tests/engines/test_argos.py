"""Argos Translate packages (interop/argos.py): ``aiayn export --format argos`` installed and run by the real
argostranslate (as LibreTranslate runs it), translating as aiayn does; the package served by ``aiayn serve``, the
same again; a package aiayn did not write; archives that would write outside their folder, refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from aiayn.cli.main import main
from tests.helpers import Server, cli_error, copy_lines

pytest.importorskip("ctranslate2")

# argostranslate in a process of its own (it reads its settings from the environment when imported), its packages in
# a folder of the test's. Offline, its sentence splitter (MiniSBD, whose model it downloads on first use) is replaced by
# one sentence per line, which each copy line is.
ARGOS = """
import json, sys
import argostranslate.package as package, argostranslate.sbd as sbd, argostranslate.translate as translate
sbd.MiniSBDSentencizer.split_sentences = lambda self, text: [text]
package.install_from_path(sys.argv[1])
names = sorted(p.package_path.name for p in package.get_installed_packages())
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()
codes = sys.argv[3:5] or ["in", "out"]
print(json.dumps({"installed": names, "out": [translate.translate(line, *codes) for line in lines]}))
"""
LINES = 120
# aiayn's side of the comparison: the decoding Argos asks of CTranslate2 (beam 4, length penalty 0.2, and its default
# min_decoding_length 1: aiayn's min_len 0 lets an empty hypothesis finish first, which ends the search sooner), each line
# one sentence
SAME = ["--beam", "4", "--lenpen", "0.2", "--min-len", "1", "--no-sentences", "--no-repair", "--no-runon"]


def argos_translate(package: Path, lines: list[str], home: Path, compute: str = "float32",
                    codes: tuple[str, str] = ("in", "out")) -> dict[str, object]:
    pytest.importorskip("argostranslate")
    (home / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**os.environ, "HOME": str(home), "ARGOS_PACKAGES_DIR": str(home / "packages"), "ARGOS_DEVICE_TYPE": "cpu",
           "ARGOS_COMPUTE_TYPE": compute, "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache")}
    (home / "packages").mkdir(exist_ok=True)
    out = subprocess.run([sys.executable, "-c", ARGOS, str(package), str(home / "in.txt"), *codes], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.splitlines()[-1]))


def aiayn_translate(model: Path, lines: list[str], tmp: Path, *flags: str) -> list[str]:
    (tmp / "src.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(model), "--input", str(tmp / "src.txt"), "--output",
                 str(tmp / "out.txt"), *SAME, *flags]) == 0
    return (tmp / "out.txt").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def package(copy_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("argos")
    assert main(["export", "--model", str(copy_model), "--format", "argos", "--out", str(out)]) == 0
    (found,) = out.glob("*.argosmodel")
    assert found.name == "translate-in_out-1_0.argosmodel"
    return found


def test_argostranslate_installs_the_export_and_translates_as_aiayn_does(package: Path, copy_model: Path,
                                                                         tmp_path: Path) -> None:
    lines = copy_lines(LINES, seed=11)
    got = argos_translate(package, lines, tmp_path)
    assert got["installed"] == ["translate-in_out-1_0"]
    ours = aiayn_translate(copy_model, lines, tmp_path, "--engine", "torch", "--length-norm", "length")
    theirs = [str(t) for t in got["out"]]                           # type: ignore[attr-defined]
    same = sum(a.strip() == b.strip() for a, b in zip(ours, theirs, strict=True))
    assert same >= 0.99 * LINES, [(a, b) for a, b in zip(ours, theirs, strict=True) if a.strip() != b.strip()][:5]
    assert len(set(ours)) >= 0.9 * LINES                  # (outputs differ from line to line: a real comparison)
    # Argos's default compute type (auto: int8 on a CPU) against aiayn's int8
    (tmp_path / "auto").mkdir()
    theirs8 = [str(t) for t in argos_translate(package, lines, tmp_path / "auto", compute="auto")["out"]]  # type: ignore[attr-defined]
    ours8 = aiayn_translate(package, lines, tmp_path, "--precision", "int8")
    assert sum(a.strip() == b.strip() for a, b in zip(ours8, theirs8, strict=True)) >= 0.99 * LINES


def test_the_package_holds_positions_for_what_argos_decodes(package: Path, tmp_path: Path) -> None:
    """Argos lets CTranslate2 decode up to 256 tokens: the package's sinusoids go past the copy model's 128 positions
    (a shorter table is an error inside argostranslate on a long output)."""
    import ctranslate2

    with zipfile.ZipFile(package) as z:
        z.extractall(tmp_path)
    model = tmp_path / "translate-in_out-1_0" / "model"
    out = ctranslate2.Translator(str(model)).translate_batch([["▁a", "▁b"]], min_decoding_length=300,
                                                             max_decoding_length=300)
    assert len(out[0].hypotheses[0]) == 300


def test_aiayn_serves_an_argos_package_with_the_same_outputs(package: Path, copy_model: Path, tmp_path: Path) -> None:
    lines = copy_lines(40, seed=5)
    ours = aiayn_translate(copy_model, lines, tmp_path, "--engine", "torch", "--length-norm", "length")
    s = Server("--no-processes", "--beam", "4", "--lenpen", "0.2", "--min-len", "1", model=package,
               env={"AIAYN_CACHE": str(tmp_path / "cache")})
    try:
        got, _, answer = s.post("/translate", {"q": lines, "source": "in", "target": "out", "sentences": False,
                                               "repair": False, "runon": False})
        assert got == 200, answer
        assert answer["translatedText"] == ours
        _, _, info = s.request("GET", "/info")
        assert info["models"][0]["engine"] == "ctranslate2" and info["models"][0]["argos"].endswith("translate-in_out-1_0")
    finally:
        assert s.stop() == 0
    # the archive was unpacked once, into the cache, by its content's hash
    assert len(list((tmp_path / "cache" / "argos").glob("*/translate-in_out-1_0/metadata.json"))) == 1


def test_a_package_aiayn_did_not_write_is_decoded_as_argos_decodes(package: Path, copy_model: Path,
                                                                   tmp_path: Path) -> None:
    """A package without aiayn's export record (as Argos's own packages are): its model, its sentencepiece.model and
    metadata alone, decoded with Argos's settings (length penalty 0.2, up to 256 tokens)."""
    with zipfile.ZipFile(package) as z:
        z.extractall(tmp_path / "installed")
    folder = tmp_path / "installed" / "translate-in_out-1_0"
    for name in ("aiayn-export.json", "spm.model", "calibration.json"):
        (folder / "model" / name).unlink(missing_ok=True)
    lines = copy_lines(40, seed=3)
    ours = aiayn_translate(copy_model, lines, tmp_path, "--engine", "torch", "--length-norm", "length")
    assert aiayn_translate(tmp_path / "installed", lines, tmp_path) == ours   # (a folder of installed packages)


def test_archives_that_are_not_packages_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evil = tmp_path / "evil.argosmodel"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("pkg/metadata.json", "{}")
        z.writestr("../escaped.txt", "x")
    assert main(["translate", "--model", str(evil)]) == 2
    assert "entries must all lie in one folder" in cli_error(capsys.readouterr().err, "translate")
    assert not (tmp_path.parent / "escaped.txt").exists()
    (tmp_path / "junk.argosmodel").write_bytes(b"not a zip")
    assert main(["translate", "--model", str(tmp_path / "junk.argosmodel")]) == 2
    assert "not a zip archive" in cli_error(capsys.readouterr().err, "translate")
    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "legacy-f06e6aa" / "run", tmp_path / "marian")
    assert main(["export", "--model", str(tmp_path / "marian"), "--format", "argos", "--out", str(tmp_path / "o"),
                 "--check", "x"]) == 2
    assert "--check compares" in cli_error(capsys.readouterr().err, "export")
