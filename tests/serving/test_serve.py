"""aiayn serve: real server processes on 127.0.0.1, a real HTTP client. Round trips, every limit, 64 concurrent
requests batched together, SIGTERM with requests in flight, the API key, and the page in a real browser.

Most tests serve conftest's ``copy_model``, which copies its input: every line has its own translation, and the right
one is known, so a request decoded wrongly beside others (a joined row's position, its masks) is seen here. The
limit and shutdown tests serve the tiny legacy model, whose long outputs keep requests in flight."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from aiayn import Translator
from aiayn.config import DecodeConfig

from ..helpers import KEY, LEGACY, ROOT, Server, chrome, cli_error, copy_lines, open_chrome, wait_for, workers_of

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def server(copy_model: Path) -> Iterator[Server]:
    # threads with step-level batching (--no-processes): what most of this module's tests look into
    s = Server("--engine", "torch", "--no-processes", "--max-lines", "64", "--max-chars", "500", "--max-body-bytes", "16384",
               "--max-wait-ms", "30", "--api-key", KEY, model=copy_model)
    yield s
    assert s.stop() == 0
    assert "Traceback" not in s.output(), s.output()[-3000:]          # no request ever failed inside the server


AWKWARD = ["Ein Mann fährt Fahrrad.", "", "   ", "日本語のテキスト、そして中文。", "🙂🚲 Emoji 👍🏽", "x" * 290,
           "\u0000\u0007 control \u2028 separator \ufffd", "<script>alert(1)</script>", "ein\tTab", "Zwei Hunde."]


def test_round_trip_n_lines_in_n_out(server: Server) -> None:
    status, _, body = server.post("/translate", {"text": AWKWARD, "beam": 2}, KEY)
    assert status == 200, body
    out = body["translations"]
    assert len(out) == len(AWKWARD) and all(isinstance(t, str) and "\n" not in t for t in out)
    assert out[1] == out[2] == ""                                    # blank lines give blank lines
    status, _, body = server.post("/translate", {"text": ["Ein Hund.", ""], "beam": 3, "nbest": 2}, KEY)
    assert status == 200 and [len(x) for x in body["translations"]] == [2, 2]
    assert {"text", "score", "confidence"} == set(body["translations"][0][0])
    assert all(0 <= h["confidence"] <= 1 for hs in body["translations"] for h in hs)
    assert server.post("/translate", {"text": []}, KEY)[2] == {"translations": [], "confidence": []}


def test_every_limit_is_a_clear_json_error(server: Server) -> None:
    def error(status: int, *args: Any, **kw: Any) -> str:
        got, headers, body = server.post(*args, **kw) if args else server.request(**kw)
        assert got == status, body
        assert headers["content-type"].startswith("application/json") and set(body) == {"error"}
        return str(body["error"])

    assert "65 lines" in error(413, "/translate", {"text": ["a"] * 65}, KEY)
    assert "501 characters in one request; at most 500" in error(413, "/translate", {"text": ["a", "b" * 500]}, KEY)
    big = json.dumps({"text": ["a" * 290] * 60}).encode()
    assert "larger than 16384 bytes" in error(413, method="POST", path="/translate", body=big,
                                              headers={"X-API-Key": KEY})
    assert "larger than 16384 bytes" in error(413, method="POST", path="/translate", body=big,
                                              headers={"X-API-Key": KEY}, chunked=True)
    assert "Invalid request: malformed JSON" in error(400, method="POST", path="/translate", body=b'{"text": ["a"',
                                     headers={"X-API-Key": KEY})
    assert "unknown field 'beams'" in error(422, "/translate", {"text": ["a"], "beams": 2}, KEY)
    assert "beam: Input should be a valid integer" in error(422, "/translate", {"text": ["a"], "beam": "2"}, KEY)
    assert "text: Input should be a valid array" in error(422, "/translate", {"text": "a"}, KEY)
    assert "text.0: Input should be a valid string" in error(422, "/translate", {"text": [1]}, KEY)
    assert "beam: Input should be less than or equal to 16" in error(422, "/translate", {"text": ["a"], "beam": 99}, KEY)
    assert "nbest=3 cannot exceed beam=2" in error(422, "/translate", {"text": ["a"], "beam": 2, "nbest": 3}, KEY)
    # the API key: required everywhere but /health and the page
    assert "API key" in error(401, "/translate", {"text": ["a"]})
    assert "API key" in error(401, "/translate", {"text": ["a"]}, "wrong")
    assert "API key" in error(401, method="GET", path="/info")
    assert server.request("GET", "/health")[0] == 200
    assert server.request("GET", "/")[0] == 200
    assert server.request("GET", "/info", headers={"Authorization": f"Bearer {KEY}"})[0] == 200


@pytest.fixture(scope="module")
def cli(copy_model: Path) -> Translator:
    """What ``aiayn translate`` gives with the served model: the answers' oracle."""
    return Translator.load(copy_model, "torch", device="cpu", workers=1)


