"""Translator and the translate / evaluate commands: N lines in, N lines out, always, in order."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from aiayn import Translator
from aiayn.cli.main import main
from aiayn.data.datadir import DataDir
from aiayn.engines.torch import TorchEngine
from aiayn.rundir import RunDir
from aiayn.runtime import eval_mode, map_in_threads
from aiayn.training.evaluate import score

from ..helpers import is_worker, workers_of


@pytest.fixture(scope="module")
def run_dir(multi30k_dir: DataDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("runs") / "tiny"
    assert main(["train", "--data", str(multi30k_dir.path), "--out", str(run), "--preset", "tiny", "--set",
                 "max_steps=3", "max_tokens=1024", "valid_bleu=false", "tensorboard=false", "max_positions=64",
                 "save_every_steps=3", "log_every_steps=1"]) == 0
    return run


AWKWARD = [
    "Ein Mann fährt Fahrrad.",
    "",
    "   \t ",
    "Zwei Hunde 🐕🐕 spielen im Schnee ❄️.",
    "这是一个中文句子。",
    "Ελληνικά και русский текст",
    " ".join(["sehr"] * 200),            # longer than max_positions=64 tokens: truncated
    "Ende.",
]


def test_n_lines_in_n_lines_out(run_dir: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    t = Translator.load(run_dir, "torch")
    with caplog.at_level(logging.WARNING):
        for beam in (1, 3):
            out = t.translate(AWKWARD, beam=beam)
            assert len(out) == len(AWKWARD)
            assert out[1] == "" and out[2] == ""
            assert all("\n" not in o for o in out)
    assert sum("truncated" in r.message for r in caplog.records) == 2   # once per call, not once per line


def test_order_is_kept_whatever_the_batching(run_dir: Path) -> None:
    t = Translator.load(run_dir, "torch")
    lines = [f"Satz {i} " + "wort " * (i % 7) for i in range(40)]
    big = t.translate(lines, beam=2, batch_tokens=100000, max_len_b=8)     # (an untrained model: short outputs)
    small = t.translate(lines, beam=2, batch_tokens=30, max_len_b=8)
    assert big == small
    assert [t.translate([line], beam=2, max_len_b=8)[0] for line in lines[:5]] == big[:5]


def test_workers_translate_exactly_as_one_thread(run_dir: Path) -> None:
    """Batches decoded by several threads at once: the same translations, in order, and the caller's
    thread count is left as it was."""
    t = Translator.load(run_dir, "torch")
    lines = [f"Ein Mann {i} " + "und ein Hund " * (i % 5) for i in range(30)]
    threads = torch.get_num_threads()
    one = t.translate(lines, beam=3, batch_tokens=40, workers=1, max_len_b=8)
    assert t.translate(lines, beam=3, batch_tokens=40, workers=3, max_len_b=8) == one
    assert torch.get_num_threads() == threads


def test_map_in_threads_keeps_order_and_shares_the_threads() -> None:
    threads = torch.get_num_threads()
    out = map_in_threads(lambda i: (i, torch.get_num_threads()), list(range(7)), 2)
    assert [i for i, _ in out] == list(range(7))
    assert {n for _, n in out} == {max(1, threads // 2)}
    # fewer items than workers: the threads are shared among the workers that run
    torch.set_num_threads(4)
    try:
        assert map_in_threads(lambda i: torch.get_num_threads(), [0], 4) == [4]
        assert map_in_threads(lambda i: torch.get_num_threads(), [0, 1], 8) == [2, 2]
    finally:
        torch.set_num_threads(threads)
    assert torch.get_num_threads() == threads
    with ThreadPoolExecutor(1) as pool:                                     # a thread started afterwards
        later = pool.submit(torch.get_num_threads).result()
    assert later == threads

    def fail(i: int) -> int:
        if i == 3:
            raise ValueError("batch 3")
        return i

    with pytest.raises(ValueError, match="batch 3"):
        map_in_threads(fail, list(range(5)), 2)
    assert torch.get_num_threads() == threads


@pytest.mark.filterwarnings("ignore:precision=bf16 on a CPU without native bf16")   # slow there, still correct
@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precision_translators(run_dir: Path, precision: str) -> None:
    t = Translator.load(run_dir, "torch", precision=precision)
    assert len(t.translate(AWKWARD, beam=2)) == len(AWKWARD)


def test_compile_with_int8_is_refused_by_name(run_dir: Path) -> None:
    """torch.compile cannot trace the int8 layers (fbgemm's packed weights): asked for both, at load or in a call, the
    error says which settings clash and what to use instead (it was a traceback from deep inside torch.compile)."""
    with pytest.raises(ValueError, match="decode.compile cannot be used with precision int8.*--precision fp32"):
        Translator.load(run_dir, "torch", precision="int8", compile=True)
    t = Translator.load(run_dir, "torch", precision="int8")
    with pytest.raises(ValueError, match="decode.compile cannot be used with precision int8"):
        t.translate(AWKWARD[:1], compile=True)


def test_int8_takes_the_full_8_bit_range_only_where_the_cpu_has_vnni(monkeypatch: pytest.MonkeyPatch) -> None:
    """fbgemm's AVX2 kernels add pairs of 8-bit products in 16 bits, which full-range inputs can overflow: the range
    is 7 bits there, 8 with AVX512-VNNI (closer to fp32); the shortlist's layer follows its model's."""
    from aiayn import ModelConfig, Transformer, quantize
    from aiayn.quantize import Int8Linear, int8

    model = Transformer(ModelConfig.preset("tiny", src_vocab_size=50, tgt_vocab_size=50)).eval()
    x = torch.randn(7, 3, model.cfg.d_model)
    outputs = {}
    for vnni in (False, True):
        monkeypatch.setattr(quantize, "full_range", lambda vnni=vnni: vnni)
        q = int8(model)
        layers = [m for m in q.modules() if isinstance(m, Int8Linear)]
        assert layers and all(m.reduce_range is not vnni for m in layers)
        outputs[vnni] = q.out_proj(x)
        assert torch.equal(outputs[vnni], torch.ops.quantized.linear_dynamic(x, q.out_proj.packed, not vnni))
    assert not torch.equal(outputs[False], outputs[True])                # the two ranges round differently
    fp32 = model.out_proj(x)
    assert (outputs[True] - fp32).abs().mean() < (outputs[False] - fp32).abs().mean()


def test_int8_layers_call_the_same_kernel_directly() -> None:
    """Every Linear becomes an Int8Linear around torch.ao's packed weights, with torch.ao's exact output."""
    from aiayn import ModelConfig, Transformer
    from aiayn.model import FeedForward
    from aiayn.quantize import Int8Linear, int8

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", src_vocab_size=50, tgt_vocab_size=50)).eval()
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    q = int8(model)
    lean = [m for m in q.modules() if isinstance(m, Int8Linear)]
    assert len(lean) == n_linear
    # torch.ao's module stays out of the module tree, which torch.jit.trace scripts whole (model.TracedSteps)
    assert all(not list(m.children()) and "in_features=" in repr(m) for m in lean)
    x = torch.randn(7, 3, lean[0].quantized.in_features)
    for m in lean[:3] + [q.out_proj]:   # torch.ao's module always takes a 7-bit range (quantize.full_range)
        full = torch.ops.quantized.linear_dynamic(x, m.packed, m.reduce_range)
        assert torch.equal(m(x), torch.relu(full) if m.relu else full)
        if m.reduce_range:
            assert torch.equal(full, m.quantized(x))
    assert q.out_proj(x).dtype == torch.float32
    src = torch.tensor([[5, 6, 7, 2]])
    assert torch.allclose(q(src, torch.tensor([[1, 8]])), model(src, torch.tensor([[1, 8]])), atol=0.3)
    ffns = [m for m in q.modules() if isinstance(m, FeedForward)]              # ReLU inside the first layer's kernel
    assert ffns and all(f.w1.relu and isinstance(f.act, torch.nn.Identity) for f in ffns)
    h = torch.randn(7, 3, ffns[0].w1.quantized.in_features)
    w1, w2 = ffns[0].w1, ffns[0].w2                                           # the unfused layers' output
    unfused = torch.relu(torch.ops.quantized.linear_dynamic(h, w1.packed, w1.reduce_range))
    assert torch.equal(ffns[0](h), torch.ops.quantized.linear_dynamic(unfused, w2.packed, w2.reduce_range))
    swish = Transformer(ModelConfig.preset("tiny", src_vocab_size=50, tgt_vocab_size=50, activation="swish")).eval()
    assert not any(m.relu for m in int8(swish).modules() if isinstance(m, Int8Linear))   # only ReLU is fused


def test_nbest_and_sampling(run_dir: Path) -> None:
    t = Translator.load(run_dir, "torch")
    hyps = t.engine.translate_hypotheses(["Ein Mann."], beam=4, nbest=3)
    assert len(hyps[0]) == 3 and hyps[0][0].score >= hyps[0][1].score >= hyps[0][2].score
    assert len(t.translate(["Ein Mann.", "Eine Frau."], sampling=True, top_k=5)) == 2


def test_cli_translate_stdin_stdout_with_invalid_utf8(run_dir: Path, tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "in.de"
    src.write_bytes(b"Ein Hund.\n\xff\xfe kaputt\n\nletzte Zeile ohne Zeilenende")
    out = tmp_path / "out.en"
    assert main(["translate", "--model", str(run_dir), "--input", str(src), "--output", str(out), "--beam", "2"]) == 0
    assert len(out.read_text().split("\n")) == 5 and out.read_text().endswith("\n")   # 4 lines, each ended
    assert main(["translate", "--model", str(run_dir), "--input", str(src), "--nbest", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8 and lines[0].split("\t")[0] == "0" and lines[-1].split("\t")[0] == "3"


def test_cli_evaluate_json(run_dir: Path, multi30k_dir: DataDir, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "v.de"
    ref = tmp_path / "v.en"
    src.write_text("\n".join(multi30k_dir.raw("valid", "src").read_text().splitlines()[:20]) + "\n")
    ref.write_text("\n".join(multi30k_dir.raw("valid", "tgt").read_text().splitlines()[:20]) + "\n")
    assert main(["evaluate", "--model", str(run_dir), "--src", str(src), "--ref", str(ref), "--beam", "2",
                 "--json", "--hyps", str(tmp_path / "h.txt")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"bleu", "bleu_lc", "chrf", "signature", "sentences", "seconds"} <= set(result)
    assert result["sentences"] == 20 and "tok:13a" in result["signature"]
    assert len((tmp_path / "h.txt").read_text().splitlines()) == 20
    for how in ("--processes", "--no-processes"):              # aiayn's engine in worker processes, or threads
        assert main(["evaluate", "--model", str(run_dir), "--src", str(src), "--ref", str(ref), "--beam", "2",
                     "--engine", "torch", "--workers", "2", "--batch-tokens", "200", how, "--json",
                     "--hyps", str(tmp_path / f"h{how}.txt")]) == 0
        assert json.loads(capsys.readouterr().out)["bleu"] == pytest.approx(result["bleu"])
    assert (tmp_path / "h--processes.txt").read_text() == (tmp_path / "h--no-processes.txt").read_text()
    ref.write_text("only one line\n")
    assert main(["evaluate", "--model", str(run_dir), "--src", str(src), "--ref", str(ref)]) == 2
    assert "lines" in capsys.readouterr().err


def test_find_checkpoint_preference(run_dir: Path) -> None:
    run, ckpt = RunDir.locate(run_dir)
    assert run.path == run_dir and ckpt.name in ("averaged", "best", "last")
    run, ckpt = RunDir.locate(run_dir / "last")
    assert (run.path, ckpt) == (run_dir, run_dir / "last")
    with pytest.raises(FileNotFoundError, match="no such run"):
        RunDir.locate(run_dir / "nope")


def test_score_is_sacrebleu_on_every_line() -> None:
    s = score(["a cat sat on the mat", "hello world"], ["A cat sat on the mat", "hello world"])
    assert s["bleu"] < s["bleu_lc"] == 100.0
    with pytest.raises(ValueError, match="every line"):
        score(["one"], ["one", "two"])


@pytest.mark.ci      # CI's (make test-ci): every plot drawn, 7 s
def test_plots(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert main(["plot", "--model", str(run_dir), "--out", str(tmp_path / "p")]) == 0
    names = sorted(p.name for p in (tmp_path / "p").glob("*.png"))
    assert names == ["attention_cross.png", "attention_decoder_self.png", "attention_encoder.png", "label_smoothing.png",
                     "learning_rate.png", "masks.png", "positional_encoding.png", "training_curves.png"]


def test_int8_without_torch_ao_quantization_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PyTorch that has dropped torch.ao's eager quantization gets a message, not an ImportError traceback."""
    import sys

    from aiayn import ModelConfig, Transformer
    from aiayn.quantize import int8

    monkeypatch.setitem(sys.modules, "torch.ao.quantization", None)     # makes the import fail
    model = Transformer(ModelConfig(src_vocab_size=16, tgt_vocab_size=16, d_model=8, n_layers=1, n_heads=2, d_ff=16))
    with pytest.raises(ValueError, match="precision=int8 uses torch.ao.quantization"):
        int8(model)


def test_worker_processes_decode_as_threads_do_and_the_caller_loads_no_model(run_dir: Path, tmp_path: Path) -> None:
    """`aiayn translate`'s default on a CPU (processes.ProcessEngine.load): the lines cut into batches as aiayn's
    engine cuts them (engine.decode_batches), shared out among worker processes, give the hypotheses of threads in one
    process, each line in its place; the process that starts them imports no PyTorch; a worker that cannot load its
    model is a one-line error naming why."""
    import subprocess
    import sys

    from aiayn.engines.auto import load
    from aiayn.engines.base import decode_batches
    from aiayn.engines.processes import ProcessEngine

    lines = AWKWARD + [f"Ein Mann {i} " + "und ein Hund " * (i % 5) for i in range(30)]
    t = Translator.load(run_dir, "torch", workers=2)
    p = load(run_dir, "torch", processes=True, workers=2, device="cpu")
    try:
        assert isinstance(p, ProcessEngine) and len(workers_of(os.getpid())) == 2 and str(p.device) == "cpu"
        for beam, nbest in ((1, 1), (3, 2)):
            settings = {"beam": beam, "nbest": nbest, "batch_tokens": 40, "max_len_b": 8}
            assert len(decode_batches(p.encode(lines), 64, p.settings(**settings))) > 4
            want, got = t.engine.translate_hypotheses(lines, **settings), p.translate_hypotheses(lines, **settings)
            assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in want]
            assert [h.score for hs in got for h in hs] == pytest.approx([h.score for hs in want for h in hs], abs=1e-5)
        assert Translator(p).translate(lines, max_len_b=8) == t.translate(lines, max_len_b=8)
    finally:
        p.close()
    assert all(not q.is_alive() for q, _ in p.pool.processes)

    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    probe = ("import sys; from aiayn.cli.main import main; code = main(sys.argv[1:]); "
             "print('torch imported' if 'torch' in sys.modules else 'no torch', file=sys.stderr); sys.exit(code)")

    def cli(run: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", probe, "translate", "--model", str(run), "--input", str(src),
                               "--engine", "torch", "--workers", "2", "--max-len-b", "8", "--quiet", *args],
                              capture_output=True, text=True, timeout=850)

    done = cli(run_dir)
    assert done.returncode == 0 and done.stderr.splitlines()[-1] == "no torch", done.stderr
    assert done.stdout.splitlines() == t.translate(lines, max_len_b=8)

    broken = tmp_path / "broken"                        # weights that cannot be read: the worker says so
    shutil.copytree(run_dir, broken)
    for weights in broken.rglob("*.safetensors"):
        weights.write_bytes(weights.read_bytes()[:100])
    done = cli(broken)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "worker" in done.stderr and "safetensors" in done.stderr, done.stderr


