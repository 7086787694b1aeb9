"""A CI run summarised into ``results/ci.md``: what it printed of its tests, its setup and its steps' times, under
the record's five fields, one section a run (the transcript itself is not kept: git keeps what was committed).

    git clone -q . /tmp/ci && (cd /tmp/ci && time .ci/run) > /tmp/ci.log 2>&1
    python -m benchmarks ci-log /tmp/ci.log --note "what this run was"
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402

CI = record.HERE / "results" / "ci.md"
# the lines of a transcript that the summary keeps
KEPT = re.compile(r"passed|failed|CI finished|took|^real|make test|make setup")


# how a CI run is made on a fresh clone (the command a section names)
RUN = "git clone -q . /tmp/ci && cd /tmp/ci && time .ci/run"


def summary(transcript: str, name: str, note: str = "", command: str = RUN) -> str:
    """One run's section of ci.md, named ``name`` (cited as ``ci.md#NAME``): the commit (this checkout's), date and
    machine, the command that ran CI, and the lines of the transcript that say what passed and how long it took."""
    head = record.header("ci") | {"machine": record.describe(record.machine())}
    keep = [line for line in transcript.splitlines() if KEPT.search(line)]
    return (f"\n## {name}\n\ncommit {head['commit']}, {head['date']}, {head['machine']}; `{command}`\n\n"
            + (note.strip() + "\n\n" if note.strip() else "") + "```\n" + "\n".join(keep) + "\n```\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks ci-log", description=__doc__.split("\n\n")[0])
    ap.add_argument("transcript", type=Path, help="what .ci/run printed (with `time`)")
    ap.add_argument("--note", default="", help="what the run was (a sentence)")
    ap.add_argument("--command", default=RUN, help="how CI was run (default: %(default)s)")
    a = ap.parse_args(argv)
    name = f"ci-{time.strftime('%Y%m%d-%H%M')}"
    with CI.open("a", encoding="utf-8") as f:
        f.write(summary(a.transcript.read_text(encoding="utf-8", errors="replace"), name, a.note, a.command))
    print(f"{CI}#{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