def test_concurrent_requests_are_answered_correctly_and_batched(server: Server, cli: Translator) -> None:
    """64 one-line requests at once, greedy and beam 4 (128 in all): each decoded in a running batch beside others,
    joining it between steps, and answered as ``aiayn translate`` translates the line."""
    lines = copy_lines(64)
    requests = [{"text": [line], "beam": beam} for line in lines for beam in (1, 4)]
    want = {beam: dict(zip(lines, cli.translate(lines, beam=beam), strict=True)) for beam in (1, 4)}
    # each line has its own translation (greedy: its copy), so a line decoded wrongly beside others shows
    assert sum(want[1][line] == line for line in lines) >= 0.9 * len(lines)
    assert all(len(set(want[beam].values())) >= 0.9 * len(lines) for beam in (1, 4))
    before_batches = server.metric("aiayn_batch_lines_count", KEY)
    before_lines = server.metric("aiayn_batch_lines_sum", KEY)
    with ThreadPoolExecutor(64) as pool:
        answers = list(pool.map(lambda r: server.post("/translate", r, KEY), requests))
    assert [status for status, _, _ in answers] == [200] * len(requests)
    got = [body["translations"][0] for _, _, body in answers]
    wrong = [(r["text"][0], r["beam"], g) for r, g in zip(requests, got, strict=True) if g != want[r["beam"]][r["text"][0]]]
    assert not wrong, f"{len(wrong)} of {len(requests)} differ from aiayn translate's, e.g. {wrong[:2]}"
    steps = server.metric("aiayn_batch_lines_count", KEY) - before_batches
    per_step = (server.metric("aiayn_batch_lines_sum", KEY) - before_lines) / steps
    assert per_step > 4, f"{len(requests)} concurrent one-line requests: {per_step:.1f} sentences per decoding step"


def test_a_request_of_many_lines_of_many_lengths_is_the_lines_alone(server: Server, cli: Translator) -> None:
    """Multi-line requests of short and long lines, sent 15 ms apart so that most join a running search, each line's
    2-best list as ``aiayn translate --nbest 2`` gives it, scores included: the sources of different lengths share a
    batch, padded (the padding masked: a padding key that is not masked changes the scores only), and leave it at
    different steps."""
    sizes = (6, 6, 1, 3, 2, 6, 5, 6)
    # the two first requests hold the longest lines, so that both decoding threads are busy while the rest arrive
    lines = sorted(copy_lines(sum(sizes), seed=8), key=lambda line: -len(line))
    chunks = [lines[sum(sizes[:i]) : sum(sizes[: i + 1])] for i in range(len(sizes))]
    # min_len 40: every search runs at least 40 steps, so that on a fast CPU too the later requests come while both
    # decoding threads are busy (an idle one waits --max-wait-ms 30 for a burst); if none joined, the burst is sent
    # again with another gap (the answers must be right every time)
    options = {"beam": 4, "nbest": 2, "min_len": 40}
    for gap in (0.015, 0.03, 0.005):
        joined = server.metric("aiayn_joined_lines_total", KEY)
        with ThreadPoolExecutor(len(chunks)) as pool:
            futures = []
            for c in chunks:
                futures.append(pool.submit(server.post, "/translate", {"text": c, **options}, KEY))
                time.sleep(gap)
            answers = [f.result() for f in futures]
        if server.metric("aiayn_joined_lines_total", KEY) > joined:
            break
    assert server.metric("aiayn_joined_lines_total", KEY) > joined, "no line joined a running search"
    got = [t for _, _, body in answers for t in body["translations"]]
    want = cli.engine.translate_hypotheses(lines, **options)
    assert [[h["text"] for h in hs] for hs in got] == [cli.engine.detokenize([h.tokens for h in hs]) for hs in want]
    for g, w in zip(got, want, strict=True):
        assert [h["score"] for h in g] == pytest.approx([h.score for h in w], abs=2e-4), (g, w)
    assert len({g[0]["text"] for g in got}) >= 0.9 * len(lines)                # each line its own translation


