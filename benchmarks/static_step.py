"""A decoder step of static shape against today's, eager and compiled (issue 54's first measurement).

    python -m benchmarks static-step --model runs/demo/run-de-en [--rows 4 32] [--src-len 20] [--steps 46]
    python -m benchmarks static-step --model runs/demo/run-de-en --src test_2016_flickr.de --lines 300

Today's step (``Transformer.decode_step``) attends over a cache that grows by one position a step, so its shapes
change every step. The static step (``aiayn.model.static_step``) takes the self-attention cache allocated at its
length limit (``steps`` + 2 positions) and a position: earlier positions are read under a mask, the new position's
keys and values attend as one more column and are returned for the caller to write in place. Its shapes are the same
at every step, so ``torch.compile`` (Inductor) can compile it once: without and with Inductor's weight freezing.
Random source and target tokens, fp32, greedy rows (one per source); each variant decodes the same steps, and the
milliseconds per step are the best of ``--repeats`` passes. Also reported: the compile time, the largest difference
from today's log-probabilities, and whether every step's best token is the same. With ``--src``, the search itself
(``decode.compile``: steps.StaticCache, greedy or ``--beam``): ``Translator.translate`` of the first ``--lines`` lines with
compile off and on, in the CLI's batches and in batches of 4 lines, twice each (the first pass compiles), the
seconds and the lines identical to compile off. ``--pt2e`` adds the step quantized to int8 through PT2E (torchao's x86
Inductor quantizer), against today's int8 (torch.ao's dynamic quantization). ``--report``: what Inductor made of the
step at each ``--rows`` (its fused kernels, named by the operators each holds, and the calls it left to a library),
with and without frozen weights, and where a step's time goes (``torch.profiler``, µs per step by operator or
kernel) in today's step, the static step eager, and compiled. Records ``results/static-step/static-step-<date>.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402


def static_step(m: Any) -> Any:
    """The static-shape step of model ``m`` (aiayn.model.static_step, the module docstring) as a function of its
    tensors."""
    import functools

    from aiayn.decoding.steps import static_step as step

    return functools.partial(step, m)


def pt2e_int8(m: Any, args: tuple[Any, ...]) -> Any:
    """The static step of model ``m`` quantized to int8 through PT2E (torchao's x86 Inductor quantizer, dynamic
    activation scales as today's int8), exported at the shapes of ``args``, compiled with frozen weights."""
    import torch
    import torch._inductor.config as inductor
    from torchao.quantization.pt2e import move_exported_model_to_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    step = static_step(m)

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, *a: Any) -> Any:
            return step(*a)

    for p in m.parameters():
        p.requires_grad_(False)
    exported = torch.export.export(Step(), args).module()
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config(is_dynamic=True))
    prepared = prepare_pt2e(exported, quantizer)
    prepared(*args)
    converted = convert_pt2e(prepared)
    move_exported_model_to_eval(converted)
    inductor.freezing = True
    torch._dynamo.reset()
    return torch.compile(converted)


class Steps:
    """What every measurement here decodes: the fp32 model of ``model_path``, ``rows`` random sources of ``src_len``
    tokens and ``steps`` random target tokens per row, the encoder's keys and values stacked per layer, and the two
    ways to decode them: :meth:`today` (``decode_step`` on a growing cache) and :meth:`static` (a static-step function
    on a cache allocated at ``steps`` + 2 positions, written by the caller)."""

    def __init__(self, model_path: str, rows: int, src_len: int, steps: int) -> None:
        import torch

        from aiayn import Translator

        torch.manual_seed(0)
        self.model_path, self.rows, self.steps = model_path, rows, steps
        self.m = m = Translator.load(model_path, "torch", device="cpu", precision="fp32", workers=1).engine.model.eval()
        self.L, self.T = len(m.decoder), steps + 2
        self.src = torch.randint(4, m.cfg.src_vocab_size, (rows, src_len))
        self.src[:, -1] = m.cfg.eos_id
        self.toks = torch.randint(4, m.cfg.tgt_vocab_size, (steps, rows))

    def encode(self) -> None:
        """The sources' keys and values and mask (in the caller's no_grad or inference_mode)."""
        import torch

        self.start = self.m.init_cache(self.m.encode(self.src), self.src, self.T)
        self.mem_k = torch.stack([k for k, _ in self.start.memory_kv])
        self.mem_v = torch.stack([v for _, v in self.start.memory_kv])
        self.H, self.K = self.mem_k.shape[2], self.mem_k.shape[-1]

    def zeros(self) -> Any:
        import torch

        return torch.zeros(self.L, self.rows, self.H, self.T, self.K)

    def today(self, model: Any) -> Any:
        def run() -> list[Any]:
            cache, logps = model.init_cache(model.encode(self.src), self.src, self.T), []
            for i in range(self.steps):
                lp, cache = model.decode_step(self.toks[i], cache)
                logps.append(lp)
            return logps
        return run

    def static(self, fn: Any) -> Any:
        import torch

        def run() -> list[Any]:
            kc, vc, logps = self.zeros(), self.zeros(), []
            for i in range(self.steps):
                pos = torch.full((self.rows,), i)                   # every row at the same position here
                lp, k, v = fn(self.toks[i], pos, kc, vc, self.mem_k, self.mem_v, self.start.src_mask)
                kc.index_copy_(3, pos[:1], k)
                vc.index_copy_(3, pos[:1], v)
                logps.append(lp)
            return logps
        return run


