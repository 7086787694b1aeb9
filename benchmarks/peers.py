"""Training steps of aiayn and its peers on identical batches: one place that builds each implementation.

Every implementation gets the same model sizes, the same batches (token-bucketed, padding counted),
label-smoothed cross-entropy (eps 0.1) normalized per target token, Adam(0.9, 0.98, 1e-9), and the
same precision policy (fp32, or bf16 autocast for the peers). Used by ``train_bench.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

PAD, BOS, EOS = 0, 1, 2

# (d_model, n_layers, n_heads, d_ff, vocab) of the two benchmarked presets
SIZES = {"small": (256, 3, 4, 1024, 8000), "base": (512, 6, 8, 2048, 32000)}


@dataclass
class Batch:
    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    n_tgt: int
    n_src: int


def make_batches(vocab: int, n_batches: int, max_tokens: int = 4096, seed: int = 0) -> list[Batch]:
    """Multi30k-like sentence pairs (lengths 13 +- 5 tokens, target close to source), grouped by length
    with aiayn's token-bucketed sampler (padding counted on both sides), random token ids."""
    from aiayn.data.batches import TokenBatchSampler

    rng = np.random.default_rng(seed)
    n = 40000
    ls = np.clip(np.rint(rng.normal(13, 5, n)), 3, 60).astype(np.int64)
    lt = np.clip(ls + np.rint(rng.normal(0, 2, n)), 3, 60).astype(np.int64)
    batches = TokenBatchSampler(ls + 1, lt + 1, max_tokens, seed=seed).epoch_batches(0)[:n_batches]
    out = []
    for idx in batches:
        S, T = int(ls[idx].max()) + 1, int(lt[idx].max()) + 1
        src = torch.full((len(idx), S), PAD)
        tgt = torch.full((len(idx), T + 1), PAD)
        for r, i in enumerate(idx):
            src[r, : ls[i]] = torch.from_numpy(rng.integers(4, vocab, ls[i]))
            src[r, ls[i]] = EOS
            tgt[r, 0] = BOS
            tgt[r, 1 : lt[i] + 1] = torch.from_numpy(rng.integers(4, vocab, lt[i]))
            tgt[r, lt[i] + 1] = EOS
        tgt_out = tgt[:, 1:].clone()
        tgt_in = tgt[:, :-1].clone()
        tgt_in[tgt_in == EOS] = PAD
        out.append(Batch(src, tgt_in, tgt_out, int((tgt_out != PAD).sum()), int((src != PAD).sum())))
    return out


def padding_fraction(batches: list[Batch]) -> float:
    real = sum(b.n_tgt + b.n_src for b in batches)
    total = sum(b.src.numel() + b.tgt_out.numel() for b in batches)
    return 1 - real / total


def train_flops(batches: list[Batch], d: int, layers: int, d_ff: int, vocab: int) -> float:
    """Matmul FLOPs of forward + backward (3 x forward), on the padded shapes:
    encoder 2*S*(4D^2 + 2DF) + attention 4*S*S*D per layer; decoder 2*T*(4D^2 + 2DF) + 2*(T*2D^2 + S*2D^2)
    + attention 4*T*T*D + 4*T*S*D per layer; output projection 2*T*D*V; per sentence."""
    total = 0.0
    for b in batches:
        B, S = b.src.shape
        T = b.tgt_in.shape[1]
        enc = 2 * S * (4 * d * d + 2 * d * d_ff) + 4 * S * S * d
        dec = 2 * T * (4 * d * d + 2 * d * d_ff) + 2 * (T * 2 * d * d + S * 2 * d * d) + 4 * T * T * d + 4 * T * S * d
        total += B * (layers * (enc + dec) + 2 * T * d * vocab)
    return 3 * total


def _adam(params, fused: bool = False) -> torch.optim.Adam:  # type: ignore[no-untyped-def]
    return torch.optim.Adam(params, lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=fused or None)


def _autocast(precision: str):  # type: ignore[no-untyped-def]
    import contextlib

    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()


def _ce(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=PAD,
                           label_smoothing=0.1, reduction="sum")


Step = Callable[[Batch], float]


def _peer_step(model: nn.Module, precision: str, loss_sum: Callable[[Batch], torch.Tensor]) -> Step:
    """One full training step of a peer: its summed loss under the precision policy, normalized per target
    token, backward, Adam."""
    opt = _adam(model.parameters())

    def step(b: Batch) -> float:
        opt.zero_grad(set_to_none=True)
        with _autocast(precision):
            loss = loss_sum(b)
        (loss / b.n_tgt).backward()
        opt.step()
        return loss.item() / b.n_tgt

    return step