def test_info_and_metrics(server: Server) -> None:
    _, _, info = server.request("GET", "/info", headers={"X-API-Key": KEY})
    assert info["languages"] == ["in", "out"] and info["parameters"] > 0 and info["model"]["d_model"] == 64
    assert info["decode"]["beam"] == 1 and "api_key" not in info["limits"]              # aiayn/configs/copy.yaml
    _, _, text = server.request("GET", "/metrics", headers={"X-API-Key": KEY})
    for name in ("aiayn_requests_total", "aiayn_request_seconds_bucket", "aiayn_batch_lines_bucket",
                 "aiayn_target_tokens_total", "aiayn_decoding_steps_total", "aiayn_queue_lines",
                 "aiayn_confidence_bucket", "aiayn_confidence_sum"):
        assert name in text.decode()
    assert 'aiayn_requests_total{path="/translate",status="401"}' in text.decode()


def test_attention_for_the_page(server: Server) -> None:
    status, _, a = server.post("/attention", {"text": "a b c d"}, KEY)
    assert status == 200 and a["translation"] == "a b c d"
    S, T = len(a["source"]), len(a["target_out"])
    assert a["source"][-1] == "</s>" and a["target_in"][0] == "<s>" and len(a["target_in"]) == T
    assert len(a["cross"]) == 2 and len(a["cross"][0]) == 4                          # layers x heads
    assert all(len(row) == S and abs(sum(row) - 1) < 1e-4 for row in a["cross"][0][0])   # T x S, rows sum to 1
    assert len(a["encoder"][0][0]) == S and len(a["decoder_self"][0][0]) == T


def test_a_full_queue_and_a_slow_request_are_refused_in_time() -> None:
    # --timeout 0.01: a request of these 3 lines (beam 16, min_len: all of the tiny model's 127 positions, a step
    # costing well over 0.1 ms) cannot be done in time, however fast the machine; 0.2 s once let one through
    s = Server("--no-processes", "--max-queue-lines", "3", "--max-wait-ms", "300", "--timeout", "0.01",
               "--max-len-b-cap", "1024")
    try:
        slow = {"text": ["Ein Mann fährt mit dem Fahrrad."] * 3, "beam": 16, "max_len_b": 1024, "min_len": 1000}
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: s.post("/translate", slow), range(8)))
        statuses = sorted(status for status, _, _ in answers)
        assert 503 in statuses and 504 in statuses and set(statuses) <= {503, 504}, statuses
        busy = next(a for a in answers if a[0] == 503)
        assert busy[1]["retry-after"] == "1" and "busy" in busy[2]["error"]
        late = next(a for a in answers if a[0] == 504)
        assert "longer than 0.01 s" in late[2]["error"]
        assert s.request("GET", "/health")[0] == 200                 # and the server goes on
    finally:
        assert s.stop() == 0


def test_sigterm_answers_the_requests_in_flight_then_exits_0() -> None:
    s = Server("--engine", "torch", "--no-processes", "--max-wait-ms", "5", "--workers", "1")
    # min_len: every sentence decodes 250+ steps, so that none is done before all 12 requests are in flight
    payload = {"text": ["Ein Mann fährt mit dem Fahrrad über eine Brücke."] * 4, "beam": 8, "max_len_b": 256,
               "min_len": 250}
    done: list[float] = []

    def post() -> tuple[int, dict[str, str], Any]:
        answer = s.post("/translate", payload)
        done.append(time.monotonic())
        return answer

    with ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(post) for _ in range(12)]
        wait_for(lambda: s.metric("aiayn_requests_in_flight") >= 12, "12 requests in flight")   # all accepted
        in_flight = s.metric("aiayn_requests_in_flight")
        signalled = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        answers = [f.result() for f in futures]
    assert in_flight >= 12 and not [t for t in done if t < signalled], "the requests were not in flight at SIGTERM"
    assert [status for status, _, _ in answers] == [200] * 12
    assert all(len(body["translations"]) == 4 for _, _, body in answers)
    assert s.proc.wait(timeout=60) == 0
    with pytest.raises(OSError):
        s.request("GET", "/health", timeout=2)                       # no longer accepting


