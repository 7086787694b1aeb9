"""Faults survived: damaged files refused with a message naming them (never a traceback, never code run), a
checkpoint write that fails or is cut short leaves the previous checkpoint usable, non-finite updates are
skipped and, in a row, stop the run with the last good checkpoint kept."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aiayn.cli.main import main
from aiayn.data.datadir import DataDir

from ..helpers import cli_error, train_steps

ROOT = Path(__file__).parents[2]
COPY_CFG = ROOT / "aiayn" / "configs" / "copy.yaml"
FAST = ["max_steps=12", "save_every_steps=6", "valid_every_steps=100", "log_every_steps=3", "valid_bleu=false",
        "d_model=32", "d_ff=64", "n_layers=1", "max_tokens=512", "p_drop=0.1", "warmup=4", "tensorboard=false"]


def _train(data: DataDir, run: Path, *sets: str) -> int:
    return main(["train", "--data", str(data.path), "--out", str(run), "--config", str(COPY_CFG), "--set", *FAST,
                 *sets])


@pytest.fixture(scope="module")
def trained(copy_dir: DataDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("runs") / "run"
    assert _train(copy_dir, run) == 0
    return run


def _translate(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    src = tmp_path / "in.txt"
    src.write_text("a b c\n")
    capsys.readouterr()
    rc = main(["translate", "--model", str(run), "--input", str(src), "--output", str(tmp_path / "out.txt")])
    return rc, capsys.readouterr().err


# --- damaged files -----------------------------------------------------------------------------------------------


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "header":                                   # a tampered header: a size that lies
        path.write_bytes((10**12).to_bytes(8, "little") + data[8:])
    elif how == "random":
        path.write_bytes(os.urandom(len(data)))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "not json":
        path.write_text("{\"model\": {\"d_model\": 32,")
    elif how == "json list":
        path.write_text("[1, 2, 3]")
    elif how == "pickle":                                   # what a pickled checkpoint would hold: never loaded
        path.write_bytes(b"\x80\x04\x95" + os.urandom(64))


CASES = [
    ("last/model.safetensors", "truncate"), ("last/model.safetensors", "header"), ("last/model.safetensors", "random"),
    ("last/model.safetensors", "pickle"), ("last/checkpoint.json", "not json"), ("config.json", "not json"),
    ("config.json", "json list"), ("config.json", "empty"), ("spm.model", "random"), ("spm.model", "empty"),
    ("vocab.json", "not json"),
]


@pytest.mark.parametrize(("name", "how"), CASES, ids=[f"{n}-{h}" for n, h in CASES])
def test_a_damaged_file_is_refused_naming_it(trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             name: str, how: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    for ckpt in ("best", "averaged"):                        # translate would prefer these over last/
        shutil.rmtree(run / ckpt, ignore_errors=True)
    _damage(run / name, how)
    rc, err = _translate(run, tmp_path, capsys)
    message = cli_error(err, "translate")
    assert rc == 2 and Path(name).name in message and str(run) in message, err


def test_weights_of_another_shape_are_refused_naming_both_files(trained: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    cfg = json.loads((run / "config.json").read_text())
    cfg["model"]["d_ff"] = 48
    (run / "config.json").write_text(json.dumps(cfg))
    rc, err = _translate(run, tmp_path, capsys)
    message = cli_error(err, "translate")
    assert rc == 2 and "model.safetensors" in message and "config.json" in message and "shape" in message


def test_resuming_from_a_damaged_checkpoint_is_refused(copy_dir: DataDir, trained: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    _damage(run / "last" / "optimizer.safetensors", "truncate")
    capsys.readouterr()
    assert _train(copy_dir, run, "max_steps=20") == 2
    assert "optimizer.safetensors" in cli_error(capsys.readouterr().err, "train")


# --- checkpoint writes --------------------------------------------------------------------------------------------


def test_a_failed_checkpoint_write_stops_clearly_and_keeps_the_previous(copy_dir: DataDir, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import safetensors.torch as writer  # (what checkpoint.save writes the weights with)

    run = tmp_path / "run"
    real = writer.save_model
    calls = {"n": 0}

    def disk_full(model, filename, *a, **k):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] > 2:                                     # step 6's two saves succeed, step 12's fail
            Path(filename).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(model, filename, *a, **k)

    monkeypatch.setattr(writer, "save_model", disk_full)
    capsys.readouterr()
    assert _train(copy_dir, run) == 1
    err = cli_error(capsys.readouterr().err, "train")
    assert "No space left on device" in err and "intact" in err
    assert json.loads((run / "last" / "checkpoint.json").read_text())["step"] == 6
    assert not list(run.glob(".*tmp-*"))                       # no half-written directory left behind
    monkeypatch.setattr(writer, "save_model", real)
    assert _train(copy_dir, run) == 0                         # space freed: the same command resumes
    assert json.loads((run / "last" / "checkpoint.json").read_text())["step"] == 12


@pytest.mark.parametrize("moment", ["while writing", "between the renames"])
def test_a_kill_during_a_checkpoint_write_leaves_a_resumable_run(copy_dir: DataDir, trained: Path, tmp_path: Path,
                                                                 moment: str, caplog: pytest.LogCaptureFixture) -> None:
    """The two states a kill -9 inside atomic_dir can leave on disk, made by hand: the next run resumes from the
    previous checkpoint (step 12, checked: a run started again from step 0 would end with the same weights) and
    ends with the same weights as an uninterrupted run."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    assert json.loads((run / "last" / "checkpoint.json").read_text())["step"] == 12
    if moment == "while writing":
        half = run / ".last.tmp-99999"
        half.mkdir()
        (half / "model.safetensors").write_bytes(b"half")
    else:                                                       # last/ moved aside, the new one not yet in place
        (run / "last").rename(run / ".last.old-99999")
        (run / ".last.tmp-99999").mkdir()
    caplog.clear()
    caplog.set_level(logging.INFO, logger="aiayn")
    assert _train(copy_dir, run, "max_steps=18") == 0
    assert any(re.search(r"resuming .* from step 12 ", r.message) for r in caplog.records)
    assert train_steps(run) == [3, 6, 9, 12, 15, 18]
    assert json.loads((run / "last" / "checkpoint.json").read_text())["step"] == 18
    assert not list(run.glob(".last*"))
    straight = tmp_path / "straight"
    assert _train(copy_dir, straight, "max_steps=18") == 0
    a, b = load_file(str(run / "last" / "model.safetensors")), load_file(str(straight / "last" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- non-finite updates -------------------------------------------------------------------------------------------


def _poison(monkeypatch: pytest.MonkeyPatch, bad: set[int]) -> None:
    from aiayn import loss as loss_mod

    real = loss_mod.SequenceLoss.forward
    calls = {"n": 0}

    def poisoned(self, *a):  # type: ignore[no-untyped-def]
        if not self.training:
            return real(self, *a)
        calls["n"] += 1
        out, nll = real(self, *a)
        return (out * float("nan"), nll) if calls["n"] in bad else (out, nll)

    monkeypatch.setattr(loss_mod.SequenceLoss, "forward", poisoned)


def test_a_nan_update_is_skipped_and_training_goes_on(copy_dir: DataDir, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    _poison(monkeypatch, {4, 9})
    assert _train(copy_dir, tmp_path / "run") == 0
    assert sum("skipped: the loss became nan" in r.message for r in caplog.records) == 2
    w = load_file(str(tmp_path / "run" / "last" / "model.safetensors"))
    assert all(torch.isfinite(v).all() for v in w.values())
    assert json.loads((tmp_path / "run" / "last" / "checkpoint.json").read_text())["step"] == 12


def test_k_nan_updates_in_a_row_stop_the_run_keeping_the_last_good_checkpoint(
        copy_dir: DataDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _poison(monkeypatch, set(range(8, 100)))
    capsys.readouterr()
    assert _train(copy_dir, tmp_path / "run", "max_bad_updates=3") == 1
    err = cli_error(capsys.readouterr().err, "train")
    assert "the loss became nan in 3 updates in a row" in err and "intact" in err
    assert json.loads((tmp_path / "run" / "last" / "checkpoint.json").read_text())["step"] == 6
