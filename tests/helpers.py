"""What tests of every part share that is not a fixture (conftest.py holds those): the repository's paths, the tiny
legacy model, child processes that cannot outlive the suite, waits with a deadline, a real ``aiayn serve`` on a free
port (:class:`Server`), a headless browser, and the copy task's lines."""

from __future__ import annotations

import ctypes
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
LEGACY = FIXTURES / "legacy-f06e6aa" / "run"      # the tiny model trained by the code at f06e6aa
KEY = "s3cret-key"


def cli_error(err: str, command: str) -> str:
    """What a failed ``aiayn COMMAND`` printed on stderr, checked to be one line, ``aiayn COMMAND: error: ...``, the
    last thing it printed, with no traceback anywhere; returns the message."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    prefix = f"aiayn {command}: "
    errors = [line for line in lines if line.startswith(prefix)]
    assert len(errors) == 1 and lines[-1] == errors[0], f"expected one line '{prefix}...' last on stderr:\n{err}"
    assert "Traceback" not in err and 'File "' not in err
    return errors[0][len(prefix):]


def train_steps(run: Path) -> list[int]:
    """The steps of the training records in a run's metrics.jsonl, in the order they were written (a resumed run
    continues the list; a run that silently started again from step 0 would repeat its first steps)."""
    import json

    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step"] for r in records if "loss" in r]


def relabeled(run: Path, out: Path, src: str, tgt: str) -> Path:
    """A copy of the run dir ``run`` at ``out``, recorded as trained on ``src``->``tgt`` data (a run's languages are
    its data.json's): the copy model standing for a language pair."""
    shutil.copytree(run, out)
    info = json.loads((out / "data.json").read_text())
    (out / "data.json").write_text(json.dumps({**info, "src": src, "tgt": tgt}))
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60, every: float = 0.01) -> None:
    """Poll ``condition`` until it holds; after ``timeout`` seconds fail the test, saying what did not happen."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for {what}")
        time.sleep(every)


_CHILDREN: list[subprocess.Popen[bytes]] = []


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started, from any of its threads."""
    children: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:                     # it has ended
        return []
    for task in tasks:
        try:
            children += map(int, (task / "children").read_text().split())
        except OSError:                 # a thread that has ended
            continue
    return children


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def workers_of(pid: int) -> list[int]:
    """The decoding worker processes a process started (engines/processes.py), in the order they were started: the
    children of its fork server (multiprocessing's forkserver: it runs no decoding itself), or where workers are
    spawned, its children that run spawn_main; never its resource tracker."""
    out = []
    for child in _children(pid):
        cmd = _cmdline(child)
        if "resource_tracker" in cmd:
            continue
        if "forkserver" in cmd:
            out += _children(child)
        elif "spawn_main" in cmd:
            out.append(child)
    return sorted(out)


def is_worker(pid: int) -> bool:
    """Whether ``pid`` is still a running multiprocessing process (a worker not yet gone)."""
    return Path(f"/proc/{pid}").exists() and "multiprocessing" in _cmdline(pid)


def _die_with_parent() -> None:                                  # runs in the child, between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG (Linux): killed if we die


def spawn(cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    """A child process that cannot outlive the suite: on Linux it is killed when the test process dies (even by
    SIGKILL), and whatever is still running when the session ends is killed then. Start it from the main thread
    (the kernel ties it to the thread that started it)."""
    if os.uname().sysname == "Linux":
        kw.setdefault("preexec_fn", _die_with_parent)
    proc = subprocess.Popen(cmd, **kw)
    _CHILDREN.append(proc)
    return proc


def chrome() -> tuple[str, str] | None:
    """(Chromium, chromedriver) where both are installed (`make browser`), else None."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def open_chrome() -> Any:
    """A headless Chromium driven by selenium, with the flags that keep it off the network (quit it when done)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    found = chrome()
    assert found is not None, "no Chromium + chromedriver: `make browser` installs them"
    opts = Options()
    opts.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(found[1]), options=opts)