def test_a_short_request_joins_a_running_batch_and_is_answered_first() -> None:
    """Step-level batching: with one decoding thread busy on a long request, a short one that arrives later joins
    the running batch between steps and is answered while the long one is still decoding."""
    s = Server("--engine", "torch", "--no-processes", "--workers", "1", "--max-wait-ms", "0")
    try:
        long = {"text": ["Ein Mann fährt mit dem Fahrrad über eine Brücke."] * 4, "beam": 8, "max_len_b": 256,
                "min_len": 250}
        done: dict[str, float] = {}

        def post(name: str, payload: dict[str, Any]) -> int:
            status = s.post("/translate", payload)[0]
            done[name] = time.monotonic()
            return status

        with ThreadPoolExecutor(2) as pool:
            slow = pool.submit(post, "long", long)
            wait_for(lambda: s.metric("aiayn_decoding_steps_total") >= 5, "the long request to decode 5 steps")
            short = pool.submit(post, "short", {"text": ["Ein Hund."], "beam": 8, "max_len_b": 2})
            assert short.result() == 200 and slow.result() == 200
        assert done["short"] < done["long"], "the short request waited for the long one"
    finally:
        assert s.stop() == 0


@pytest.mark.skipif(chrome() is None, reason="no Chromium + chromedriver here: `make browser` installs them (Debian: "
                    "apt-get install chromium chromium-driver)")
def test_the_page_in_a_real_browser(server: Server) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = open_chrome()
    try:
        d.get(f"http://127.0.0.1:{server.port}/")
        d.find_element(By.XPATH, "//summary[text()='API key']").click()
        d.find_element(By.ID, "api-key").send_keys(KEY)
        source = d.find_element(By.ID, "source")
        source.clear()
        source.send_keys("a b c d e\nj i h g")
        d.find_element(By.ID, "translate").click()
        # (the page redraws its list as answers come: an element read mid-redraw is stale, and read again)
        wait = WebDriverWait(d, 60, ignored_exceptions=(StaleElementReferenceException,))
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#translations li")) == 2)
        items = d.find_elements(By.CSS_SELECTOR, "#translations li")
        assert "a b c d e" in items[0].text and "j i h g" in items[1].text
        for item in items:                      # each line's confidence shown, and a line under one half marked
            sure = float(item.get_attribute("data-confidence"))
            assert 0.0 <= sure <= 1.0
            assert f"{round(100 * sure)}%" in item.find_element(By.CSS_SELECTOR, ".confidence").text
            assert ("unsure" in item.get_attribute("class").split()) == (sure < 0.5)
        d.find_element(By.XPATH, "//summary[text()='glossary']").click()     # c must come out as "j j j"
        d.find_element(By.ID, "glossary").send_keys("c = j j j")
        d.find_element(By.ID, "translate").click()
        wait.until(lambda d: "j j j" in d.find_elements(By.CSS_SELECTOR, "#translations li")[0].text)
        items = d.find_elements(By.CSS_SELECTOR, "#translations li")
        assert "j j j" not in items[1].text and "j i h g" in items[1].text
        item = items[0]
        item.click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#grid canvas.heatmap"))
        assert len(d.find_elements(By.CSS_SELECTOR, "#grid canvas.heatmap")) == 8      # 2 layers x 4 heads
        coloured = d.execute_script(
            "const c = document.getElementById('zoom-canvas'); const px = c.getContext('2d')"
            ".getImageData(0, 0, c.width, c.height).data; let n = 0;"
            "for (let i = 0; i < px.length; i += 4) if (px[i] < 200 && px[i + 2] > 200) n++; return n;")
        assert coloured > 50                                          # a heatmap was drawn
        assert d.find_element(By.ID, "status").get_attribute("class") != "error"
    finally:
        d.quit()


