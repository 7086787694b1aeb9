"""``aiayn keys`` and ``aiayn suggestions``: a server's database (serving/database.py) managed from the command line.

    aiayn keys --db keys.db add --name team-a --req-limit 60 --char-limit 5000 --daily-chars 200000
    aiayn keys --db keys.db list
    aiayn keys --db keys.db remove 3
    aiayn suggestions --db keys.db export --out fine-tune/        # then: aiayn prepare --train fine-tune/de-en/train ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .common import command


def cmd_keys(a: argparse.Namespace) -> int:
    """Add, list or remove the API keys of `aiayn serve --api-keys DB`. A key is printed once, when it is added: the
    database keeps its SHA-256 only."""
    from ..serving.database import Database

    db = Database(a.db)
    if a.action == "add":
        key, row = db.add_key(a.name or "", a.req_limit, a.char_limit, a.daily_chars, a.origin)
        print(key)
        print(f"key {row.id} added to {a.db}{_limits(row.describe())}; it is shown this once", file=sys.stderr)
    elif a.action == "list":
        rows = [k.describe() for k in db.list_keys()]
        if a.json:
            print(json.dumps(rows, indent=2))
        else:
            for r in rows:
                print(f"{r['id']:>4}  {r['key']:<13}  {r['name'] or '-':<16}  created {r['created']}{_limits(r)}")
    else:
        if not a.which:
            raise ValueError("keys remove: name the key by its id (keys list) or give the key itself")
        if not db.remove_key(a.which):
            raise ValueError(f"keys remove: no key {a.which!r} in {a.db}")
        print(f"removed key {a.which if a.which.isdigit() else a.which[:10] + '...'} from {a.db}", file=sys.stderr)
    return 0


def _limits(r: dict[str, Any]) -> str:
    said = [f"{r['req_limit']} requests/minute" if r["req_limit"] else "",
            f"{r['char_limit']} characters/request" if r["char_limit"] else "",
            f"{r['daily_chars']} characters/day" if r["daily_chars"] else "",
            f"origin {r['origin']}" if r["origin"] else ""]
    return (": " + ", ".join(s for s in said if s)) if any(said) else " (the server's limits)"


def add_keys(sub: argparse._SubParsersAction) -> None:
    p = command(sub, cmd_keys)
    p.add_argument("action", choices=["add", "list", "remove"])
    p.add_argument("which", nargs="?", help="remove: the key's id (as keys list shows it) or the key itself")
    p.add_argument("--db", required=True, help="the database: a SQLite file (made if missing), or PostgreSQL's URL: "
                   "postgresql://USER:PASSWORD@HOST:PORT/DB, postgresql://USER@/DB?host=/run/postgresql (its socket), "
                   "postgresql+psycopg2://... (another driver); its driver: pip install 'aiayn[postgres]'")
    p.add_argument("--name", help="add: who or what the key is for")
    p.add_argument("--req-limit", type=int, help="add: requests per minute (default: the server's --req-limit)")
    p.add_argument("--char-limit", type=int, help="add: characters per request (default: the server's --max-chars)")
    p.add_argument("--daily-chars", type=int, help="add: characters per day, UTC (default: no daily limit)")
    p.add_argument("--origin", help="add: the one web origin whose pages may use it (https://example.org)")
    p.add_argument("--json", action="store_true", help="list: as JSON")


def cmd_suggestions(a: argparse.Namespace) -> int:
    """Export the corrections users sent to `aiayn serve --suggestions DB` (LibreTranslate's POST /suggest) as a
    parallel corpus, one folder per language pair (OUT/de-en/train.de, train.en), for `aiayn prepare --vocab-from RUN`
    and `aiayn train --init-from RUN`: a fine-tuning on them. A text suggested more than once keeps its latest
    suggestion; a text of several lines is one pair per line where both sides have as many, else one pair."""
    from ..serving.database import Database

    rows = Database(a.db).suggested()
    if a.action == "list":
        for r in rows:
            print(json.dumps({k: r[k] for k in ("id", "source", "target", "q", "s", "key_id", "created")},
                             ensure_ascii=False))
        return 0
    if a.out is None:
        raise ValueError("suggestions export: --out DIR is required")
    latest: dict[tuple[str, str, str], str] = {}
    for r in rows:                                           # oldest first: a later suggestion replaces an earlier
        latest[(r["source"], r["target"], r["q"].strip())] = r["s"].strip()
    pairs: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for (src, tgt, q), s in latest.items():
        qs, ss = q.splitlines(), s.splitlines()
        lines = zip(qs, ss, strict=True) if len(qs) == len(ss) else [(" ".join(qs), " ".join(ss))]
        pairs.setdefault((src, tgt), []).extend((x.strip(), y.strip()) for x, y in lines if x.strip() and y.strip())
    for (src, tgt), got in pairs.items():
        folder = Path(a.out) / f"{src}-{tgt}"
        folder.mkdir(parents=True, exist_ok=True)
        held = min(a.valid, len(got) // 2)
        for split, part in (("train", got[:len(got) - held]), ("valid", got[len(got) - held:])):
            if part:
                (folder / f"{split}.{src}").write_text("".join(x + "\n" for x, _ in part), encoding="utf-8")
                (folder / f"{split}.{tgt}").write_text("".join(y + "\n" for _, y in part), encoding="utf-8")
        print(f"{src}-{tgt}: {len(got) - held} training pairs, {held} validation pairs in {folder}", file=sys.stderr)
    if not pairs:
        print(f"no suggestions in {a.db}", file=sys.stderr)
    return 0


def add_suggestions(sub: argparse._SubParsersAction) -> None:
    p = command(sub, cmd_suggestions)
    p.add_argument("action", choices=["export", "list"])
    p.add_argument("--db", required=True, help="the database of aiayn serve --suggestions")
    p.add_argument("--out", type=Path, help="export: the folder to write")
    p.add_argument("--valid", type=int, default=0, metavar="N",
                   help="export: the last N pairs of each language pair held out as valid.SRC / valid.TGT")