class Server:
    """`aiayn serve` in its own process, on a free port; stopped (SIGTERM, then SIGKILL) when the test ends."""

    def __init__(self, *flags: str, model: Path = LEGACY, env: dict[str, str] | None = None,
                 port: int | None = None, wait: bool = True) -> None:
        """``flags`` after the model; the command line's default engine (auto: CTranslate2, a server started without
        PyTorch) unless they name another (`--engine torch`: a test of what aiayn's own engine does in a server, such
        as step-level batching or stopping a batch whose requests are gone); ``env``: more of its
        environment; ``port``: its port (a replica started again where the load balancer expects it); ``wait``:
        return once it answers /health (else call :meth:`wait_up`: several started at once)."""
        self.port = port or free_port()
        flags = flags if "--engine" in flags else ("--engine", "auto", *flags)
        env = {**os.environ, "AIAYN_API_KEY": "", **(env or {})}
        self.log = tempfile.TemporaryFile()
        self.proc = spawn([sys.executable, "-m", "aiayn", "serve", "--model", str(model), "--device", "cpu",
                           "--port", str(self.port), *flags], env=env,
                          stdout=self.log, stderr=subprocess.STDOUT)   # a file: a pipe nobody reads fills up
        if wait:
            self.wait_up()

    def wait_up(self, timeout: float = 60) -> None:
        """Return once it answers /health; RuntimeError (with what it printed) if it exits or does not answer."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.output()[-2000:]}")
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)                     # (refused connections until it listens: nothing to the server)
        self.stop()
        raise RuntimeError(f"the server did not come up in {timeout:g} s")

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                chunked: bool = False, timeout: float = 60) -> tuple[int, dict[str, str], Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            if chunked:
                conn.putrequest(method, path)
                for k, v in (headers or {}).items():
                    conn.putheader(k, v)
                conn.putheader("Transfer-Encoding", "chunked")
                conn.endheaders()
                for i in range(0, len(body or b""), 1024):
                    piece = (body or b"")[i : i + 1024]
                    conn.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                conn.send(b"0\r\n\r\n")
            else:
                conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            data = r.read()
            kind = r.getheader("content-type", "")
            return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(data) if "json" in kind else data
        finally:
            conn.close()

    def post(self, path: str, payload: Any, key: str | None = None, **kw: Any) -> tuple[int, dict[str, str], Any]:
        headers = {"Content-Type": "application/json", **({"X-API-Key": key} if key else {})}
        return self.request("POST", path, json.dumps(payload).encode(), headers, **kw)

    def metric(self, name: str, key: str | None = None) -> float:
        """A metric's value summed over every series that has the labels ``name`` gives (``x{outcome="kept"}``: every
        model's series with that outcome)."""
        _, _, text = self.request("GET", "/metrics", headers={"X-API-Key": key} if key else {})
        base, _, labels = name.partition("{")
        wanted = set(re.findall(r'\w+="[^"]*"', labels))
        lines = [line for line in text.decode().splitlines() if line.startswith((base + " ", base + "{"))
                 and wanted <= set(re.findall(r'\w+="[^"]*"', line.rsplit(maxsplit=1)[0]))]
        return sum(float(line.rsplit(maxsplit=1)[1]) for line in lines)          # over every model's series

    def output(self) -> str:
        """What the server printed so far."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


def multipart(fields: dict[str, str], name: str | None = None, content: bytes = b"") -> tuple[bytes, dict[str, str]]:
    """A multipart form: ``fields``, and the file ``name`` holding ``content`` (as /translate_file takes it)."""
    boundary = "aiaynBoundary42"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    if name is not None:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                     "Content-Type: application/octet-stream\r\n\r\n".encode() + content + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def copy_lines(n: int, seed: int = 7) -> list[str]:
    """Lines of the copy task (letters a-j, 4-24 of them), all different: each has its own right translation."""
    rng = random.Random(seed)
    lines: set[str] = set()
    while len(lines) < n:
        lines.add(" ".join(rng.choice("abcdefghij") for _ in range(rng.randint(4, 24))))
    return sorted(lines, key=lambda line: rng.random())


# three made-up languages of the same random strings (tests/train/test_multilingual.py): only a tag tells them apart
WAYS = {"fw": lambda w: w, "nx": lambda w: ["bcdefghija"[ord(x) - 97] for x in w], "up": lambda w: [x.upper() for x in w]}


def three_ways_corpus(folder: Path, n: dict[str, int], seed: int = 7) -> Path:
    """PREFIX.fw / .nx / .up for each split: the same random strings of the letters a-j, written three ways."""
    rng = random.Random(seed)
    for split, count in n.items():
        words = [[rng.choice("abcdefghij") for _ in range(rng.randint(4, 16))] for _ in range(count)]
        for lang, way in WAYS.items():
            (folder / f"{split}.{lang}").write_text("".join(" ".join(way(w)) + "\n" for w in words))
    return folder