@pytest.mark.ci      # CI's (make test-ci): worker processes started and one killed, 8 s
def test_a_worker_process_that_dies_is_a_one_line_error_at_once(run_dir: Path, tmp_path: Path) -> None:
    """A worker killed while `aiayn translate` decodes: the other stops too, and the command exits 2 at once (it does
    not restart the worker and decode the rest of the input first: its output stays unfinished), with a line naming
    it, no traceback, and no worker left behind."""
    import signal
    import subprocess
    import sys

    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(f"Ein Mann {i} und ein Hund.\n" for i in range(20000)))
    p = subprocess.Popen([sys.executable, "-m", "aiayn", "translate", "--model", str(run_dir), "--input", str(src),
                          "--output", str(out), "--engine", "torch", "--workers", "2", "--beam", "1", "--quiet"],
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out.exists() and out.stat().st_size):           # decoding: its first chunk is written
            assert p.poll() is None and time.monotonic() < deadline, "no output"
            time.sleep(0.05)
        workers = workers_of(p.pid)
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        err = p.communicate(timeout=120)[1]
    finally:
        p.kill()
    assert p.returncode == 2 and "Traceback" not in err, err
    assert len(out.read_text(encoding="utf-8").splitlines()) < 20000, "it went on decoding after the worker died"
    assert err.strip() == f"aiayn translate: error: decoding worker process {workers[0]} died (exit code -9)", err
    time.sleep(1)
    assert not any(is_worker(w) for w in workers)