def measure(model_path: str, rows: int, src_len: int, steps: int, repeats: int, pt2e: bool = False) -> dict[str, Any]:
    import torch
    import torch._inductor.config as inductor

    from aiayn import Translator

    st = Steps(model_path, rows, src_len, steps)
    m, toks = st.m, st.toks
    q8 = Translator.load(model_path, "torch", device="cpu", precision="int8", workers=1).engine.model.eval()
    out: dict[str, Any] = {"rows": rows, "src_len": src_len, "steps": steps}
    with torch.no_grad() if pt2e else torch.inference_mode():          # (torch.export takes no inference tensors)
        st.encode()
        today, static = st.today, st.static
        reference = today(m)()
        variants = {"today": today(m), "today int8": today(q8), "static, eager": static(static_step(m))}
        for name, freeze in (("static, compiled", False), ("static, compiled + frozen weights", True)):
            inductor.freezing = freeze
            torch._dynamo.reset()
            compiled = torch.compile(static_step(m), dynamic=False, fullgraph=True)
            t0 = time.perf_counter()
            variants[name] = static(compiled)
            first = variants[name]()
            out[f"{name}: compile s"] = round(time.perf_counter() - t0, 1)
            out[f"{name}: max |diff|"] = max(float((a - b).abs().max()) for a, b in zip(reference, first, strict=True))
            out[f"{name}: same best tokens"] = all(bool((a.argmax(-1) == b.argmax(-1)).all())
                                                   for a, b in zip(reference, first, strict=True))
        if pt2e:
            import torchao

            out["torchao"] = torchao.__version__
            name = "static, PT2E int8, compiled + frozen weights"
            t0 = time.perf_counter()
            variants[name] = static(pt2e_int8(m, (toks[0], torch.zeros(rows, dtype=torch.long), st.zeros(), st.zeros(),
                                                  st.mem_k, st.mem_v, st.start.src_mask)))
            first = variants[name]()
            out[f"{name}: compile s"] = round(time.perf_counter() - t0, 1)
            out[f"{name}: max |diff|"] = max(float((a - b).abs().max()) for a, b in zip(reference, first, strict=True))
            out[f"{name}: steps with the same best tokens"] = sum(
                bool((a.argmax(-1) == b.argmax(-1)).all()) for a, b in zip(reference, first, strict=True))
            out["today int8: steps with the same best tokens"] = sum(
                bool((a.argmax(-1) == b.argmax(-1)).all()) for a, b in zip(reference, variants["today int8"](),
                                                                            strict=True))
        for name, run in variants.items():
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - t0)
            out[f"{name}: ms/step"] = round(1000 * best / steps, 3)
    return out


