"""The service's database: API keys, each with its own limits, and the corrections users send (``POST /suggest``).

One SQL database through SQLAlchemy Core: a file path (SQLite, the default) or the URL of another database a deployer
runs (``postgresql://...``, with its driver installed). Managed by ``aiayn keys add|remove|list`` and read by
``aiayn serve --api-keys DB``; suggestions are written by ``aiayn serve --suggestions DB`` and read by
``aiayn suggestions export``. The tables are made on first use.

**Keys are stored hashed.** A key is 32 random bytes (``secrets.token_urlsafe``, shown once, by ``keys add``); the
table holds its SHA-256 and its first characters (to tell keys apart in ``keys list``), never the key. A fast hash is
the right one here: a password needs a slow hash because people choose guessable ones, and a 256-bit random key
cannot be guessed whatever the hash costs.

A key's limits (each None: the server's own, ``--req-limit`` / ``--max-chars``; daily: none):

- ``req_limit``: translation requests per minute,
- ``char_limit``: characters per request (all of a request's texts together, not each line),
- ``daily_chars``: characters per day (UTC), over all requests,
- ``origin``: the one web origin (``https://example.org``) whose pages may use it (a browser sends ``Origin``).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = "aiayn_"           # every key starts so (a secret scanner, or a person, can tell one in a leaked file)
SHOWN = 10                  # characters of a key kept in the clear, to tell keys apart


@dataclass(frozen=True)
class Key:
    """One API key's row (its hash, not the key)."""

    id: int
    name: str
    start: str                    # its first SHOWN characters
    req_limit: int | None
    char_limit: int | None
    daily_chars: int | None
    origin: str | None
    created: float

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "key": f"{self.start}...", "req_limit": self.req_limit,
                "char_limit": self.char_limit, "daily_chars": self.daily_chars, "origin": self.origin,
                "created": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.created))}


def digest(key: str) -> str:
    """What the table holds of a key (the module's docstring says why SHA-256)."""
    return hashlib.sha256(key.encode()).hexdigest()


def url_of(db: str | Path) -> str:
    """A SQLAlchemy URL: ``db`` itself when it is one (``scheme://``), else a SQLite file's."""
    text = str(db)
    return text if "://" in text else f"sqlite:///{Path(text).expanduser().resolve()}"


class Database:
    """The keys and suggestions tables of the database at ``db`` (a path or a URL), made if missing."""

    def __init__(self, db: str | Path) -> None:
        try:
            import sqlalchemy as sa
        except ImportError:
            raise ValueError("API keys and suggestions need SQLAlchemy: pip install 'aiayn[serve]'") from None
        self.sa, self.where = sa, str(db)
        url = url_of(db)
        if url.startswith("sqlite:///"):
            folder = Path(url.removeprefix("sqlite:///")).parent
            if not folder.is_dir():
                raise ValueError(f"{db}: no folder {folder} for the database")
        try:
            self.engine = sa.create_engine(url)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as e:
            raise ValueError(f"{db}: not a database URL SQLAlchemy can open ({e})") from None
        meta = sa.MetaData()
        self.keys = sa.Table(
            "api_keys", meta, sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("hash", sa.String(64), nullable=False, unique=True), sa.Column("name", sa.String(200)),
            sa.Column("start", sa.String(SHOWN)), sa.Column("req_limit", sa.Integer), sa.Column("char_limit", sa.Integer),
            sa.Column("daily_chars", sa.BigInteger), sa.Column("origin", sa.String(500)),
            sa.Column("created", sa.Float, nullable=False))
        self.suggestions = sa.Table(
            "suggestions", meta, sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("q", sa.Text, nullable=False), sa.Column("s", sa.Text, nullable=False),
            sa.Column("source", sa.String(20), nullable=False), sa.Column("target", sa.String(20), nullable=False),
            sa.Column("key_id", sa.Integer), sa.Column("created", sa.Float, nullable=False))
        try:
            meta.create_all(self.engine)
        except sa.exc.SQLAlchemyError as e:
            raise ValueError(f"{db}: cannot open the database: {e.__class__.__name__}: {e}") from None

    # --- keys -------------------------------------------------------------------------------------------------------

    def add_key(self, name: str = "", req_limit: int | None = None, char_limit: int | None = None,
                daily_chars: int | None = None, origin: str | None = None) -> tuple[str, Key]:
        """A new key (returned once: only its hash is kept) and its row."""
        for value, what in ((req_limit, "req_limit"), (char_limit, "char_limit"), (daily_chars, "daily_chars")):
            if value is not None and value < 1:
                raise ValueError(f"{what} must be at least 1 (leave it out for the server's own), not {value}")
        if origin is not None and not origin.startswith(("http://", "https://")):
            raise ValueError(f"origin {origin!r}: expected a web origin such as https://example.org")
        key = PREFIX + secrets.token_urlsafe(32)
        row = {"hash": digest(key), "name": name, "start": key[:SHOWN], "req_limit": req_limit,
               "char_limit": char_limit, "daily_chars": daily_chars, "origin": origin and origin.rstrip("/"),
               "created": time.time()}
        with self.engine.begin() as c:
            new_id = int(c.execute(self.keys.insert().values(**row)).inserted_primary_key[0])  # type: ignore[index]
        return key, self._key({**row, "id": new_id})

    @staticmethod
    def _key(row: Any) -> Key:
        r = dict(row)
        return Key(r["id"], r["name"] or "", r["start"], r["req_limit"], r["char_limit"], r["daily_chars"],
                   r["origin"], r["created"])

    def find(self, key: str) -> Key | None:
        """The row of ``key`` (None: no such key)."""
        with self.engine.connect() as c:
            row = c.execute(self.keys.select().where(self.keys.c.hash == digest(key))).mappings().first()
        return None if row is None else self._key(row)

    def list_keys(self) -> list[Key]:
        with self.engine.connect() as c:
            return [self._key(r) for r in c.execute(self.keys.select().order_by(self.keys.c.id)).mappings()]

    def remove_key(self, which: str) -> int:
        """Remove the key ``which`` names: its id (as ``keys list`` shows it), or the key itself; how many went."""
        column = self.keys.c.id if which.isdigit() else self.keys.c.hash
        with self.engine.begin() as c:
            return int(c.execute(self.keys.delete().where(column == (int(which) if which.isdigit() else digest(which))))
                       .rowcount)

    # --- suggestions ------------------------------------------------------------------------------------------------

    def suggest(self, q: str, s: str, source: str, target: str, key_id: int | None) -> None:
        with self.engine.begin() as c:
            c.execute(self.suggestions.insert().values(q=q, s=s, source=source, target=target, key_id=key_id,
                                                       created=time.time()))

    def suggested(self) -> list[dict[str, Any]]:
        """Every suggestion, oldest first."""
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(self.suggestions.select().order_by(self.suggestions.c.id)).mappings()]
