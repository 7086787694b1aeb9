"""Load test of ``aiayn serve`` on loopback, against ``aiayn translate`` on the same lines, in one run; or the
server's batcher without HTTP (``--replay``):

    python -m benchmarks serve --model runs/demo/run-de-en --src runs/demo/data/test.de \\
        [--requests 2000] [--concurrency 1 8 32] [--precision fp32] [--latency 200] \\
        [--engine torch|ctranslate2] [--client aiayn|libretranslate]
    python -m benchmarks serve --replay --model runs/demo/run-de-en --src runs/demo/data/test.de --requests 200

Requests of 1-5 lines (a fixed seeded draw from --src, cycled) sent by N client threads over keep-alive
connections; each concurrency level is a fresh batch of --requests requests to one server process. Prints a
table: sentences/s, latency percentiles, errors, the server's peak RSS, the CPU the server and this load generator
used (shares of all cores: both run on this machine), and sentences/s as a share of the
CLI's (``aiayn translate --input`` over all the requested lines, its start-up time measured separately and
left out, measured again just before each level; ``--engine``: both the server's and the CLI's). ``--client
libretranslate`` sends each request through LibreTranslate's API (a JSON batch, ``q`` a list, the run's languages).
Records it as ``results/serve/serve-<date>.json``; its ``processes`` is the server's setting (aiayn's engine on a CPU in
worker processes, its default since 094a954, unless ``--no-processes``). Records before 2026-11-27 21:40 wrote this
benchmark's old ``--processes`` flag there instead, false when not given: those since 094a954 (2026-11-26 02:04) ran
the server's default all the same, worker processes.

``--replay``: where the server's time goes, without HTTP, in this process, one decoding thread and one CPU thread,
the same requests and the run's decoding settings, each way the fastest of --rounds interleaved rounds:
``translate`` (Translator.translate over all lines: the CLI's length-sorted batches), ``static N`` (batches of N
lines in arrival order, each decoded to its end: what a scheme that does not reorder the stream reaches at best),
and ``batcher C`` (C clients, each sending its next request when the last is answered, to the server's own
batcher.Batcher: its admission policy, a source-token budget of --max-batch-tokens, and its step-level search).
Records it as ``results/serve-replay/serve-replay-<date>.json``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
import record  # noqa: E402


def family(pid: int) -> list[int]:
    """``pid`` and every process descended from it (the server's worker processes, its default)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp in parents.items() if pp == p]
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds so far of process ``pid`` and its descendants (all their threads)."""
    total = 0
    for p in family(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss_mb(pid: int) -> float:
    """The peak resident memory of the server: of its process, plus its worker processes' (a sum of peaks)."""
    total = 0
    for p in family(pid):
        try:
            total += next(int(line.split()[1]) for line in Path(f"/proc/{p}/status").read_text().splitlines()
                          if line.startswith("VmHWM:"))
        except (OSError, StopIteration):
            continue
    return total / 1024 if total else float("nan")


def start_server(a: argparse.Namespace) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--model", a.model, "--port", str(port),
                             "--precision", a.precision, "--max-queue-lines", "100000", "--timeout", "600",
                             "--cache", "0",                      # (decoding is measured, not the memory)
                             "--engine", a.engine,
                             *(["--workers", str(a.workers)] if a.workers else []),
                             *(["--max-wait-ms", str(a.max_wait_ms)] if a.max_wait_ms is not None else []),
                             *(["--no-join"] if a.no_join else []), *(["--no-processes"] if a.no_processes else [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


def metric(port: int, name: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    lines = conn.getresponse().read().decode().splitlines()
    return sum(float(x.rsplit(maxsplit=1)[1]) for x in lines if x.startswith((name + " ", name + "{")))  # all models


def body_of(lines: list[str], pair: tuple[str, str] | None) -> bytes:
    """A request for ``lines``: aiayn's API, or LibreTranslate's (``pair``: the run's languages)."""
    if pair is None:
        return json.dumps({"text": lines}).encode()
    return json.dumps({"q": lines, "source": pair[0], "target": pair[1]}).encode()


def answer_of(data: dict[str, object]) -> list[str]:
    return list(data["translations"] if "translations" in data else data["translatedText"])  # type: ignore[call-overload]


def load(port: int, requests: list[list[str]], concurrency: int, outputs: list[list[str]] | None = None,
         pair: tuple[str, str] | None = None) -> dict[str, float]:
    """Send ``requests`` with ``concurrency`` client threads; latency per request, errors, wall time. The
    translations go into ``outputs`` (one list per request) when given. ``pair``: through LibreTranslate's API."""
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    todo = iter(enumerate(requests))

    def client() -> None:
        nonlocal errors
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            with lock:
                index, lines = next(todo, (-1, None))
            if lines is None:
                return
            body = body_of(lines, pair)
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/translate", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = json.loads(r.read())
                ok = r.status == 200 and len(answer_of(data)) == len(lines)
                if ok and outputs is not None:
                    outputs[index] = answer_of(data)
            except (OSError, ValueError, KeyError):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            with lock:
                latencies.append(time.perf_counter() - t0)
                errors += not ok

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    q = statistics.quantiles(latencies, n=100)
    return {"seconds": seconds, "sentences_per_s": sum(len(r) for r in requests) / seconds,
            "p50_ms": 1000 * q[49], "p95_ms": 1000 * q[94], "p99_ms": 1000 * q[98], "errors": errors}


def cli_rate(a: argparse.Namespace, lines: list[str]) -> tuple[dict[str, float], list[str]]:
    """``aiayn translate`` on all the lines: sentences/s without its start-up (an empty input's run time, after one
    untimed run), and its translations."""
    with tempfile.TemporaryDirectory() as tmp:
        src, empty = Path(tmp) / "in.txt", Path(tmp) / "empty.txt"
        src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        empty.write_text("")
        cmd = [sys.executable, "-m", "aiayn", "translate", "--model", a.model, "--precision", a.precision,
               "--engine", a.engine, "--output", str(Path(tmp) / "out.txt")]
        # once untimed: a first use may convert the model for its engine (ctranslate2: minutes, cached in the run)
        subprocess.run([*cmd, "--input", str(empty)], check=True, stderr=subprocess.DEVNULL)
        t0 = time.perf_counter()
        subprocess.run([*cmd, "--input", str(empty)], check=True, stderr=subprocess.DEVNULL)
        startup = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([*cmd, "--input", str(src)], check=True, stderr=subprocess.DEVNULL)
        total = time.perf_counter() - t0
        out = (Path(tmp) / "out.txt").read_text(encoding="utf-8").split("\n")[: len(lines)]
    return {"startup_s": startup, "seconds": total - startup, "sentences_per_s": len(lines) / (total - startup)}, out


def latency(a: argparse.Namespace, port: int, lines: list[str]) -> dict[str, float]:
    """Concurrency 1, one line per request: the server's latency against one ``Translator.translate`` call for the
    same line in this process (the library call the CLI makes, without its start-up), alternating line by line so
    that both see the same moment of a shared VM."""
    sys.path.insert(0, str(ROOT))
    from aiayn import Translator

    translator = Translator.load(a.model, a.engine, precision=a.precision)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    served, direct = [], []
    for line in lines:
        t0 = time.perf_counter()
        conn.request("POST", "/translate", body_of([line], pair_of(a)), {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        served.append(time.perf_counter() - t0)
        assert r.status == 200, r.status
        t0 = time.perf_counter()
        translator.translate([line])
        direct.append(time.perf_counter() - t0)
    ratios = sorted(s / d for s, d in zip(served, direct, strict=True))
    return {"lines": len(lines), "serve_p50_ms": 1000 * statistics.median(served),
            "translate_p50_ms": 1000 * statistics.median(direct),
            "p50_ratio": statistics.median(served) / statistics.median(direct),
            "median_per_line_ratio": statistics.median(ratios)}


def pair_of(a: argparse.Namespace) -> tuple[str, str] | None:
    """The run's languages when the load goes through LibreTranslate's API, else None."""
    if a.client != "libretranslate":
        return None
    sys.path.insert(0, str(ROOT))
    from aiayn.rundir import RunDir

    langs = RunDir.locate(a.model)[0].languages()
    if langs is None:
        raise SystemExit(f"--client libretranslate: {a.model} records no languages")
    return langs


def draw_requests(src: Path, n: int) -> list[list[str]]:
    """``n`` requests of 1-5 consecutive non-blank lines of ``src`` (a seeded draw of sizes; the file cycled)."""
    pool = [line for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    rng = random.Random(0)
    lines_iter = iter(pool * (n * 5 // len(pool) + 1))
    return [[next(lines_iter) for _ in range(rng.randint(1, 5))] for _ in range(n)]


def replay(a: argparse.Namespace, requests: list[list[str]]) -> None:
    """--replay: the CLI's batches, arrival-order batches and the server's batcher, one thread, no HTTP; recorded."""
    import asyncio

    import torch
    from prometheus_client import CollectorRegistry

    from aiayn import Translator
    from aiayn.decoding.search import beam_search
    from aiayn.engines.torch import source_batch, source_ids
    from aiayn.serving.batcher import Batcher, DecodeMetrics, Limits

    torch.set_num_threads(1)
    t = Translator.load(a.model, "torch", device="cpu", precision=a.precision, workers=1)
    lines = [line for r in requests for line in r]

    def static(size: int) -> list[str]:
        out = []
        with torch.inference_mode():
            for j in range(0, len(lines), size):
                seqs = [source_ids(t.engine.model, ids) for ids in t.engine.vocab.src.encode(lines[j : j + size])]
                batch = source_batch(t.engine.model, seqs, t.engine.device)
                out += [h[0].tokens for h in beam_search(t.engine.model, batch, t.engine.decode)]
        return t.engine.detokenize(out)

    def batcher(clients: int) -> list[str]:
        limits = Limits(workers=1, max_batch_tokens=a.max_batch_tokens, max_wait_ms=0.0, max_queue_lines=10**9,
                        timeout_s=10**6)
        out: dict[int, list[str]] = {}

        async def run() -> None:
            b, todo = Batcher(t.engine, limits, DecodeMetrics(CollectorRegistry()).model("bench")), iter(enumerate(requests))

            async def client() -> None:
                for i, r in todo:
                    got = await b.translate(t.engine.encode(r), t.engine.decode)
                    out[i] = t.engine.detokenize([hs[0].tokens for hs in got])

            await asyncio.gather(*(client() for _ in range(clients)))
            b.close()

        asyncio.run(run())
        return [line for i in range(len(requests)) for line in out[i]]

    ways = {"translate": lambda: t.translate(lines)}
    for n in a.static:
        ways[f"static {n}"] = lambda n=n: static(n)
    for c in a.concurrency:
        ways[f"batcher {c}"] = lambda c=c: batcher(c)
    best: dict[str, float] = {}
    outputs: dict[str, list[str]] = {}
    for _ in range(a.rounds):
        for name, fn in ways.items():
            t0 = time.perf_counter()
            outputs[name] = fn()
            best[name] = max(best.get(name, 0.0), len(lines) / (time.perf_counter() - t0))
    rows = [{"way": k, "sentences_per_s": round(v, 1), "share_of_translate": round(v / best["translate"], 3),
             "identical_to_translate": sum(x == y for x, y in zip(outputs[k], outputs["translate"], strict=True))}
            for k, v in best.items()]
    print(f"{len(lines)} lines in {len(requests)} requests, the run's decoding settings, one thread")
    print("| way | sentences/s | share of translate | identical lines |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['way']} | {r['sentences_per_s']:.1f} | {100 * r['share_of_translate']:.0f}% | "
              f"{r['identical_to_translate']}/{len(lines)} |")
    out = record.write("serve-replay", {"model": a.model, "src": a.src, "precision": a.precision, "lines": len(lines),
                                         "requests": len(requests), "max_batch_tokens": a.max_batch_tokens,
                                         "rounds": a.rounds, "rows": rows})
    print(f"recorded in {out}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True, help="sentences to draw the requests from")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--engine", choices=("torch", "ctranslate2"), default="torch", help="the server's and the CLI's")
    ap.add_argument("--client", choices=("aiayn", "libretranslate"), default="aiayn",
                    help="the API the load goes through")
    ap.add_argument("--workers", type=int, default=0, help="the server's decoding threads (default: its own)")
    ap.add_argument("--max-wait-ms", type=float, help="the server's --max-wait-ms (default: its own)")
    ap.add_argument("--no-join", action="store_true", help="the server's --no-join: no sentence joins a running batch")
    ap.add_argument("--no-processes", action="store_true",
                    help="the server's --no-processes: threads of its process instead of its worker processes")
    ap.add_argument("--latency", type=int, default=0, metavar="N",
                    help="also time N one-line requests at concurrency 1 against one translate call each")
    ap.add_argument("--replay", action="store_true", help="the batcher without HTTP (see above)")
    ap.add_argument("--static", type=int, nargs="*", default=[48, 96], help="--replay: arrival-order batch sizes")
    ap.add_argument("--max-batch-tokens", type=int, default=6000, help="--replay: the batcher's source-token budget")
    ap.add_argument("--rounds", type=int, default=2, help="--replay: interleaved rounds, the fastest kept")
    a = ap.parse_args(argv)
    requests = draw_requests(Path(a.src), a.requests)
    if a.replay:
        replay(a, requests)
        return
    all_lines = [line for r in requests for line in r]
    rows, clis = [], []
    for c in a.concurrency:      # the CLI just before each level: a shared VM's speed drifts within minutes
        cli, cli_out = cli_rate(a, all_lines)
        print(f"aiayn translate: {len(all_lines)} sentences, {cli['sentences_per_s']:.1f} sentences/s "
              f"(start-up {cli['startup_s']:.1f} s left out)", flush=True)
        clis.append(cli)
        rows.append(load_level(a, requests, c, cli, cli_out))
    print("\n| concurrency | sentences/s | `aiayn translate` just before | share of it | p50 ms | p95 ms | p99 ms | "
          "errors | server peak RSS | sentences per step | identical to the CLI | CPU: server / load generator |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r, cli in zip(rows, clis, strict=True):
        print(f"| {r['concurrency']} | {r['sentences_per_s']:.1f} | {cli['sentences_per_s']:.1f} | "
              f"{100 * r['share_of_cli']:.0f}% | {r['p50_ms']:.0f} | "
              f"{r['p95_ms']:.0f} | {r['p99_ms']:.0f} | {r['errors']:.0f} | {r['peak_rss_mb']:.0f} MB | "
              f"{r['sentences_per_step']:.1f} | {100 * r['identical_to_cli']:.1f}% | "
              f"{100 * r['server_cpu_share']:.0f}% / {100 * r['client_cpu_share']:.0f}% |")
    lat = None
    if a.latency:
        proc, port = start_server(a)
        try:
            load(port, requests[:20], 1)                            # warm-up
            lat = latency(a, port, all_lines[: a.latency])
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        print(f"\nconcurrency 1, {lat['lines']} one-line requests: p50 {lat['serve_p50_ms']:.1f} ms served, "
              f"{lat['translate_p50_ms']:.1f} ms by one translate call = {lat['p50_ratio']:.2f}x "
              f"(median of the per-line ratios {lat['median_per_line_ratio']:.2f}x)")
    out = record.write("serve", {"model": a.model, "precision": a.precision, "engine": a.engine, "client": a.client,
                                  "requests": a.requests,
                                  "workers": a.workers, "max_wait_ms": a.max_wait_ms, "join": not a.no_join,
                                  "processes": not a.no_processes,     # the server's own setting (see above)
                                  "sentences": len(all_lines),
                                  "cli": clis, "rows": rows, "latency": lat})
    print(f"\nrecorded in {out}")


def load_level(a: argparse.Namespace, requests: list[list[str]], c: int, cli: dict[str, float],
               cli_out: list[str]) -> dict[str, float]:
    """One concurrency level against a fresh server process: the load's figures, its answers against the CLI's."""
    proc, port = start_server(a)
    try:
        load(port, requests[:20], min(c, 4))                    # warm-up
        steps0, lines0 = metric(port, "aiayn_batch_lines_count"), metric(port, "aiayn_batch_lines_sum")
        outputs: list[list[str]] = [[] for _ in requests]
        cpu0, server0 = time.process_time(), cpu_seconds(proc.pid)
        r = load(port, requests, c, outputs, pair_of(a))
        cores = len(os.sched_getaffinity(0))
        served = [t for ts in outputs for t in ts]
        r.update(client_cpu_share=(time.process_time() - cpu0) / (r["seconds"] * cores),
                 server_cpu_share=(cpu_seconds(proc.pid) - server0) / (r["seconds"] * cores))
        r.update(concurrency=c, peak_rss_mb=peak_rss_mb(proc.pid), share_of_cli=r["sentences_per_s"] /
                 cli["sentences_per_s"], sentences_per_step=(metric(port, "aiayn_batch_lines_sum") - lines0) /
                 max(1.0, metric(port, "aiayn_batch_lines_count") - steps0),
                 identical_to_cli=sum(x.strip() == y.strip() for x, y in zip(served, cli_out, strict=False))
                 / len(cli_out))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    print(f"concurrency {c}: {r['sentences_per_s']:.1f} sentences/s ({100 * r['share_of_cli']:.0f}% of the CLI), "
          f"p50 {r['p50_ms']:.0f} ms, p95 {r['p95_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, errors {r['errors']:.0f}, "
          f"peak RSS {r['peak_rss_mb']:.0f} MB, {r['sentences_per_step']:.1f} sentences per decoding step, "
          f"{100 * r['identical_to_cli']:.1f}% of lines identical to the CLI's; CPU used: server "
          f"{100 * r['server_cpu_share']:.0f}%, this load generator {100 * r['client_cpu_share']:.0f}%", flush=True)
    return r


if __name__ == "__main__":
    main()
