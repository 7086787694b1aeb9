"""The benchmarks' one entry point and one record format (benchmarks/__main__.py, benchmarks/record.py): every
benchmark runs by name, every record under benchmarks/results/ names its command, commit and machine, and the
server's replay decodes through the server's own batcher."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.cli.main import main
from aiayn.data.datadir import DataDir

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))
import record  # noqa: E402

HELPERS = {"peers.py", "annotated.py", "record.py", "__main__.py"}        # imported by the benchmarks, not run


def _bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_every_record_names_its_command_commit_and_machine() -> None:
    files = sorted(p for p in (BENCH / "results").rglob("*") if p.is_file() and p.parent != BENCH / "results")
    assert len(files) > 50
    for path in files:
        r = record.read(path)
        missing = [k for k in ("command", "commit", "machine") if not r[k]]
        assert not missing, f"{path.name} does not name its {', '.join(missing)} (record.py, results/provenance.json)"


def test_records_lie_in_their_benchmarks_folders_each_cited_or_its_benchmarks_newest() -> None:
    """Records by benchmark (results/BENCHMARK/), listed by the index its command writes; a record nobody cites and
    that is not its benchmark's newest is not kept (git keeps it)."""
    import index  # type: ignore[import-not-found]

    assert {p.name for p in (BENCH / "results").iterdir() if p.is_file()} == {"ci.md", "provenance.json"}
    texts = {p: p.read_text(encoding="utf-8", errors="replace") for p in index.citing_files()}
    for bench, paths in index.records().items():
        newest = index.newest(paths)
        for path in paths:
            assert path == newest or path.suffix == ".png" and path.with_suffix(".json") == newest or \
                index.cited(texts, path.name), f"{bench}/{path.name}: cited nowhere, and not its benchmark's newest"
    assert (BENCH / "RECORDS.md").read_text(encoding="utf-8") == index.render(), \
        "benchmarks/RECORDS.md is stale: run python -m benchmarks index"


def test_a_record_is_written_into_its_benchmarks_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record, "RESULTS", tmp_path)
    assert record.write("ab", {"x": 1}).parent == tmp_path / "ab" == record.note("ab", "y").parent


