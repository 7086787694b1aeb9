"""A trained run as an Argos Translate package, run by the real argostranslate against aiayn on the same lines.

``aiayn export --format argos`` of the run; argostranslate installs it (its packages in a folder of ours) and translates
the first 300 lines of test_2016_flickr one by one, as LibreTranslate calls it (beam 4, length penalty 0.2; offline,
its sentence splitter replaced by one sentence per line, which each caption is). Against it:

- aiayn's own engine on the run (PyTorch), with the decoding Argos asks of CTranslate2 (beam 4, length penalty 0.2,
  min length 1) and each line one sentence, and Argos at float32;
- aiayn serving the package (``aiayn translate --model PKG``, CTranslate2) at int8, and Argos at its default compute
  type (auto: int8 on this CPU);
- aiayn's default text handling (run-on sentences cut, degenerate output repaired) against Argos at float32.

    python -m benchmarks argos [--model runs/demo/run-de-en] [--lines 300]

Records benchmarks/results/argos/argos-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import record  # noqa: E402
from finetune_domain import corpus  # noqa: E402

SAME = ["--beam", "4", "--lenpen", "0.2", "--min-len", "1", "--no-sentences", "--no-repair", "--no-runon"]


def translate(model: Path, src: Path, *flags: str) -> tuple[list[str], float]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", str(model), "--input", str(src),
                          *flags], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return out.splitlines(), time.perf_counter() - t0


def same(a: list[str], b: list[str]) -> int:
    return sum(x.strip() == y.strip() for x, y in zip(a, b, strict=True))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "runs" / "demo" / "run-de-en")
    p.add_argument("--lines", type=int, default=300)
    a = p.parse_args(argv)
    record.COMMAND[:] = ["python", "-m", "benchmarks", "argos", "--model", str(a.model), "--lines", str(a.lines)]
    from tests.engines.test_argos import ARGOS

    work = Path(tempfile.mkdtemp(prefix="aiayn-argos-"))
    lines = corpus("test_2016_flickr", "de")[: a.lines]
    src = work / "src.de"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "aiayn", "export", "--model", str(a.model), "--format", "argos", "--out",
                    str(work / "pkg")], check=True, capture_output=True, cwd=ROOT)
    (package,) = (work / "pkg").glob("*.argosmodel")
    argos: dict[str, Any] = {}
    for compute in ("float32", "auto"):
        home = work / compute
        (home / "packages").mkdir(parents=True)
        env = {"HOME": str(home), "ARGOS_PACKAGES_DIR": str(home / "packages"), "ARGOS_DEVICE_TYPE": "cpu",
               "ARGOS_COMPUTE_TYPE": compute, "PATH": "/usr/bin:/bin"}
        script = ARGOS.replace('"in", "out"', '"de", "en"')
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", script, str(package), str(src)], env=env, check=True,
                             capture_output=True, text=True)
        argos[compute] = (json.loads(out.stdout.splitlines()[-1])["out"], time.perf_counter() - t0)
    torch_out, _ = translate(a.model, src, "--engine", "torch", "--length-norm", "length", *SAME)
    int8_out, _ = translate(package, src, "--precision", "int8", *SAME)
    default_out, _ = translate(package, src, "--beam", "4", "--lenpen", "0.2", "--min-len", "1")
    report = {"lines": len(lines), "package": package.name, "package_bytes": package.stat().st_size,
              "identical": {"argos_float32_vs_aiayn_torch": same(argos["float32"][0], torch_out),
                            "argos_auto_vs_aiayn_package_int8": same(argos["auto"][0], int8_out),
                            "argos_float32_vs_aiayn_default_text_handling": same(argos["float32"][0], default_out)},
              "argos_seconds": {k: round(v[1], 2) for k, v in argos.items()}}
    print(json.dumps(report, indent=2))
    print(f"recorded in {record.write('argos', report)}")


if __name__ == "__main__":
    main()
