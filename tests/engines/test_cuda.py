"""The CUDA paths: device auto-detection, bf16 autocast, SDPA and the decoding cache on a GPU, exact resume there.

Skipped on machines without a CUDA GPU (CI's, the development VM's); run them where one is:
``python -m pytest tests/engines/test_cuda.py``. Each compares the GPU with the CPU, or a run with itself, so that a
GPU-only bug (a mask on the wrong device, a kernel choice that changes the numbers, a resume that is not exact)
fails here rather than on a user's machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aiayn import ModelConfig, Transformer, Translator
from aiayn.cli.main import main
from aiayn.data.datadir import DataDir
from aiayn.decoding.search import beam_search, greedy
from aiayn.precision import resolve
from aiayn.runtime import resolve_device

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")

ROOT = Path(__file__).parents[2]
COPY_CFG = ROOT / "aiayn" / "configs" / "copy.yaml"
FAST = ["max_steps=12", "save_every_steps=6", "valid_every_steps=6", "log_every_steps=3", "valid_max_sentences=20",
        "d_model=32", "d_ff=64", "n_layers=1", "max_tokens=512", "p_drop=0.1", "warmup=4", "tensorboard=false"]


def _model(seed: int = 0, **over: int) -> Transformer:
    torch.manual_seed(seed)
    cfg = dict(src_vocab_size=64, tgt_vocab_size=64, d_model=32, d_ff=64, n_heads=4, n_layers=2)
    return Transformer(ModelConfig(**{**cfg, **over})).eval()


def _batch(B: int = 3, S: int = 9, T: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 64, (B, S), generator=g)
    src[0, 5:] = 0                                                   # padding in one row
    src[0, 4] = 2
    src[1:, -1] = 2
    tgt = torch.randint(4, 64, (B, T), generator=g)
    tgt[:, 0] = 1
    return src, tgt


def test_auto_picks_the_gpu_and_bf16() -> None:
    device = resolve_device("auto")
    assert device.type == "cuda"
    assert resolve("auto", device) == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    with pytest.raises(ValueError, match="int8"):
        resolve("int8", device)


def test_forward_on_the_gpu_equals_the_cpu_in_fp32() -> None:
    """Same weights, same batch (with padding and the causal mask): the fused SDPA path on CUDA gives the CPU's
    logits to fp32 rounding; a mask on the wrong side or a dropped scale would be off by far more."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = _model()
    src, tgt = _batch()
    with torch.no_grad():
        cpu = model(src, tgt)
        gpu = model.cuda()(src.cuda(), tgt.cuda()).cpu()
    assert torch.allclose(cpu, gpu, atol=1e-4, rtol=1e-4), (cpu - gpu).abs().max()


def test_bf16_forward_on_the_gpu_is_close_to_fp32() -> None:
    model = _model().cuda()
    src, tgt = (x.cuda() for x in _batch())
    with torch.no_grad():
        ref = model(src, tgt).log_softmax(-1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            low = model(src, tgt).float().log_softmax(-1)
    assert (ref.argmax(-1) == low.argmax(-1)).float().mean() > 0.9
    assert (ref - low).abs().max() < 0.5


def test_cached_decoding_on_the_gpu_equals_the_cpu() -> None:
    """Greedy and beam search with the incremental cache on CUDA give the CPU's tokens (fp32, a random model
    whose logits are far from ties at this size), and the cache gives what full re-decoding gives."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = _model(seed=3)
    src, _ = _batch(B=4)
    args = dict(max_len_a=0.0, max_len_b=12)
    cpu_g = [h.tokens for h in greedy(model, src, **args)]
    cpu_b = [[h.tokens for h in hs] for hs in beam_search(model, src, beam=4, **args)]
    model = model.cuda()
    gpu_g = [h.tokens for h in greedy(model, src.cuda(), **args)]
    gpu_b = [[h.tokens for h in hs] for hs in beam_search(model, src.cuda(), beam=4, **args)]
    assert gpu_g == cpu_g
    assert [b[0] for b in gpu_b] == [b[0] for b in cpu_b]


def test_the_compiled_static_step_on_the_gpu_decodes_todays_tokens() -> None:
    """decode.compile on CUDA: the static-shape step compiled with CUDA graphs (mode="reduce-overhead"), greedy and
    beam search, gives the dynamic step's tokens in fp32 (a graph replayed on stale inputs, or a cache write lost
    between replays, would not)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = _model(seed=3).cuda()
    src, _ = _batch(B=5)
    src = src.cuda()
    args = dict(max_len_a=0.0, max_len_b=12)
    for _ in range(2):                                              # the second run replays the recorded graphs
        assert [h.tokens for h in greedy(model, src, compile=True, **args)] == \
            [h.tokens for h in greedy(model, src, **args)]
        assert [[h.tokens for h in hs] for hs in beam_search(model, src, beam=4, compile=True, **args)] == \
            [[h.tokens for h in hs] for hs in beam_search(model, src, beam=4, **args)]


