"""Load test of ``aiayn serve`` on loopback, against ``aiayn translate`` on the same lines, in one run:

    python benchmarks/serve_bench.py --model runs/demo/run-de-en --src runs/demo/data/test.de \\
        [--requests 2000] [--concurrency 1 8 32] [--precision fp32]

Requests of 1-5 lines (a fixed seeded draw from --src, cycled) sent by N client threads over keep-alive
connections; each concurrency level is a fresh batch of --requests requests to one server process. Prints a
table: sentences/s, latency percentiles, errors, the server's peak RSS, and sentences/s as a share of the
CLI's (``aiayn translate --input`` over all the requested lines, its start-up time measured separately and
left out). Writes the same as JSON to benchmarks/results/serve-<date>.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
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
from run import machine  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(a: argparse.Namespace) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--model", a.model, "--port", str(port),
                             "--precision", a.precision, "--max-queue-lines", "100000", "--timeout", "600",
                             *(["--workers", str(a.workers)] if a.workers else []),
                             *(["--max-wait-ms", str(a.max_wait_ms)] if a.max_wait_ms is not None else [])],
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
    return next((float(x.split()[1]) for x in lines if x.startswith(name + " ")), 0.0)


def load(port: int, requests: list[list[str]], concurrency: int, outputs: list[list[str]] | None = None) -> dict[str, float]:
    """Send ``requests`` with ``concurrency`` client threads; latency per request, errors, wall time. The
    translations go into ``outputs`` (one list per request) when given."""
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
            body = json.dumps({"text": lines}).encode()
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/translate", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = json.loads(r.read())
                ok = r.status == 200 and len(data["translations"]) == len(lines)
                if ok and outputs is not None:
                    outputs[index] = data["translations"]
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
    """``aiayn translate`` on all the lines: sentences/s without its start-up (an empty input's run time), and its
    translations."""
    with tempfile.TemporaryDirectory() as tmp:
        src, empty = Path(tmp) / "in.txt", Path(tmp) / "empty.txt"
        src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        empty.write_text("")
        cmd = [sys.executable, "-m", "aiayn", "translate", "--model", a.model, "--precision", a.precision,
               "--output", str(Path(tmp) / "out.txt")]
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
    from aiayn.translate import Translator

    translator = Translator.load(a.model, precision=a.precision)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    served, direct = [], []
    for line in lines:
        t0 = time.perf_counter()
        conn.request("POST", "/translate", json.dumps({"text": [line]}).encode(), {"Content-Type": "application/json"})
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


def draw_requests(src: Path, n: int) -> list[list[str]]:
    """``n`` requests of 1-5 consecutive non-blank lines of ``src`` (a seeded draw of sizes; the file cycled)."""
    pool = [line for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    rng = random.Random(0)
    lines_iter = iter(pool * (n * 5 // len(pool) + 1))
    return [[next(lines_iter) for _ in range(rng.randint(1, 5))] for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True, help="sentences to draw the requests from")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--workers", type=int, default=0, help="the server's model calls at once (default: its own)")
    ap.add_argument("--max-wait-ms", type=float, help="the server's --max-wait-ms (default: its own)")
    ap.add_argument("--latency", type=int, default=0, metavar="N",
                    help="also time N one-line requests at concurrency 1 against one translate call each")
    a = ap.parse_args()
    requests = draw_requests(Path(a.src), a.requests)
    all_lines = [line for r in requests for line in r]
    cli, cli_out = cli_rate(a, all_lines)
    print(f"aiayn translate: {len(all_lines)} sentences, {cli['sentences_per_s']:.1f} sentences/s "
          f"(start-up {cli['startup_s']:.1f} s left out)", flush=True)
    rows = []
    for c in a.concurrency:
        proc, port = start_server(a)
        try:
            load(port, requests[:20], min(c, 4))                    # warm-up
            steps0, lines0 = metric(port, "aiayn_batch_lines_count"), metric(port, "aiayn_batch_lines_sum")
            outputs: list[list[str]] = [[] for _ in requests]
            r = load(port, requests, c, outputs)
            served = [t for ts in outputs for t in ts]
            r.update(concurrency=c, peak_rss_mb=peak_rss_mb(proc.pid), share_of_cli=r["sentences_per_s"] /
                     cli["sentences_per_s"], sentences_per_step=(metric(port, "aiayn_batch_lines_sum") - lines0) /
                     max(1.0, metric(port, "aiayn_batch_lines_count") - steps0),
                     identical_to_cli=sum(x.strip() == y.strip() for x, y in zip(served, cli_out, strict=False))
                     / len(cli_out))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        rows.append(r)
        print(f"concurrency {c}: {r['sentences_per_s']:.1f} sentences/s ({100 * r['share_of_cli']:.0f}% of the CLI), "
              f"p50 {r['p50_ms']:.0f} ms, p95 {r['p95_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, errors {r['errors']:.0f}, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB, {r['sentences_per_step']:.1f} sentences per decoding step, "
              f"{100 * r['identical_to_cli']:.1f}% of lines identical to the CLI's", flush=True)
    print("\n| concurrency | sentences/s | share of `aiayn translate` | p50 ms | p95 ms | p99 ms | errors | "
          "server peak RSS | sentences per step | identical to the CLI |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['sentences_per_s']:.1f} | {100 * r['share_of_cli']:.0f}% | {r['p50_ms']:.0f} | "
              f"{r['p95_ms']:.0f} | {r['p99_ms']:.0f} | {r['errors']:.0f} | {r['peak_rss_mb']:.0f} MB | "
              f"{r['sentences_per_step']:.1f} | {100 * r['identical_to_cli']:.1f}% |")
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
    out = ROOT / "benchmarks" / "results" / f"serve-{time.strftime('%Y%m%d-%H%M')}.json"
    out.write_text(json.dumps({"model": a.model, "precision": a.precision, "requests": a.requests, "workers": a.workers,
                               "max_wait_ms": a.max_wait_ms,
                               "sentences": len(all_lines), "cli": cli, "rows": rows, "latency": lat,
                               "machine": machine()}, indent=2))
    print(f"\n{out}")


if __name__ == "__main__":
    main()