def test_two_records_in_one_minute_are_both_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records are named by the minute; a second run within it wrote over the first (a decode-ab record was lost)."""
    monkeypatch.setattr(record, "RESULTS", tmp_path)
    monkeypatch.setattr(record.time, "strftime", lambda fmt: "20261127-1042")
    paths = [record.write("ab", {"ratio": r}) for r in (1.01, 0.96, 0.97)] + [record.note("ab", "x"), record.note("ab", "y")]
    assert [p.name for p in paths] == ["ab-20261127-1042.json", "ab-20261127-1042-2.json", "ab-20261127-1042-3.json",
                                       "ab-20261127-1042.txt", "ab-20261127-1042-2.txt"]
    assert [json.loads(p.read_text())["ratio"] for p in paths[:3]] == [1.01, 0.96, 0.97]


def test_every_benchmark_runs_by_name() -> None:
    from benchmarks.__main__ import BENCHMARKS  # type: ignore[import-not-found]

    modules = {m for m, _ in BENCHMARKS.values()}
    for path in BENCH.glob("*.py"):
        if path.name in HELPERS:
            continue
        tree = ast.parse(path.read_text())
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        assert mains and mains[0].args.args, f"{path.name}: a benchmark has main(argv)"
        assert path.stem in modules, f"{path.name} is not in benchmarks/__main__.py's BENCHMARKS"
    listing = _bench()
    assert listing.returncode == 0 and all(name in listing.stdout for name in BENCHMARKS)
    wrong = _bench("no-such-benchmark")
    assert wrong.returncode == 2 and "no benchmark 'no-such-benchmark'" in wrong.stderr


@pytest.mark.slow
def test_the_server_replay_decodes_through_the_servers_batcher_and_is_recorded(copy_model: Path, copy_dir: DataDir,
                                                                               tmp_path: Path) -> None:
    src = tmp_path / "src.txt"
    lines = copy_dir.raw_lines("test", "src")[:60]
    src.write_text("\n".join(lines) + "\n")
    run = _bench("serve", "--replay", "--model", str(copy_model), "--src", str(src), "--requests", "20",
                 "--static", "8", "--concurrency", "4", "--rounds", "1", env={"AIAYN_BENCH_RESULTS": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    [kept] = tmp_path.rglob("serve-replay-*.json")
    r = json.loads(kept.read_text())
    assert r["benchmark"] == "serve-replay" and r["command"].startswith("python -m benchmarks serve --replay --model")
    assert r["commit"] and r["machine"]["cores"] >= 1 and r["machine"]["isa"] and r["date"]
    rows = {row["way"]: row for row in r["rows"]}
    assert set(rows) == {"translate", "static 8", "batcher 4"}
    assert rows["batcher 4"]["identical_to_translate"] == r["lines"]      # the server's batcher, the CLI's lines


@pytest.mark.slow
@pytest.mark.ci      # CI's (make test-ci): 6 processes of aiayn translate
def test_the_cli_table_times_both_engines_and_compares_their_lines(copy_model: Path, copy_dir: DataDir,
                                                                    tmp_path: Path) -> None:
    """Issue 54's table (python -m benchmarks cli): each engine through the CLI, the ratio, BLEU, and the lines that
    changed between two runs of one command (at fp32 the two engines' lines are the same)."""
    pytest.importorskip("ctranslate2")
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(copy_dir.raw_lines("test", "src")[:20]) + "\n")
    ref.write_text("\n".join(copy_dir.raw_lines("test", "tgt")[:20]) + "\n")
    run = _bench("cli", "--model", str(copy_model), "--src", str(src), "--ref", str(ref), "--repeat", "2",
                 "--precision", "fp32", "--beams", "1", "--runs", "2", env={"AIAYN_BENCH_RESULTS": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    [kept] = tmp_path.rglob("cli-*.json")
    r = json.loads(kept.read_text())
    assert r["lines"] == 40 and r["command"].startswith("python -m benchmarks cli --model")
    torch_, ct2 = r["rows"]
    assert (torch_["engine"], ct2["engine"]) == ("torch", "ctranslate2") and len(torch_["seconds"]) == 2
    assert torch_["ratio"] == round(torch_["sent_per_s"] / ct2["sent_per_s"], 3) > 0
    assert torch_["identical_lines"] == 40 and torch_["bleu"] == ct2["bleu"] > 90
    assert torch_["lines_changed_between_runs"] == ct2["lines_changed_between_runs"] == 0


@pytest.mark.slow
@pytest.mark.ci      # CI's (make test-ci): every row of a benchmark's table, 6 s
def test_the_speed_quality_table_has_every_row_and_criterion(copy_model: Path, copy_dir: DataDir,
                                                             tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    student = tmp_path / "student"                       # the copy model again, with a shortlist: a "student"
    shutil.copytree(copy_model, student)
    assert main(["shortlist", "--model", str(student), "--data", str(copy_dir.path), "--k", "3"]) == 0
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(copy_dir.raw_lines("test", "src")[:80]) + "\n")
    ref.write_text("\n".join(copy_dir.raw_lines("test", "tgt")[:80]) + "\n")
    run = _bench("fast", "--teacher", str(copy_model), "--student", str(student), "--src", str(src), "--ref", str(ref),
                 "--lines", "30", "--workers", "1", env={"AIAYN_BENCH_RESULTS": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    [kept] = tmp_path.rglob("fast-*.json")
    r = json.loads(kept.read_text())
    rows = r["rows"]
    # teacher: 2 engines x 2 precisions x 2 searches; the student also with its shortlist
    assert len(rows) == 8 + 16 and {row["model"] for row in rows} == {"teacher", "student"}
    # the copy task, copied: greedy copies >= 99% of strings (test_train). Beam 4's BLEU is the model's own (its
    # early-stopping search may end on short hypotheses; how often depends on the CPU the model trained on), but
    # both engines find the same translations, so their rows agree
    assert all(row["bleu_lc"] > 90 for row in rows if row["precision"] == "fp32" and row["beam"] == 1)
    bleu = {(row["model"], row["engine"], row["precision"], row["beam"], row["shortlist"]): row["bleu_lc"] for row in rows}
    assert all(b == bleu[m, "aiayn", p, beam, s] for (m, e, p, beam, s), b in bleu.items() if p == "fp32"), bleu
    assert len(r["criteria"]) == 7 + 4 and "| student | ctranslate2 | int8 | beam 4 | yes | 1 |" in run.stdout
    speed = {(row["model"], row["engine"], row["beam"]): row["sentences_per_s"] for row in rows
             if row["precision"] == "int8" and not row["shortlist"]}
    engines = {c["criterion"]: c["speed_ratio"] for c in r["criteria"] if c["criterion"].startswith("aiayn vs")}
    assert engines == {f"aiayn vs CTranslate2: {m} {s}": round(speed[m, "aiayn", b] / speed[m, "ctranslate2", b], 3)
                       for m in ("teacher", "student") for b, s in ((1, "greedy"), (4, "beam 4"))}  # issue 54's
    assert kept.with_suffix(".png").is_file()
