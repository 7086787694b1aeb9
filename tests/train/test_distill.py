"""aiayn distill (sequence-level knowledge distillation): a teacher's translations become a data dir a student trains
on, end to end; resumed after a kill without translating a finished shard again; two torchrun processes give what one
gives; the options (original pairs kept, outliers dropped) and the refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aiayn import Translator
from aiayn.cli.main import main
from aiayn.data.datadir import DataDir, DataError
from aiayn.training.distill import DistillOptions, distill

from ..helpers import cli_error, free_port, spawn, wait_for


@pytest.fixture(scope="module")
def small(copy_dir: DataDir, copy_model: Path, tmp_path_factory: pytest.TempPathFactory) -> DataDir:
    """600 training pairs of the copy task (and its validation and test splits) with the copy model's tokenizer."""
    root = tmp_path_factory.mktemp("small")
    text = root / "text"
    text.mkdir()
    src, tgt = copy_dir.split("train")
    vocab = copy_dir.vocab()
    for lang, side in (("in", src), ("out", tgt)):
        (text / f"train.{lang}").write_text("\n".join(vocab.src.decode([side[i].tolist() for i in range(600)])) + "\n")
        for split in ("valid", "test"):
            lines = copy_dir.raw_lines(split, "src" if lang == "in" else "tgt")[:50]
            (text / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    assert main(["prepare", "--train", str(text / "train"), "--valid", str(text / "valid"), "--test", str(text / "test"),
                 "--src", "in", "--tgt", "out", "--vocab-from", str(copy_model), "--out", str(root / "data")]) == 0
    return DataDir(root / "data")


def _pairs(d: DataDir, split: str = "train") -> list[tuple[list[int], list[int]]]:
    src, tgt = d.split(split)
    return [(src[i].tolist(), tgt[i].tolist()) for i in range(len(src))]


def test_a_student_trains_on_the_teachers_translations(small: DataDir, copy_model: Path, tmp_path: Path) -> None:
    out = distill(copy_model, small.path, tmp_path / "distilled", DistillOptions(shard_lines=250))
    d = DataDir(out)
    teacher = Translator.load(copy_model, "torch", precision="fp32")
    sources = small.vocab().src.decode([s for s, _ in _pairs(small)])
    assert d.vocab().describe() == Translator.load(copy_model, "torch").engine.vocab.describe()   # the teacher's tokenizer
    assert d.pairs("train") == 600 and d.manifest["distilled"]["distilled"] == 600
    # the targets are the teacher's outputs (int8 here, on a CPU without fast bf16: checked against its own int8)
    int8 = Translator.load(copy_model, "torch", precision=d.manifest["distilled"]["decode"]["precision"])
    # int8 scales a batch's activations by the batch's range, so it is checked shard by shard, as distill decodes
    shards = [x for i in range(0, len(sources), 250) for x in int8.translate(sources[i : i + 250])]
    assert d.vocab().tgt.decode([t for _, t in _pairs(d)]) == shards
    assert sum(a == b for a, b in zip(int8.translate(sources), teacher.translate(sources), strict=True)) > 590
    for split in ("valid", "test"):                                      # the real references, kept as they were
        assert d.raw_lines(split, "tgt") == small.raw_lines(split, "tgt")
    assert not (tmp_path / "distilled.work").exists()
    student = tmp_path / "student"
    assert main(["train", "--data", str(out), "--out", str(student), "--preset", "tiny", "--set", "max_steps=5",
                 "valid_every_steps=5", "tensorboard=false", "max_tokens=512"]) == 0
    assert len(Translator.load(student, "torch").translate(sources[:3])) == 3


def test_original_pairs_kept_and_outliers_dropped(small: DataDir, copy_model: Path, tmp_path: Path) -> None:
    kept = DataDir(distill(copy_model, small.path, tmp_path / "kept", DistillOptions(keep_original=True),
                           precision="fp32"))
    assert kept.pairs("train") == 1200 and _pairs(kept)[600:] == _pairs(small)        # distilled first, then the rest
    teacher = Translator.load(copy_model, "torch", precision="fp32")
    hyps = [h[0] for h in teacher.engine.translate_hypotheses(small.vocab().src.decode([s for s, _ in _pairs(small)]))]
    lps = sorted(round(h.logprob / (len(h.tokens) + 1), 4) for h in hyps)
    cut = lps[len(lps) // 2]                                             # about half the pairs below the median
    strict = DataDir(distill(copy_model, small.path, tmp_path / "strict", DistillOptions(min_logprob=cut),
                             precision="fp32"))
    note = strict.manifest["distilled"]
    assert note["dropped"] == {"empty": 0, "ratio": 0, "logprob": sum(lp < cut for lp in lps)}
    assert 0 < note["dropped"]["logprob"] < 600 and strict.pairs("train") == note["distilled"] == 600 - note[
        "dropped"]["logprob"]
    with pytest.raises(DataError, match="all 600 distilled pairs were dropped"):
        distill(copy_model, small.path, tmp_path / "none", DistillOptions(min_logprob=-1e-9), precision="fp32")
    with pytest.raises(ValueError, match="max_ratio=0.5"):
        DistillOptions(max_ratio=0.5)
    with pytest.raises(ValueError, match="min_logprob=1.0"):
        DistillOptions(min_logprob=1.0)


def _distill_cmd(copy_model: Path, data: DataDir, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "aiayn", "distill", "--teacher", str(copy_model), "--data", str(data.path), "--out",
            str(out), "--shard-lines", "40", "--precision", "fp32", "--workers", "1", "--beam", "4", *extra]


@pytest.mark.ci      # CI's (make test-ci): a distillation killed and resumed, 4 s
@pytest.mark.slow
def test_a_killed_distillation_resumes_without_translating_a_finished_shard(small: DataDir, copy_model: Path,
                                                                             tmp_path: Path) -> None:
    out, work = tmp_path / "killed", tmp_path / "killed.work"
    proc = spawn(_distill_cmd(copy_model, small, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: len(list(work.glob("shard-*.jsonl"))) >= 3, "3 shards translated", timeout=120)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = {p.name: p.stat().st_mtime_ns for p in work.glob("shard-*.jsonl")}
    assert 3 <= len(done) < 15 and not out.exists()
    again = subprocess.run(_distill_cmd(copy_model, small, out), capture_output=True, text=True, timeout=850)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming {work}: {len(done)} shard(s) already translated" in again.stderr
    assert f"translated {600 - 40 * len(done)} lines in {15 - len(done)} shard(s) (of 15)" in again.stderr
    straight = distill(copy_model, small.path, tmp_path / "straight", DistillOptions(shard_lines=40), precision="fp32",
                       workers=1, beam=4)
    assert _pairs(DataDir(out)) == _pairs(DataDir(straight))


@pytest.mark.ci      # CI's (make test-ci): two distilling processes, 5 s
@pytest.mark.slow
def test_two_processes_distill_what_one_does(small: DataDir, copy_model: Path, tmp_path: Path) -> None:
    """Under torchrun each process translates its own shards (i mod 2), and rank 0 assembles them."""
    two = tmp_path / "two"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           *_distill_cmd(copy_model, small, two)[1:]]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=850, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.count("translated 320 lines in 8 shard(s) (of 15)") + \
        run.stderr.count("translated 280 lines in 7 shard(s) (of 15)") == 2                   # shards 0, 2, .. and 1, 3, ..
    one = distill(copy_model, small.path, tmp_path / "one", DistillOptions(shard_lines=40), precision="fp32",
                  workers=1, beam=4)
    assert _pairs(DataDir(two)) == _pairs(DataDir(one))
    for lang in ("in", "out"):
        assert np.array_equal(np.fromfile(two / f"train.{lang}.bin", np.uint16),
                              np.fromfile(one / f"train.{lang}.bin", np.uint16))


def test_a_work_dir_of_other_settings_is_refused(small: DataDir, copy_model: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "out.work"
    work.mkdir()
    (work / "settings.json").write_text(json.dumps({"teacher": "another"}))
    capsys.readouterr()
    assert main(["distill", "--teacher", str(copy_model), "--data", str(small.path), "--out", str(tmp_path / "out")]) == 2
    assert "holds the shards of a distillation with other settings" in cli_error(capsys.readouterr().err, "distill")
    assert main(["distill", "--teacher", str(copy_model), "--data", str(small.path), "--out", str(tmp_path / "out"),
                 "--force", "--precision", "fp32"]) == 0
    assert DataDir(tmp_path / "out").pairs("train") == 600
