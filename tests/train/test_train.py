"""Training (paper §5): the copy task, exact resume, accumulation, checkpoints, errors, metrics."""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from aiayn import Translator, checkpoint
from aiayn.cli.main import main
from aiayn.data.batches import collate
from aiayn.data.datadir import DataDir
from aiayn.optim import noam_lr
from aiayn.training.recipes import resolve
from aiayn.training.train import Trainer, TrainStep

from ..fixtures import trained
from ..helpers import cli_error, spawn, train_steps

ROOT = Path(__file__).parents[2]
COPY_CFG = ROOT / "aiayn" / "configs" / "copy.yaml"
FAST = ["max_steps=12", "save_every_steps=6", "valid_every_steps=6", "log_every_steps=3", "valid_max_sentences=20",
        "d_model=32", "d_ff=64", "n_layers=1", "max_tokens=512", "p_drop=0.1", "warmup=4", "tensorboard=false"]


def _weights(run: Path, name: str = "last") -> dict[str, torch.Tensor]:
    return load_file(str(run / name / "model.safetensors"))


def _cli_train(data: DataDir, run: Path, *sets: str) -> int:
    return main(["train", "--data", str(data.path), "--out", str(run), "--config", str(COPY_CFG), "--set", *FAST, *sets])


@pytest.mark.slow
@pytest.mark.parametrize("fresh", [False, pytest.param(True, marks=pytest.mark.ci)], ids=["kept", "trained-now"])
def test_copy_task_reaches_99_percent_exact_match(copy_dir: DataDir, fresh: bool, request: pytest.FixtureRequest) -> None:
    """aiayn/configs/copy.yaml: a tiny model learns to copy held-out random strings (>= 99% exact, greedy); the
    model is conftest's ``copy_model`` (kept in tests/fixtures/trained/, which the server's tests use too) and, under
    CI, the recipe trained again now."""
    copy_model = request.getfixturevalue("fresh_copy_model" if fresh else "copy_model")
    src = copy_dir.raw("test", "src").read_text().splitlines()
    out = Translator.load(copy_model, "torch").translate(src, beam=1)
    exact = np.mean([a == b for a, b in zip(src, out, strict=True)])
    seconds = float((copy_model / "seconds").read_text())
    print(f"copy task: {exact:.2%} exact match on {len(src)} held-out strings, trained in {seconds:.0f} s")
    assert exact >= 0.99


def test_the_kept_models_are_made_from_the_recipes_and_data_as_they_are(copy_model: Path, three_ways: Path,
                                                                         three_ways_source: Path) -> None:
    """tests/fixtures/trained/ keeps the models the tests translate with; one whose recipe or data has changed since is
    stale (conftest then trains it each session): ``make test-models`` keeps them again."""
    for name, run in (("copy", copy_model), ("three-target", three_ways), ("three-source", three_ways_source)):
        data = Path(json.loads((run / "data.json").read_text())["data_dir"])
        assert trained.made(name).get("fingerprint") == trained.fingerprint(name, data), \
            f"tests/fixtures/trained/{name} is not what its recipe makes of its data now: run `make test-models`"