def _profile(run: Any, steps: int, top: int = 12) -> dict[str, Any]:
    """µs per step of each operator (or compiled kernel) that ``run`` calls, the ``top`` largest and the rest."""
    from torch.profiler import ProfilerActivity, profile

    run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    # the compiled graph's own entries ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
    # wrap its kernels; only what does the work is counted
    ev = [(e.key, e.self_cpu_time_total / steps, e.count // steps) for e in prof.key_averages()
          if e.self_cpu_time_total > 0 and not e.key.startswith(("Torch-Compiled", "CompiledFunction", "## ",
                                                                 "TorchDynamo", "Pregraph"))]
    ev.sort(key=lambda x: -x[1])
    total = sum(us for _, us, _ in ev)
    rows = {k: {"us_per_step": round(us, 1), "calls_per_step": n} for k, us, n in ev[:top]}
    rows["(everything else)"] = {"us_per_step": round(sum(us for _, us, _ in ev[top:]), 1),
                                 "calls_per_step": sum(n for _, _, n in ev[top:])}
    return {"us_per_step": round(total, 1), "calls_per_step": sum(n for _, _, n in ev), "ops": rows}


def report(model_path: str, rows: int, src_len: int, steps: int) -> dict[str, Any]:
    """What Inductor fused in the static step at ``rows`` rows, what it left to library calls, the compile time, and
    the step's profile before (today's step, the static step eager) and after (compiled)."""
    import collections
    import re

    import torch
    import torch._inductor.config as inductor
    from torch._inductor.utils import run_and_get_code

    st = Steps(model_path, rows, src_len, steps)
    m, toks = st.m, st.toks
    out: dict[str, Any] = {"rows": rows, "src_len": src_len, "steps": steps}
    with torch.inference_mode():
        st.encode()
        today, static = (lambda: st.today(m)()), st.static
        out["profile: today's step"] = _profile(today, steps)
        out["profile: static, eager"] = _profile(static(static_step(m)), steps)
        inductor.cpp.enable_kernel_profile = True               # each fused kernel named in the profile
        for name, freeze in (("compiled", False), ("compiled + frozen weights", True)):
            inductor.freezing = freeze
            torch._dynamo.reset()
            fn = torch.compile(static_step(m), dynamic=False, fullgraph=True)
            t0 = time.perf_counter()
            _, code = run_and_get_code(fn, toks[0], torch.zeros(rows, dtype=torch.long), st.zeros(), st.zeros(), st.mem_k,
                                       st.mem_v, st.start.src_mask)
            out[f"{name}: compile s"] = round(time.perf_counter() - t0, 1)
            text = "\n".join(code)
            kernels = collections.Counter(k.removeprefix("cpp_fused_").rsplit("_", 1)[0]      # name_N: one kernel
                                          for k in set(re.findall(r"\b(cpp_fused_\w+_\d+)\b", text)))
            out[f"{name}: fused kernels"] = dict(sorted(kernels.items()))
            out[f"{name}: library calls"] = dict(collections.Counter(
                re.findall(r"\b(extern_kernels\.\w+|torch\.ops\.\w+\.\w+)(?:\.default)?\(", text)))
            out[f"profile: static, {name}"] = _profile(static(fn), steps)
    return out


def end_to_end(model_path: str, src: str, n: int, beam: int = 1) -> dict[str, Any]:
    import gzip

    from aiayn import Translator

    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()[:n]
    t = Translator.load(model_path, "torch", device="cpu", precision="fp32", workers=1)
    out: dict[str, Any] = {"lines": len(lines), "beam": beam}
    for name, size in (("CLI batches", len(lines)), ("4 lines a call", 4)):
        want: list[str] = []
        for attempt in ("first", "second"):
            for compile_ in (False, True):
                t0 = time.perf_counter()
                got = [x for i in range(0, len(lines), size) for x in t.translate(lines[i : i + size], beam=beam,
                                                                                   compile=compile_)]
                key = f"{name}, compile {'on' if compile_ else 'off'}, {attempt} pass: s"
                out[key] = round(time.perf_counter() - t0, 2)
                if not compile_:
                    want = got
                else:
                    out[f"{name}, {attempt} pass: identical lines"] = sum(a == b for a, b in zip(want, got, strict=True))
    return out


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks static-step", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--rows", type=int, nargs="+", default=[4, 32])
    ap.add_argument("--src-len", type=int, default=20)
    ap.add_argument("--steps", type=int, default=46)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--src", help="source lines: the search end to end instead of the step")
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--beam", type=int, default=1, help="with --src: 1 (greedy) or a beam size")
    ap.add_argument("--pt2e", action="store_true", help="also the step in int8 through PT2E (needs torchao)")
    ap.add_argument("--report", action="store_true", help="what Inductor fused, and each step's profile")
    a = ap.parse_args(argv)
    if a.report:
        import json

        results = [report(a.model, n, a.src_len, a.steps) for n in a.rows]
        for r in results:
            print(json.dumps({k: v for k, v in r.items() if not k.startswith("profile")}, indent=1))
            for k, v in r.items():
                if k.startswith("profile"):
                    print(f"{r['rows']} rows, {k}: {v['us_per_step']} µs and {v['calls_per_step']} calls per step")
        print(f"recorded {record.write('static-step', {'model': a.model, 'report': results})}")
        return
    if a.src:
        figures = end_to_end(a.model, a.src, a.lines, a.beam)
        print(figures)
        print(f"recorded {record.write('static-step', {'model': a.model, 'src': a.src, 'search': figures})}")
        return
    results = [measure(a.model, n, a.src_len, a.steps, a.repeats, a.pt2e) for n in a.rows]
    for r in results:
        print(r)
    print(f"recorded {record.write('static-step', {'model': a.model, 'results': results})}")


if __name__ == "__main__":
    main(sys.argv[1:])