def test_a_lone_decoding_thread_keeps_its_share_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the other decoding threads idle, a busy one still decodes with its own share of the intra-op threads:
    given them all, PyTorch's matrix products from a thread other than the main one ran no faster and a lone request
    25-55% slower (batcher.py's docstring)."""
    import asyncio

    import torch
    from prometheus_client import CollectorRegistry

    from aiayn.serving.batcher import Batcher, DecodeMetrics, Limits

    translator = Translator.load(LEGACY, "torch", device="cpu")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    set_to: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", set_to.append)

    async def lone_requests() -> None:
        limits = Limits(workers=2, max_batch_tokens=4000, max_wait_ms=0.0, max_queue_lines=100, timeout_s=60)
        batcher = Batcher(translator.engine, limits, DecodeMetrics(CollectorRegistry()).model("test"))
        try:
            for line in ("Ein Hund.", "Zwei Katzen schlafen."):
                assert len(await batcher.translate(translator.engine.encode([line]), translator.engine.decode)) == 1
        finally:
            batcher.close()

    asyncio.run(lone_requests())
    assert set_to and set(set_to) == {2}, f"intra-op threads set to {set_to}, not 4 // 2 workers"


def test_constraints_and_a_glossary_in_requests_running_beside_others(server: Server, cli: Translator) -> None:
    """Requests with constraints or a glossary decode in the same searches as requests without: each answer is what
    Translator gives the request alone, and the phrases are in it; what cannot be kept is a 422 naming it."""
    lines = copy_lines(24, seed=11)
    asks: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        ask: dict[str, Any] = {"text": [line], "beam": 3}
        if i % 4 == 1:
            ask["constraints"] = [["j j j"]]
        elif i % 4 == 2:
            ask["glossary"] = {line.split()[0]: "i i i"}
        elif i % 4 == 3:                       # words the plain copy holds: keep_plain keeps it
            ask["constraints"] = [[" ".join(line.split()[1:3])]]
        asks.append(ask)
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda a: server.post("/translate", a, KEY), asks))
    for ask, (status, _, body) in zip(asks, answers, strict=True):
        assert status == 200, body
        phrases = ask.get("constraints", [[*ask.get("glossary", {}).values()]])[0] or None
        assert body["translations"] == cli.translate(ask["text"], beam=3, constraints=[phrases]), ask
        assert all(p in body["translations"][0] for p in phrases or [])
    for ask, message in (({"constraints": [["j"]], "beam": 1}, "beam >= 2"),
                         ({"constraints": [["j"], ["i"]]}, "2 entries for 1 lines"),
                         ({"constraints": [[""]], "beam": 2}, "non-empty string")):
        status, _, body = server.post("/translate", {"text": ["a b c"], **ask}, KEY)
        assert status == 422 and message in body["error"], body


def test_alignments_in_a_request(server: Server, cli: Translator) -> None:
    lines = ["a b c d", "", "j j i"]
    status, _, body = server.post("/translate", {"text": lines, "alignments": True}, KEY)
    assert status == 200, body
    assert list(zip(body["translations"], body["alignments"], strict=True)) == cli.translate_aligned(lines)
    status, _, body = server.post("/translate", {"text": lines, "alignments": True, "beam": 2, "nbest": 2}, KEY)
    assert status == 200 and [len(x) for x in body["alignments"]] == [2, 2, 2] and body["alignments"][1] == ["", ""]


