"""Data parallelism under torchrun (gloo on CPU), proven: 2 processes = 1 process accumulating 2 batches, a killed
job resumes to the same weights, a different process count is refused, a crashed process ends the job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aiayn.data.batches import TokenBatchSampler
from aiayn.data.datadir import DataDir

from ..helpers import cli_error, free_port, spawn, wait_for

ROOT = Path(__file__).parents[2]
COPY_CFG = ROOT / "aiayn" / "configs" / "copy.yaml"
BASE = ["d_model=32", "d_ff=64", "n_layers=1", "warmup=4", "tensorboard=false", "threads=1", "valid_bleu=false",
        "valid_each_epoch=false", "train.precision=fp32", "average_last=0"]

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")


def _even_max_tokens(copy_dir: DataDir) -> int:
    """A batch size whose epoch has an even number of batches, so that 2 ranks take exactly the batches that one
    process takes in pairs (with an odd count the sampler splits a batch to give both ranks as many)."""
    src, tgt = copy_dir.split("train")
    for m in range(512, 1024, 8):
        if len(TokenBatchSampler(src.lengths + 1, tgt.lengths + 1, m, seed=1)) % 2 == 0:
            return m
    raise AssertionError("no batch size with an even batch count")


def _cmd(copy_dir: DataDir, run: Path, procs: int, *sets: str) -> list[str]:
    train = ["-m", "aiayn", "train", "--data", str(copy_dir.path), "--out", str(run), "--config", str(COPY_CFG),
             "--set", *BASE, *sets]
    if procs == 1:
        return [sys.executable, *train]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs), "--master_addr",
            "127.0.0.1", "--master_port", str(free_port()), *train]


def _run(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _why(res: subprocess.CompletedProcess[str]) -> str:
    """What a failed job said: the ranks' own error lines (torchrun's summary, which ends stderr, names only the
    signal), then the end of stderr."""
    said = [x for x in res.stderr.splitlines()
            if any(k in x for k in ("Error", "error:", "terminate", "Traceback", "Exception", "abort", "what()"))]
    return "\n".join(said[:40]) + "\n...\n" + res.stderr[-2000:]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "last" / "model.safetensors"))


def _records(run: Path, key: str) -> list[float]:
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r[key] for r in records if key in r]


@pytest.mark.slow
@pytest.mark.ci      # CI's (make test-ci): two training processes each, 8 s
def test_two_processes_equal_one_process_accumulating_two_batches(copy_dir: DataDir, tmp_path: Path) -> None:
    """torchrun --nproc_per_node 2 on CPU (gloo): both ranks train on disjoint batches, rank 0 writes the run dir, and
    the weights are one process's accumulating both batches. With a time limit and a cooldown too: the ranks share
    one clock (rank 0's), or they would disagree on the rate and on when to stop."""
    m = _even_max_tokens(copy_dir)
    sets = [f"max_tokens={m}", "p_drop=0.0", "max_steps=10", "log_every_steps=2", "valid_every_steps=5",
            "save_every_steps=5", "max_minutes=30", "cooldown=0.5"]
    one = _run(_cmd(copy_dir, tmp_path / "one", 1, *sets, "update_freq=2"))
    assert one.returncode == 0, _why(one)
    two = _run(_cmd(copy_dir, tmp_path / "two", 2, *sets))
    assert two.returncode == 0, _why(two)
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    print(f"2 processes vs 1 with update_freq=2, 10 updates: largest weight difference {worst:g}")
    assert worst <= 1e-6                                  # the tolerance; observed: 0 (bit-identical)
    for key in ("loss", "valid_loss"):                    # the same curves (the logged loss is over both processes)
        x, y = _records(tmp_path / "one", key), _records(tmp_path / "two", key)
        assert len(x) == len(y) > 0 and all(abs(p - q) <= 1e-6 * max(1.0, abs(p)) for p, q in zip(x, y, strict=True))
    # only rank 0 wrote the run directory: one record per step, no stray files of rank 1
    records = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "loss" in r]
    assert steps == [2, 4, 6, 8, 10]
    trainer = json.loads((tmp_path / "two" / "last" / "trainer.json").read_text())
    assert trainer["world"] == 2
    rng = load_file(str(tmp_path / "two" / "last" / "rng.safetensors"))
    assert {"cpu.rank0", "cpu.rank1"} <= set(rng) and not torch.equal(rng["cpu.rank0"], rng["cpu.rank1"])