def build_aiayn(size: str, precision: str, dropout: float = 0.1) -> tuple[Step, nn.Module]:
    from aiayn import ModelConfig, Transformer
    from aiayn.config import TrainConfig
    from aiayn.loss import SequenceLoss
    from aiayn.optim import make_optimizer
    from aiayn.precision import autocast
    from aiayn.runtime import keep_freed_memory

    keep_freed_memory()
    d, n, h, f, v = SIZES[size]
    model = Transformer(ModelConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=d, n_layers=n, n_heads=h, d_ff=f,
                                    p_drop=dropout)).train()
    opt = make_optimizer(model.parameters(), TrainConfig(), torch.device("cpu"))
    loss_fn = SequenceLoss(model, 0.1, 2048)
    dev = torch.device("cpu")

    def step(b: Batch) -> float:
        opt.zero_grad(set_to_none=True)
        with autocast(dev, precision):
            loss, _ = loss_fn(b.src, b.tgt_in, b.tgt_out)
        (loss / b.n_tgt).backward()
        opt.step()
        return float(loss.detach()) / b.n_tgt

    return step, model


class _SinusoidalEmbedding(nn.Module):
    def __init__(self, vocab: int, d: int, dropout: float) -> None:
        super().__init__()
        self.emb, self.scale, self.drop = nn.Embedding(vocab, d, padding_idx=PAD), math.sqrt(d), nn.Dropout(dropout)
        # As a user of a tied Transformer initialises it (fairseq, the Annotated Transformer's users, aiayn):
        # N(0, d^-0.5), so that the scaled input and the tied output's logits start at unit scale. nn.Embedding's
        # default N(0, 1) made the first logits ~sqrt(d) wide and the reported loss ~41 (base: 78).
        nn.init.normal_(self.emb.weight, std=d**-0.5)
        with torch.no_grad():
            self.emb.weight[PAD].zero_()
        pos = torch.arange(1024)[:, None] * torch.exp(torch.arange(0, d, 2) * -(math.log(10000.0) / d))
        pe = torch.zeros(1024, d)
        pe[:, 0::2], pe[:, 1::2] = pos.sin(), pos.cos()
        self.register_buffer("pe", pe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.emb(x) * self.scale + self.pe[: x.shape[1]])


class TorchNNTransformer(nn.Module):
    """torch.nn.Transformer (post-norm, batch-first) with shared embeddings and a tied output projection."""

    def __init__(self, size: str, dropout: float) -> None:
        super().__init__()
        d, n, h, f, v = SIZES[size]
        self.embed = _SinusoidalEmbedding(v, d, dropout)
        self.core = nn.Transformer(d, h, n, n, f, dropout, batch_first=True)
        self.out = nn.Linear(d, v, bias=False)
        self.out.weight = self.embed.emb.weight

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        T = tgt_in.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.bool)
        hidden = self.core(self.embed(src), self.embed(tgt_in), tgt_mask=causal, src_key_padding_mask=src == PAD,
                           tgt_key_padding_mask=tgt_in == PAD, memory_key_padding_mask=src == PAD, tgt_is_causal=True)
        return self.out(hidden)


def build_torch_nn(size: str, precision: str, dropout: float = 0.1) -> tuple[Step, nn.Module]:
    model = TorchNNTransformer(size, dropout).train()
    return _peer_step(model, precision, lambda b: _ce(model(b.src, b.tgt_in), b.tgt_out)), model


def marian_config(size: str, dropout: float = 0.1):  # type: ignore[no-untyped-def]
    from transformers import MarianConfig

    d, n, h, f, v = SIZES[size]
    return MarianConfig(vocab_size=v, d_model=d, encoder_layers=n, decoder_layers=n, encoder_attention_heads=h,
                        decoder_attention_heads=h, encoder_ffn_dim=f, decoder_ffn_dim=f, max_position_embeddings=512,
                        pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=BOS, bos_token_id=BOS,
                        forced_eos_token_id=None, dropout=dropout, attention_dropout=0.0, activation_dropout=0.0,
                        activation_function="relu", scale_embedding=True, share_encoder_decoder_embeddings=True)


def build_hf_marian(size: str, precision: str, dropout: float = 0.1) -> tuple[Step, nn.Module]:
    from transformers import MarianMTModel

    model = MarianMTModel(marian_config(size, dropout)).train()

    def loss_sum(b: Batch) -> torch.Tensor:
        logits = model(input_ids=b.src, attention_mask=(b.src != PAD).long(), decoder_input_ids=b.tgt_in,
                       decoder_attention_mask=(b.tgt_in != PAD).long()).logits
        return _ce(logits, b.tgt_out)

    return _peer_step(model, precision, loss_sum), model