def test_resume_after_crash_gives_identical_weights(copy_dir: DataDir, tmp_path: Path, monkeypatch,  # type: ignore[no-untyped-def]
                                                    caplog) -> None:
    """2N steps straight == N steps, a crash (no graceful save), and a resume to 2N — bit for bit, from step 6 (a
    run that silently started again from step 0 would end with the same weights: the step is checked too)."""
    assert _cli_train(copy_dir, tmp_path / "straight") == 0
    original = TrainStep.__call__
    calls = {"n": 0}

    def crash_after_9(self, batches, lr):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] > 9:                     # past the checkpoint at step 6: the on-disk state of a kill -9
            raise SystemExit("simulated crash")
        return original(self, batches, lr)

    monkeypatch.setattr(TrainStep, "__call__", crash_after_9)
    with pytest.raises(SystemExit):
        _cli_train(copy_dir, tmp_path / "resumed")
    assert json.loads((tmp_path / "resumed" / "last" / "checkpoint.json").read_text())["step"] == 6
    monkeypatch.setattr(TrainStep, "__call__", original)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="aiayn")
    assert _cli_train(copy_dir, tmp_path / "resumed") == 0
    assert any(re.search(r"resuming .* from step 6 ", r.message) for r in caplog.records)
    assert train_steps(tmp_path / "resumed") == [3, 6, 9, 9, 12]      # 9 logged before the crash, again after
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "resumed")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _process(data: DataDir, run: Path, sets: list[str], wait_for: str,
             stderr: int = subprocess.DEVNULL) -> tuple[list[str], subprocess.Popen]:
    """``aiayn train`` on ``data`` in a process of its own, started, once ``run / wait_for`` exists (or 2 min)."""
    cmd = [sys.executable, "-m", "aiayn", "train", "--data", str(data.path), "--out", str(run), "--config",
           str(COPY_CFG), "--set", *FAST, *sets]
    proc = spawn(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.time() + 120
    while not (run / wait_for).exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    return cmd, proc


@pytest.mark.ci      # CI's (make test-ci): a training process killed and resumed, 10 s (make test: SIGINT's)
def test_kill_9_and_resume_in_a_real_process(copy_dir: DataDir, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd, proc = _process(copy_dir, run, ["max_steps=40", "save_every_steps=5", "valid_every_steps=100"],
                         "last/checkpoint.json")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    resumed = re.search(r"resuming .* from step (\d+) ", again.stderr)
    assert resumed and int(resumed.group(1)) >= 5, again.stderr[-2000:]
    assert train_steps(run).count(3) == 1                              # not started again from step 0
    straight = tmp_path / "straight"
    assert subprocess.run([*cmd[:7], str(straight), *cmd[8:]], capture_output=True).returncode == 0
    a, b = _weights(run), _weights(straight)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sigint_saves_a_resumable_checkpoint(copy_dir: DataDir, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _, proc = _process(copy_dir, run, ["max_steps=100000", "save_every_steps=100000", "valid_every_steps=100000"],
                       "metrics.jsonl", stderr=subprocess.PIPE)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()[-2000:]
    step = json.loads((run / "last" / "checkpoint.json").read_text())["step"]
    assert step >= 3 and b"stopped by SIGINT" in err


def test_gradient_accumulation_equals_one_big_batch(copy_dir: DataDir, tmp_path: Path) -> None:
    cfg = resolve(yaml_path=COPY_CFG, sets=[*FAST, "p_drop=0.0", "max_tokens=4096"])
    src, tgt = copy_dir.split("train")
    idx = np.arange(40)

    def grads(batches_of_idx: list[np.ndarray]) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        trainer = Trainer(copy_dir.path, tmp_path / "g", cfg)
        trainer.train_step([collate(src, tgt, i) for i in batches_of_idx], lr=1e-3)
        return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    accumulated = grads([idx[:13], idx[13:29], idx[29:]])
    single = grads([idx])
    for k in single:
        torch.testing.assert_close(accumulated[k], single[k], atol=1e-6, rtol=1e-4)


def test_nan_loss_stops_with_a_message_and_keeps_the_checkpoint(copy_dir: DataDir, tmp_path: Path,
                                                                monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from aiayn import loss as loss_mod

    real = loss_mod.SequenceLoss.forward
    calls = {"n": 0}

    def poisoned(self, *a):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        out, nll = real(self, *a)
        return (out * float("nan"), nll) if calls["n"] > 8 and self.training else (out, nll)

    monkeypatch.setattr(loss_mod.SequenceLoss, "forward", poisoned)
    run = tmp_path / "run"
    assert _cli_train(copy_dir, run, "valid_every_steps=100") == 1
    assert "the loss became nan" in capsys.readouterr().err
    assert json.loads((run / "last" / "checkpoint.json").read_text())["step"] == 6
    assert all(torch.isfinite(v).all() for v in _weights(run).values())


def test_out_of_memory_suggests_smaller_batches(copy_dir: DataDir, tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from aiayn import loss as loss_mod

    def oom(self, *a):  # type: ignore[no-untyped-def]
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(loss_mod.SequenceLoss, "forward", oom)
    assert _cli_train(copy_dir, tmp_path / "run") == 1
    err = cli_error(capsys.readouterr().err, "train")
    assert "out of memory" in err and "max_tokens=256" in err


def test_unknown_key_and_wrong_type_are_clear_errors(copy_dir: DataDir, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert _cli_train(copy_dir, tmp_path / "r", "max_tokenz=5") == 2
    assert "unknown config key 'max_tokenz'" in capsys.readouterr().err
    assert _cli_train(copy_dir, tmp_path / "r", "warmup=soon") == 2
    assert "TrainConfig.warmup='soon'" in capsys.readouterr().err


def test_resume_with_another_vocabulary_or_model_is_refused(copy_dir: DataDir, multi30k_dir: DataDir,
                                                            tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    assert _cli_train(copy_dir, run, "max_steps=2") == 0
    capsys.readouterr()
    assert _cli_train(multi30k_dir, run, "max_steps=4") == 2
    assert "different vocabulary" in capsys.readouterr().err
    assert _cli_train(copy_dir, run, "max_steps=4", "d_model=48") == 2
    err = cli_error(capsys.readouterr().err, "train")
    assert "model config differs" in err and "d_model: 32 in the run, 48 now" in err


def test_metrics_checkpoints_and_averaging(copy_dir: DataDir, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert _cli_train(copy_dir, run, "average_last=2", "keep_last=2") == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "loss" in r]
    valid = [r for r in records if "valid_loss" in r]
    for key in ("step", "epoch", "loss", "nll", "lr", "grad_norm", "tgt_tokens_per_s", "peak_rss_mb"):
        assert all(key in r for r in train), key
    for key in ("step", "valid_loss", "valid_ppl", "valid_bleu"):
        assert all(key in r for r in valid), key
    assert [r["step"] for r in train] == [3, 6, 9, 12]
    steps = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert steps == ["step_12", "step_6"]                              # keep_last=2
    assert checkpoint.is_checkpoint(run / "best") and checkpoint.is_checkpoint(run / "averaged")
    w6, w12 = (_weights(run / "checkpoints", s) for s in ("step_6", "step_12"))
    avg = _weights(run, "averaged")
    for k in avg:
        torch.testing.assert_close(avg[k], (w6[k] + w12[k]) / 2)
    assert main(["average", "--model", str(run), "--last", "2", "--out", str(tmp_path / "avg2")]) == 0
    again = load_file(str(tmp_path / "avg2" / "model.safetensors"))
    assert all(torch.equal(again[k], avg[k]) for k in avg)
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["model"]["d_model"] == 32 and cfg["train"]["max_steps"] == 12


def test_cooldown_brings_the_logged_rate_down_to_zero_at_max_steps(copy_dir: DataDir, tmp_path: Path) -> None:
    """cooldown=0.5 over max_steps=12: the §5.3 rate until step 6, then x (12 - (step - 1)) / 6 at each update."""
    run = tmp_path / "run"
    assert _cli_train(copy_dir, run, "cooldown=0.5", "log_every_steps=1", "valid_every_steps=100",
                      "save_every_steps=100") == 0
    lrs = {r["step"]: r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "lr" in r}
    k = json.loads((run / "config.json").read_text())["train"]["lr_factor"]
    for step in range(1, 13):
        factor = min(1.0, (12 - (step - 1)) / 6)            # progress is read before the update
        assert lrs[step] == pytest.approx(noam_lr(step, 32, 4, k) * factor), step
    assert lrs[12] < lrs[11] < lrs[8] and lrs[12] == pytest.approx(noam_lr(12, 32, 4, k) / 6)
    with pytest.raises(ValueError, match="cooldown needs the run's length"):
        resolve(None, COPY_CFG, ["max_steps=0", "cooldown=0.2"])
    assert resolve(None, COPY_CFG, ["max_steps=0", "max_epochs=3", "cooldown=0.2"]).train.cooldown == 0.2


@pytest.mark.ci      # CI's (make test-ci): a run to its epoch limit, 3 s (make test: the schedule's own tests)
def test_cooldown_follows_an_epoch_limit(copy_dir: DataDir, tmp_path: Path) -> None:
    """max_epochs=1, cooldown=1: the factor at update s of an n-batch epoch is 1 - (s - 1) / n."""
    run = tmp_path / "run"
    assert _cli_train(copy_dir, run, "max_steps=0", "max_epochs=1", "cooldown=1.0", "log_every_steps=1", "max_tokens=4096",
                      "valid_every_steps=1000", "save_every_steps=1000", "valid_each_epoch=false") == 0
    lrs = {r["step"]: r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "lr" in r}
    k = json.loads((run / "config.json").read_text())["train"]["lr_factor"]
    n = max(lrs)
    assert n > 2
    for step in (1, n // 2, n):
        assert lrs[step] == pytest.approx(noam_lr(step, 32, 4, k) * (1 - (step - 1) / n)), step


def test_early_stopping_with_patience(copy_dir: DataDir, tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    assert _cli_train(copy_dir, run, "lr_factor=0", "max_steps=100", "valid_every_steps=2", "patience=2",
                      "early_stop_metric=valid_loss", "p_drop=0") == 0
    assert json.loads((run / "last" / "checkpoint.json").read_text())["step"] == 6


def test_tensorboard_gets_the_scalars_and_attention_images_at_each_validation(copy_dir: DataDir,
                                                                                tmp_path: Path) -> None:
    """Seed 002's system: at each validation, the attention of a fixed validation sentence per kind and layer."""
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'aiayn[tensorboard]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    assert _cli_train(copy_dir, run, "tensorboard=true", "n_layers=2") == 0
    acc = EventAccumulator(str(run / "tb"), size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    assert {"loss", "valid_loss", "valid_bleu"} <= set(acc.Tags()["scalars"])
    kinds = ("encoder_self", "decoder_self", "cross")
    assert set(acc.Tags()["images"]) == {f"attention/{k}/layer_{n}" for k in kinds for n in (1, 2)}
    shots = acc.Images("attention/cross/layer_2")
    assert [s.step for s in shots] == [6, 12]
    assert shots[0].width > shots[0].height > 0            # 4 heads side by side


def test_head_grid_puts_the_heads_side_by_side_enlarged_with_a_separator() -> None:
    from aiayn.training.metrics import head_grid

    probs = torch.rand(2, 3, 4)
    img = head_grid(probs, size=8)                         # z = 8 // 4 = 2
    assert img.shape == (6, 2 * 8 + 1)
    torch.testing.assert_close(img[::2, 0:8:2], probs[0])
    torch.testing.assert_close(img[::2, 9::2], probs[1])
    assert (img[:, 8] == 0.5).all()