@pytest.mark.ci      # CI's (make test-ci): a server's worker processes, one killed, 7 s
def test_worker_processes_answer_as_the_cli_and_one_that_dies_is_replaced(copy_model: Path, cli: Translator) -> None:
    """--processes: batches decoded by 2 worker processes, each with its copy of the model, which the server's own
    process never loads (nor PyTorch); every answer (greedy and beam, 2-best with scores, constraints) is aiayn
    translate's; a worker killed fails only the batch it had, with a
    500 naming it, and is started again; SIGTERM stops them all."""
    s = Server("--engine", "torch", "--processes", "--workers", "2", "--cache", "0",     # (each batch decoded)
               model=copy_model)
    try:
        workers = workers_of(s.proc.pid)
        assert len(workers) == 2, workers
        # the model went straight to the workers: the server's own process has not loaded PyTorch
        assert "libtorch" not in Path(f"/proc/{s.proc.pid}/maps").read_text()
        lines = copy_lines(24, seed=9)
        asks: list[dict[str, Any]] = [{"text": lines[i : i + 3], "beam": b, "nbest": b}
                                      for i in range(0, 24, 3) for b in (1, 2)]
        asks.append({"text": [lines[0]], "beam": 3, "constraints": [["j j j"]]})
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda a: s.post("/translate", a), asks))
        for ask, (status, _, body) in zip(asks, answers, strict=True):
            assert status == 200, (body, s.output()[-3000:])
            want = cli.engine.translate_hypotheses(ask["text"], beam=ask["beam"], nbest=ask.get("nbest", 1),
                                            constraints=ask.get("constraints"))
            got = body["translations"]
            if ask.get("nbest", 1) == 1:
                assert got == cli.engine.detokenize([hs[0].tokens for hs in want]), ask
            else:
                texts = [cli.engine.detokenize([h.tokens for h in hs]) for hs in want]
                assert [[h["text"] for h in hs] for hs in got] == texts
                assert [h["score"] for hs in got for h in hs] == pytest.approx(
                    [h.score for hs in want for h in hs], abs=2e-4)
        assert "j j j" in answers[-1][2]["translations"][0]
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        statuses = []
        for _ in range(4):
            status, _, body = s.post("/translate", {"text": [lines[1]], "beam": 1})
            statuses.append(status)
            assert status == 200 and body["translations"] == cli.translate([lines[1]], beam=1) or \
                status == 500 and "decoding worker process" in body["error"] and "died" in body["error"], body
        assert statuses == [500, 500, 200, 200], statuses          # each dead worker fails the one batch it got
        replaced = workers_of(s.proc.pid)
        assert len(replaced) == 2 and not set(replaced) & set(workers)
    finally:
        assert s.stop() == 0
    assert not [p for p in replaced if Path(f"/proc/{p}").exists()], "a worker process outlived the server"


def test_a_free_worker_takes_its_share_of_the_waiting_requests() -> None:
    """Whole batches (CTranslate2, --processes): 4 requests of 10 source tokens each wait for 2 free workers: each
    worker gets 2 (its share of the 40 tokens), not the first all 4 and the second none."""
    from prometheus_client import CollectorRegistry

    from aiayn.serving.batcher import DecodeMetrics, Job, Limits, WholeBatcher

    class Engine:
        workers = 2

        def close(self) -> None:
            pass

    batches: list[list[int]] = []

    async def run() -> None:
        b = WholeBatcher(Engine(), Limits(workers=2, max_batch_tokens=6000, max_wait_ms=0, max_queue_lines=100,
                                          timeout_s=10), DecodeMetrics(CollectorRegistry()).model("test"))
        b._decode = lambda batch: batches.append([j.tokens for j in batch])  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        for _ in range(4):
            b.waiting.append(Job(["x"], 10, DecodeConfig(), loop.create_future(), loop))
        b._start()
        await asyncio.sleep(0.2)
        b.close()

    asyncio.run(run())
    assert sorted(batches) == [[10, 10], [10, 10]], batches