KILLED = ["max_tokens=512", "p_drop=0.1", "max_steps=24", "save_every_steps=4", "valid_every_steps=1000",
          "log_every_steps=4"]


@pytest.fixture(scope="module")
def straight(copy_dir: DataDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-process run of 24 steps, uninterrupted (dropout on)."""
    run = tmp_path_factory.mktemp("straight") / "run"
    done = _run(_cmd(copy_dir, run, 2, *KILLED))
    assert done.returncode == 0, _why(done)
    return run


@pytest.mark.slow
@pytest.mark.ci      # CI's (make test-ci): two training processes each, 8 s
def test_a_killed_two_process_job_resumes_to_the_same_weights(copy_dir: DataDir, straight: Path,
                                                               tmp_path: Path) -> None:
    """kill -9 of the whole job (torchrun and both workers) mid-run; the same command again resumes from the last
    checkpoint, each process with its own generator state, and ends identical to an uninterrupted run (dropout
    on, so each process's dropout masks must continue where they were)."""
    sets = KILLED
    run = tmp_path / "killed"
    cmd = _cmd(copy_dir, run, 2, *sets)
    proc = spawn(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        ckpt = run / "last" / "checkpoint.json"
        if ckpt.exists() and json.loads(ckpt.read_text() or "{}").get("step", 0) >= 8:
            break
        time.sleep(0.05)
    workers = [p for p in _descendants(proc.pid) if _rank(p) is not None]
    for pid in [proc.pid, *workers]:                      # the launcher and both workers (this test's own processes)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    assert len(workers) == 2
    wait_for(lambda: not any(_alive(w) for w in workers), "the killed workers to end", every=0.05)
    killed_at = json.loads((run / "last" / "checkpoint.json").read_text())["step"]
    assert 8 <= killed_at < 24
    again = _run(cmd)
    assert again.returncode == 0, _why(again)
    assert f"from step {killed_at}" in again.stderr
    a, b = _weights(straight), _weights(run)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.ci      # CI's (make test-ci): two training processes each, 8 s
def test_resuming_with_another_number_of_processes_is_refused(copy_dir: DataDir, straight: Path,
                                                              tmp_path: Path) -> None:
    shutil.copytree(straight, tmp_path / "run")
    res = _run(_cmd(copy_dir, tmp_path / "run", 1, *KILLED[:-3], "max_steps=30"))
    assert res.returncode == 2 and "trained with 2 process(es)" in cli_error(res.stderr, "train")


@pytest.mark.ci      # CI's (make test-ci): two training processes, one crashed, 5 s
def test_a_crashed_process_ends_the_job_instead_of_hanging(copy_dir: DataDir, tmp_path: Path) -> None:
    run = tmp_path / "run"
    sets = ["max_tokens=512", "max_steps=100000", "save_every_steps=100000", "valid_every_steps=100000",
            "log_every_steps=1"]
    proc = spawn(_cmd(copy_dir, run, 2, *sets), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 180
    while not (run / "metrics.jsonl").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    workers = []
    while not workers and time.time() < deadline and proc.poll() is None:
        workers = [p for p in _descendants(proc.pid) if _rank(p) == 1]    # rank 1 of this test's own job
        time.sleep(0.05)
    assert workers, "rank 1 not found"
    os.kill(workers[0], signal.SIGKILL)
    t0 = time.time()
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the job hung after a process died") from None
    print(f"the job ended {time.time() - t0:.1f} s after rank 1 was killed, exit {proc.returncode}")
    assert proc.returncode != 0


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


def _descendants(pid: int) -> list[int]:
    """The processes started, directly or not, by process ``pid`` (read from /proc: children of children...)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])      # the field after the state
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _rank(pid: int) -> int | None:
    """The RANK a torchrun worker process was given (None for any other process)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    ranks = [int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"RANK=")]
    return ranks[0] if ranks else None


def test_a_process_leaves_its_group_when_training_ends() -> None:
    """Distributed.close (the end of training and of distillation) waits for every process and destroys the group:
    a process that exits with it open can be aborted by gloo's threads as its peer's connection closes (seen once in
    CI as a SIGABRT of rank 1 at the end of a 2-process run). In-process, with a group of one."""
    from aiayn.training.distributed import Distributed

    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    try:
        Distributed(rank=0, world=2).close()
        assert not torch.distributed.is_initialized()
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