def test_where_worker_processes_cannot_start_threads_decode(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """A machine that cannot start them (no shared-memory semaphores: some sandboxes): a warning, then threads."""
    import multiprocessing.context

    from aiayn.engines.auto import load

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(multiprocessing.context.BaseContext, "Event", refuse)
    with caplog.at_level(logging.WARNING):
        t = load(run_dir, "torch", processes=True, workers=2, device="cpu")
    assert isinstance(t, TorchEngine) and "worker processes could not be started" in caplog.text
    want = Translator.load(run_dir, "torch").translate(["Ein Mann."], max_len_b=4)
    assert Translator(t).translate(["Ein Mann."], max_len_b=4) == want


def test_a_server_where_worker_processes_cannot_start_decodes_in_threads(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """aiayn serve likewise: one warning at load, then the step-wise batcher's threads (not a failed start)."""
    import asyncio
    import multiprocessing.context

    from prometheus_client import CollectorRegistry

    from aiayn.serving.batcher import Batcher, DecodeMetrics, Limits
    from aiayn.serving.models import Served

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(multiprocessing.context.BaseContext, "Event", refuse)
    limits = Limits(workers=2, max_batch_tokens=4000, max_wait_ms=0.0, max_queue_lines=100, timeout_s=60,
                    processes=True)
    with caplog.at_level(logging.WARNING):
        served = Served.load(run_dir, "torch", processes=2, device="cpu")
        served.start(limits, DecodeMetrics(CollectorRegistry()).model("test"))
    try:
        assert isinstance(served.translator, TorchEngine) and isinstance(served.batcher, Batcher)
        assert caplog.text.count("worker processes could not be started") == 1
        t = served.translator
        got = asyncio.run(served.batcher.translate(t.encode(["Ein Mann."]), t.decode))
        assert t.detokenize([h[0].tokens for h in got]) == Translator.load(run_dir, "torch").translate(["Ein Mann."])
    finally:
        served.close()
    with caplog.at_level(logging.WARNING):
        served.open()                # loaded again (--memory-budget unloads idle models): threads at once, no new try
    assert isinstance(served.translator, TorchEngine) and caplog.text.count("worker processes could not be started") == 1


def test_eval_mode_turns_dropout_off_anywhere_and_leaves_a_model_in_eval_mode_untouched() -> None:
    """Every decoding call enters eval_mode: a module left in training is switched off inside (its dropout would make
    the output random), and a model all in eval mode is not switched at all (on the demo model, switching and
    restoring its modules took 0.98 ms a call)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).eval()
    model[1].train()
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
    assert not any(m.training for m in model.modules())
    switched: list[bool] = []
    model.train = lambda mode=True: switched.append(mode)  # type: ignore[method-assign,assignment,return-value]
    with eval_mode(model):
        pass
    assert switched == []
