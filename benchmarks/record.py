"""How every benchmark records what it measured: one writer, one reader, one description of the machine.

A record is a JSON object in ``benchmarks/results/BENCHMARK/NAME-YYYYMMDD-HHMM.json``, in its benchmark's folder
(``.jsonl`` for one line per trial; a transcript of commands and their output is a ``.txt`` under a header of the same
fields, :func:`note`)::

    {"benchmark": "serve", "command": "python -m benchmarks serve --model ...", "commit": "40ef11d",
     "machine": {"cpu": "AMD EPYC 7B13", "isa": "AVX2", "native_bf16": false, "cores": 2, "torch": "2.13.0+cpu",
                 "python": "3.11.7", "peers": {"ctranslate2": "4.8.5", ...}},
     "date": "2026-11-25 10:12", ...the figures...}

The figures sit beside those five fields, so a reader of an older record of the same benchmark finds them where
they were. Records written before this format (they name some of the five, or none) are read through
``results/provenance.json``, which gives each its command, the commit that added it and its machine as recorded
then: :func:`read` returns the five fields for every record, old or new, and tests/project/test_benchmarks.py checks that
every file under results/ has them.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = Path(os.environ.get("AIAYN_BENCH_RESULTS", HERE / "results"))     # elsewhere for the tests
PROVENANCE = HERE / "results" / "provenance.json"
FIELDS = ("benchmark", "command", "commit", "machine", "date")
# the command that is running: set by `python -m benchmarks NAME ...` (__main__.py), else this script's own
COMMAND: list[str] = []


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (e.g. "AMD EPYC 7B13"), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def isa() -> str:
    """The widest vector instructions the CPU has, as the kernels see them: AMX, AVX-512 BF16, AVX-512, AVX2, or
    what PyTorch reports (also where /proc/cpuinfo is missing)."""
    from aiayn.runtime import cpu_flags

    flags = cpu_flags()
    for name, needs in (("AMX", {"amx_bf16"}), ("AVX-512 BF16", {"avx512_bf16"}), ("AVX-512", {"avx512f"}),
                        ("AVX2", {"avx2"})):
        if needs <= flags:
            return name
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001 - not installed (or installed as code only, as OpenNMT-py in .peers)
        return None


@functools.cache
def machine() -> dict[str, Any]:
    """The machine a figure was measured on: CPU model and instruction set, whether it multiplies bf16 natively
    (what precision=auto follows), the cores this process may use, torch's and the peers' versions."""
    import torch

    from aiayn.precision import cpu_has_fast_bf16

    peers = {m: _version(m) for m in ("ctranslate2", "transformers", "sentencepiece", "sacrebleu")}
    onmt = HERE / ".peers" / "onmt" / "__init__.py"
    if onmt.is_file():
        peers["OpenNMT-py"] = next((line.split("=")[1].strip().strip("\"'") for line in onmt.read_text().splitlines()
                                    if line.startswith("__version__")), "installed")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu_model(), "isa": isa(), "native_bf16": cpu_has_fast_bf16(),    # listed and measured fast
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "gpu": gpu, "torch": torch.__version__, "python": platform.python_version(),
            "peers": {k: v for k, v in peers.items() if v}}


def describe(m: dict[str, Any] | str | None) -> str:
    """A machine in one line, for tables and plots (a record's own string, for records older than this format)."""
    if not isinstance(m, dict):
        return m or "machine not recorded"
    bf16 = "native bf16" if m.get("native_bf16") else "no native bf16"
    return f"{m['cpu']} {m['isa']} ({bf16}), {m['cores']} cores, torch {m['torch']}"


def user_env(**extra: str) -> dict[str, str]:
    """The environment for a timed ``aiayn`` process, as on a user's machine, where Python caches bytecode (a pip
    install compiles it; an editable install writes it on first import): without PYTHONDONTWRITEBYTECODE, which
    some machines set (this project's VMs do) and which makes every process compile aiayn's modules from source
    again (~0.1 s of a one-line ``aiayn translate`` here). ``extra``: variables to add."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def commit() -> str:
    """The commit measured: HEAD's short hash, ``+changes`` when aiayn/ or benchmarks/ differ from it (``AIAYN_COMMIT``
    where the checkout is a copy without git's history, as on a lent GPU machine)."""
    if os.environ.get("AIAYN_COMMIT"):
        return os.environ["AIAYN_COMMIT"]
    git = ["git", "-C", str(HERE.parent)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "aiayn", "benchmarks"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + ("+changes" if dirty else "")


def command() -> str:
    """The command that is running, as a user would type it again."""
    argv = COMMAND or ["python", os.path.relpath(sys.argv[0], HERE.parent), *sys.argv[1:]]
    return shlex.join(argv)


def header(benchmark: str) -> dict[str, Any]:
    """The five fields every record starts with."""
    return {"benchmark": benchmark, "command": command(), "commit": commit(), "machine": machine(),
            "date": time.strftime("%Y-%m-%d %H:%M")}


def _unused(path: Path) -> Path:
    """``path``, or NAME-2.json, NAME-3.json, ... where a record of the same minute is there already (two runs in one
    minute each keep their record)."""
    n = 1
    while path.with_stem(f"{path.stem}-{n}" if n > 1 else path.stem).exists():
        n += 1
    return path.with_stem(f"{path.stem}-{n}") if n > 1 else path


def write(benchmark: str, figures: dict[str, Any], name: str | None = None) -> Path:
    """Record ``figures`` in ``results/BENCHMARK/NAME-YYYYMMDD-HHMM.json`` (NAME: the benchmark's unless given) with
    the five fields."""
    (RESULTS / benchmark).mkdir(parents=True, exist_ok=True)
    out = _unused(RESULTS / benchmark / f"{name or benchmark}-{time.strftime('%Y%m%d-%H%M')}.json")
    out.write_text(json.dumps({**header(benchmark), **figures}, indent=2) + "\n")
    return out


def append(benchmark: str, figures: dict[str, Any], path: Path) -> Path:
    """Add one line (a trial) to a ``.jsonl`` record, with the five fields."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({**header(benchmark), **figures}) + "\n")
    return path


def note(benchmark: str, text: str) -> Path:
    """Record a transcript (commands and what they printed) as ``results/BENCHMARK/BENCHMARK-YYYYMMDD-HHMM.txt``, under
    a header of the five fields, one ``# field: value`` line each (:func:`read` reads them back)."""
    (RESULTS / benchmark).mkdir(parents=True, exist_ok=True)
    out = _unused(RESULTS / benchmark / f"{benchmark}-{time.strftime('%Y%m%d-%H%M')}.txt")
    head = header(benchmark) | {"machine": describe(machine())}
    out.write_text("".join(f"# {k}: {v}\n" for k, v in head.items()) + "\n" + text)
    return out


def read(path: Path) -> dict[str, Any]:
    """The five fields of a record (any format; older records through provenance.json), and its figures under
    ``figures`` (a JSON record's object, its lines for .jsonl, its text otherwise)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8", errors="replace") if path.suffix != ".png" else ""
    if path.suffix == ".json":
        figures: Any = json.loads(text)
    elif path.suffix == ".jsonl":
        figures = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        figures = text
    if isinstance(figures, str):                     # a transcript: its header's "# field: value" lines
        own: Any = dict(re.findall(rf"^# ({'|'.join(FIELDS)}): (.+)$", figures, flags=re.M))
    else:
        own = figures if isinstance(figures, dict) else (figures[-1] if isinstance(figures, list) and figures else {})
    fields = {k: own.get(k) for k in FIELDS} if isinstance(own, dict) else dict.fromkeys(FIELDS)
    beside = path.with_suffix(".json")
    if path.suffix == ".png" and beside.is_file():    # a plot written with its record (fast_bench.py): the record's
        fields = {k: json.loads(beside.read_text()).get(k) for k in FIELDS}
    if not all(fields[k] for k in ("command", "commit", "machine")):
        legacy = json.loads(PROVENANCE.read_text()).get(path.name, {}) if PROVENANCE.is_file() else {}
        fields = {k: fields[k] or legacy.get(k) for k in FIELDS}
    return {**fields, "figures": figures}