def test_a_memory_budget_loads_models_on_first_use_and_unloads_the_least_recently_used(
        copy_model: Path, copy_dir: Any, tmp_path: Path) -> None:
    """--memory-budget, three models of which two fit: none loads at start; each loads on its first request; a third
    unloads the least recently used; what is loaded never holds more than the budget; the answers are the models'
    own, also under a concurrent burst over all three (a model in use is never unloaded under a request)."""
    from ..helpers import relabeled

    runs = [relabeled(copy_model, tmp_path / name, *name.split("-")) for name in ("en-fr", "fr-de", "de-es", "es-it")]
    for ckpt in (runs[3] / "averaged", runs[3] / "best", runs[3] / "last"):
        if (ckpt / "model.safetensors").is_file():
            (ckpt / "model.safetensors").write_bytes(b"not a weights file")   # found only when it is loaded
    size = Translator.load(runs[0], "torch", device="cpu").engine.memory_bytes()
    budget = 2.5 * size / (1 << 20)                                    # MiB: two models fit, not three
    lines = copy_dir.raw_lines("test", "src")[:3]
    want = Translator.load(runs[0], "torch", device="cpu", workers=1).translate(lines)
    pairs = [name.split("-") for name in ("en-fr", "fr-de", "de-es")]
    s = Server("--no-processes", "--memory-budget", f"{budget:.6f}", "--model", str(runs[1]), "--model",
               str(runs[2]), "--model", str(runs[3]), model=runs[0])
    try:
        def loaded() -> list[str]:
            info = s.request("GET", "/info")[2]["models"]
            assert sum(m["memory_bytes"] for m in info) <= budget * (1 << 20)
            return sorted(m["name"] for m in info if m["loaded"])

        assert loaded() == [] and s.metric("aiayn_model_loads_total") == 0
        for (src, tgt), now in zip([pairs[0], pairs[1], pairs[2], pairs[0]],
                                   [["en-fr"], ["en-fr", "fr-de"], ["de-es", "fr-de"], ["de-es", "en-fr"]],
                                   strict=True):
            status, _, body = s.post("/translate", {"text": lines, "source": src, "target": tgt})
            assert status == 200 and body["translations"] == want, body
            assert loaded() == now
        assert (s.metric("aiayn_model_loads_total"), s.metric("aiayn_model_unloads_total")) == (4, 2)
        status, _, body = s.post("/translate", {"text": lines, "source": "es", "target": "it"})
        assert status == 503 and "model es-it could not be loaded" in body["error"], body   # the others go on
        assert loaded() == ["de-es", "en-fr"]
        status, _, body = s.post("/translate", {"q": lines[0], "source": "fr", "target": "de"})   # LibreTranslate's
        assert status == 200 and body["translatedText"] == want[0], body
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda i: s.post("/translate", {"text": lines, "source": pairs[i % 3][0],
                                                                     "target": pairs[i % 3][1]}), range(18)))
        assert all(status == 200 and body["translations"] == want for status, _, body in answers), answers
        wait_for(lambda: len(loaded()) <= 2, "the models loaded over the budget in the burst to be unloaded")
    finally:
        assert s.stop() == 0
    assert "Traceback" not in s.output(), s.output()[-3000:]


@pytest.mark.parametrize("blocked, argv, extra", [
    ("uvicorn", ["serve", "--model", str(LEGACY), "--engine", "torch", "--port", "0"], "serve"),
    ("translate", ["translate", "--model", str(LEGACY), "--engine", "torch", "--input", "{po}", "--output",
                   "{out}"], "documents"),
    ("sqlalchemy", ["keys", "--db", "{db}", "list"], "serve"),
])
def test_a_command_whose_optional_part_is_missing_names_its_extra_in_one_line(
        tmp_path: Path, blocked: str, argv: list[str], extra: str) -> None:
    """After the README's first command (the package alone), each command that needs an extra says which, in one
    line, instead of a ModuleNotFoundError traceback."""
    (tmp_path / "x.po").write_text('msgid ""\nmsgstr ""\n\nmsgid "Hallo"\nmsgstr ""\n', encoding="utf-8")
    args = [a.format(po=tmp_path / "x.po", out=tmp_path / "y.po", db=tmp_path / "k.db") for a in argv]
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"           # (as if it were not installed)
            "from aiayn.cli.main import main\n"
            f"sys.exit(main({args!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert f"pip install 'aiayn[{extra}]'" in cli_error(out.stderr, argv[0])


def test_the_extras_named_for_missing_modules_are_pyprojects() -> None:
    import tomllib

    from aiayn.cli.common import DISTRIBUTIONS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    listed = {re.split(r"[<>=\[;]", r)[0].strip().lower() for reqs in extras.values() for r in reqs}
    assert set(DISTRIBUTIONS.values()) <= listed, set(DISTRIBUTIONS.values()) - listed