def build_annotated(size: str, precision: str, dropout: float = 0.1) -> tuple[Step, nn.Module]:
    from annotated import LabelSmoothing, batch_masks, make_model

    d, n, h, f, v = SIZES[size]
    model = make_model(v, v, N=n, d_model=d, d_ff=f, h=h, dropout=dropout).train()
    crit = LabelSmoothing(v, PAD, 0.1)

    def loss_sum(b: Batch) -> torch.Tensor:
        src_mask, tgt_mask = batch_masks(b.src, b.tgt_in, PAD)
        logp = model.generator(model(b.src, b.tgt_in, src_mask, tgt_mask))
        return crit(logp.float().reshape(-1, logp.shape[-1]), b.tgt_out.reshape(-1))

    return _peer_step(model, precision, loss_sum), model


PEERS_DIR = Path(__file__).parent / ".peers"


def _import_opennmt() -> None:
    """OpenNMT-py 3.5.1 pins torch<2.3, so ``make bench`` installs it without its dependencies into
    benchmarks/.peers (the venv's torch stays). Its package __init__ imports every data transform; the
    optional libraries those need (spaCy, fastText, ...) play no part in a training step, so they are
    stubbed when absent."""
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import sys
    import types

    if PEERS_DIR.is_dir() and str(PEERS_DIR) not in sys.path:
        sys.path.insert(0, str(PEERS_DIR))
    missing = {m for m in ("spacy", "fasttext", "ahocorasick", "rapidfuzz", "flask", "waitress", "tensorboard")
               if importlib.util.find_spec(m) is None}

    class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
            return importlib.machinery.ModuleSpec(name, self, is_package=True) if name.split(".")[0] in missing \
                else None

        def create_module(self, spec):  # type: ignore[no-untyped-def]
            module = types.ModuleType(spec.name)
            module.__path__ = []  # type: ignore[attr-defined]
            module.__getattr__ = lambda attr: None  # type: ignore[method-assign]
            return module

        def exec_module(self, module):  # type: ignore[no-untyped-def]
            pass

    sys.meta_path.insert(0, _Stub())


def build_opennmt(size: str, precision: str, dropout: float = 0.1) -> tuple[Step, nn.Module]:
    """OpenNMT-py's Transformer as its model builder assembles it for ``-share_embeddings
    -share_decoder_embeddings -position_encoding`` (pre-norm, its 3.x default), its generator a Linear
    tied to the embeddings, its loss CrossEntropyLoss(label_smoothing) on fp32 scores as in onmt.utils.loss,
    its parameters initialised as ``-param_init 0 -param_init_glorot`` does."""
    _import_opennmt()
    from onmt.decoders.transformer import TransformerDecoder
    from onmt.encoders.transformer import TransformerEncoder
    from onmt.modules import Embeddings

    d, n, h, f, v = SIZES[size]
    src_emb = Embeddings(d, v, PAD, position_encoding=True, dropout=dropout)
    tgt_emb = Embeddings(d, v, PAD, position_encoding=True, dropout=dropout)
    tgt_emb.word_lut.weight = src_emb.word_lut.weight
    encoder = TransformerEncoder(n, d, h, f, dropout, 0.0, src_emb, 0, 0)
    decoder = TransformerDecoder(n, d, h, f, False, "scaled-dot", dropout, 0.0, tgt_emb, 0, 0, False, False, 0, 0)
    generator = nn.Linear(d, v)
    generator.weight = tgt_emb.word_lut.weight
    model = nn.ModuleDict({"encoder": encoder, "decoder": decoder, "generator": generator}).train()
    for module in model.modules():  # its layers are built with skip_init; onmt's -param_init_glorot recipe
        for name, param in module.named_parameters(recurse=False):
            if name == "weight" and param.dim() > 1:
                nn.init.xavier_uniform_(param)
            elif name == "bias":
                nn.init.zeros_(param)

    def loss_sum(b: Batch) -> torch.Tensor:
        src = b.src.unsqueeze(-1)
        enc_out, _, src_len = encoder(src, (b.src != PAD).sum(1))
        decoder.init_state(src, enc_out, None)
        dec_out, _ = decoder(b.tgt_in.unsqueeze(-1), enc_out, src_len=src_len)
        return _ce(generator(dec_out), b.tgt_out)

    return _peer_step(model, precision, loss_sum), model


BUILDERS = {"aiayn": build_aiayn, "OpenNMT-py": build_opennmt, "torch.nn.Transformer": build_torch_nn,
            "HF MarianMTModel": build_hf_marian, "Annotated Transformer (seeds)": build_annotated}