def _train(data: DataDir, run: Path, *sets: str) -> int:
    return main(["train", "--data", str(data.path), "--out", str(run), "--config", str(COPY_CFG), "--set", *FAST,
                 "train.device=cuda", *sets])


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resume_on_the_gpu_is_bit_exact(copy_dir: DataDir, tmp_path: Path, precision: str) -> None:
    """12 steps straight == 6 steps, stop, resume to 12, on CUDA — bit for bit (a resume that lost the RNG or the
    optimizer state would differ). No deterministic mode is set: it passed as it is on an H100 (torch 2.11), in
    both precisions; a GPU whose kernels use atomics here would fail it and need torch's deterministic mode."""
    assert _train(copy_dir, tmp_path / "straight", f"train.precision={precision}") == 0
    assert _train(copy_dir, tmp_path / "resumed", f"train.precision={precision}", "max_steps=6") == 0
    assert _train(copy_dir, tmp_path / "resumed", f"train.precision={precision}") == 0
    a = load_file(str(tmp_path / "straight" / "last" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "last" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_a_gpu_trained_run_translates_on_the_gpu_and_the_cpu(copy_dir: DataDir, tmp_path: Path) -> None:
    assert _train(copy_dir, tmp_path / "run") == 0
    src = copy_dir.raw("test", "src").read_text().splitlines()[:20]
    on_gpu = Translator.load(tmp_path / "run", "torch", device="cuda").translate(src, beam=4)
    on_cpu = Translator.load(tmp_path / "run", "torch", device="cpu", precision="fp32").translate(src, beam=4)
    assert len(on_gpu) == len(on_cpu) == 20
    assert sum(a == b for a, b in zip(on_gpu, on_cpu, strict=True)) >= 18    # bf16 on the GPU, fp32 on the CPU


def test_the_guided_alignment_loss_on_the_gpu_equals_the_cpu() -> None:
    """The guided-alignment term (its heads' explicit attention beside SDPA in the other layers) on CUDA gives the
    CPU's loss and gradients in fp32, and stays finite and close under bf16 autocast."""
    from aiayn.loss import SequenceLoss

    torch.backends.cuda.matmul.allow_tf32 = False
    model = _model(seed=5, alignment_heads=1, n_layers=3)
    src, tgt = _batch()
    out = torch.cat([tgt[:, 1:], torch.full((3, 1), 2)], 1)
    align = torch.softmax(torch.randn(3, tgt.shape[1], src.shape[1], generator=torch.Generator().manual_seed(2)), -1)
    align = align * (src != 0)[:, None, :]
    loss = SequenceLoss(model, 0.1, 0, guided=0.5)
    cpu = loss(src, tgt, out, align)[0]
    cpu.backward()
    grad = model.decoder[1].cross_attn.q_proj.weight.grad.clone()
    model.zero_grad()
    model.cuda()
    gpu = loss(src.cuda(), tgt.cuda(), out.cuda(), align.cuda())[0]
    gpu.backward()
    assert torch.allclose(cpu, gpu.cpu(), rtol=1e-4), (cpu, gpu)
    assert torch.allclose(grad, model.decoder[1].cross_attn.q_proj.weight.grad.cpu(), atol=1e-4, rtol=1e-3)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        low = loss(src.cuda(), tgt.cuda(), out.cuda(), align.cuda())[0]
    low, cpu = low.detach(), cpu.detach()
    assert torch.isfinite(low) and abs(float(low) - float(cpu)) < 0.05 * float(cpu)
