"""The service's database: API keys, each with its own limits, and the corrections users send (``POST /suggest``).

One SQL database through SQLAlchemy Core: a file path (SQLite, the default) or the URL of the PostgreSQL server a
deployer runs (``postgresql://USER:PASSWORD@HOST:PORT/DB``, ``postgresql://USER@/DB?host=/run/postgresql`` for its
socket; the driver is the ``postgres`` extra, psycopg 3; :func:`url_of`). Managed by ``aiayn keys add|remove|list``
and read by ``aiayn serve --api-keys DB``; suggestions are written by ``aiayn serve --suggestions DB`` and read by
``aiayn suggestions export``. The tables are made on first use, and an older database's brought up to date.

**The record of every key's characters of the day** (``usage``) is this database too, not Redis: a budget is what a
key's owner pays for, so it must outlast Redis's evictions and restarts, and every replica already shares this
database. Each request's characters are added in one atomic statement that refuses to pass the budget
(:meth:`Database.spend`). Usage is named by each key's ``uid`` (16 random bytes, made with the key), never by its row
id, which SQLite gives again to the next key once the last one is removed.

SQLite serves several processes (replicas, ``keys add`` beside a running server) in WAL mode, each waiting up to
:data:`BUSY_S` seconds for another's write instead of failing "database is locked". A database that cannot be reached
raises :class:`Unavailable` (middleware.py answers 503 after a grace period), which never carries the statement's
parameters (a user's text, a key's hash).

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

BUSY_S = 15.0               # SQLite: how long a write waits for another process's
CONNECT_S = 3               # PostgreSQL: seconds to connect before the database counts as unreachable
PREFIX = "aiayn_"           # every key starts so (a secret scanner, or a person, can tell one in a leaked file)
SHOWN = 10                  # characters of a key kept in the clear, to tell keys apart


@dataclass(frozen=True)
class Key:
    """One API key's row (its hash, not the key)."""

    id: int
    uid: str                      # its identity for what is counted of it (never reused, unlike ``id``)
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


class Unavailable(Exception):
    """The database did not answer (stopped, unreachable, or still locked after BUSY_S); its message names the
    database and the error's kind, never the statement's parameters."""


def url_of(db: str | Path) -> str:
    """A SQLAlchemy URL: ``db`` itself when it is one (``scheme://``), else a SQLite file's. ``postgresql://`` and
    ``postgres://`` (as PostgreSQL and most hosts write it) are opened with psycopg 3 (``pip install
    'aiayn[postgres]'``), or psycopg2 where only that is installed; a ``postgresql+DRIVER://`` URL keeps its driver."""
    text = str(db)
    if "://" not in text:
        return f"sqlite:///{Path(text).expanduser().resolve()}"
    scheme, rest = text.split("://", 1)
    if scheme in ("postgresql", "postgres"):
        import importlib.util

        driver = "psycopg" if importlib.util.find_spec("psycopg") or not importlib.util.find_spec("psycopg2") \
            else "psycopg2"
        return f"postgresql+{driver}://{rest}"
    return text


def _safe_url(url: str) -> str:
    """A URL as it may be shown: without its password."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return url.replace(f":{u.password}@", ":***@") if u.password else url


class Spending:
    """What each key spent of its days (the ``key_usage`` table: the module's docstring says why here), the part of
    :class:`Database` middleware.py charges requests to."""

    sa: Any
    engine: Any
    usage: Any
    where: str

    def _run(self, work: Any) -> Any:
        """``work()``, its database errors raised as Unavailable (module docstring)."""
        try:
            return work()
        except self.sa.exc.SQLAlchemyError as e:
            raise Unavailable(f"the database {self.where} did not answer: {_kind(e)}") from None

    def spend(self, uid: str, day: str, amount: int, budget: int) -> tuple[bool, int]:
        """``amount`` more characters of key ``uid`` on ``day``, unless that would pass ``budget`` (then nothing is
        spent): one conditional UPDATE, atomic whatever the number of replicas. Whether it was spent, and what is
        spent now in all. Unavailable when the database does not answer."""
        sa, u = self.sa, self.usage
        mine = (u.c.uid == uid, u.c.day == day)

        def work() -> tuple[bool, int]:
            for _ in range(2):                    # (twice: another replica may make the day's row in between)
                with self.engine.begin() as c:
                    done = c.execute(u.update().where(*mine, u.c.chars + amount <= budget)
                                     .values(chars=u.c.chars + amount)).rowcount
                    total = c.execute(sa.select(u.c.chars).where(*mine)).scalar()
                if total is not None:
                    return bool(done), int(total)
                if amount > budget:
                    return False, 0
                try:
                    with self.engine.begin() as c:
                        c.execute(u.insert().values(uid=uid, day=day, chars=amount))
                    return True, amount
                except sa.exc.IntegrityError:
                    continue
            raise Unavailable(f"the database {self.where} did not answer: the day's row could not be written")

        done, total = self._run(work)
        return bool(done), int(total)

    def add_spent(self, uid: str, day: str, amount: int) -> int:
        """``amount`` characters key ``uid`` spent on ``day`` while the database was away (middleware.py), added
        whatever its budget; what is spent now, in all."""
        sa, u = self.sa, self.usage

        def work() -> int:
            for _ in range(2):                    # (twice: another replica may make the day's row in between)
                try:
                    with self.engine.begin() as c:
                        if not c.execute(u.update().where(u.c.uid == uid, u.c.day == day)
                                         .values(chars=u.c.chars + amount)).rowcount:
                            c.execute(u.insert().values(uid=uid, day=day, chars=amount))
                        return int(c.execute(sa.select(u.c.chars).where(u.c.uid == uid, u.c.day == day))
                                   .scalar_one())
                except sa.exc.IntegrityError:
                    continue
            raise Unavailable(f"the database {self.where} did not answer: the day's row could not be written")

        return int(self._run(work))

    def spent(self, uid: str, day: str) -> int:
        """Characters key ``uid`` spent on ``day``."""
        def work() -> int:
            with self.engine.connect() as c:
                row = c.execute(self.sa.select(self.usage.c.chars).where(self.usage.c.uid == uid,
                                                                          self.usage.c.day == day)).first()
            return 0 if row is None else int(row[0])

        return int(self._run(work))


class Database(Spending):
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
        self.where = _safe_url(self.where)
        try:
            self.engine = _engine(sa, url)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as e:
            raise ValueError(f"{self.where}: not a database URL SQLAlchemy can open ({e})") from None
        except ImportError as e:
            extra = " (pip install 'aiayn[postgres]')" if url.startswith("postgresql") else ""
            raise ValueError(f"{self.where}: its driver is not installed: {e}{extra}") from None
        meta = sa.MetaData()
        self.keys = sa.Table(
            "api_keys", meta, sa.Column("id", sa.Integer, primary_key=True), sa.Column("uid", sa.String(32)),
            sa.Column("hash", sa.String(64), nullable=False, unique=True), sa.Column("name", sa.String(200)),
            sa.Column("start", sa.String(SHOWN)), sa.Column("req_limit", sa.Integer), sa.Column("char_limit", sa.Integer),
            sa.Column("daily_chars", sa.BigInteger), sa.Column("origin", sa.String(500)),
            sa.Column("created", sa.Float, nullable=False))
        self.suggestions = sa.Table(
            "suggestions", meta, sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("q", sa.Text, nullable=False), sa.Column("s", sa.Text, nullable=False),
            sa.Column("source", sa.String(20), nullable=False), sa.Column("target", sa.String(20), nullable=False),
            sa.Column("key_id", sa.Integer), sa.Column("created", sa.Float, nullable=False))
        self.usage = sa.Table(
            "key_usage", meta, sa.Column("uid", sa.String(32), primary_key=True),
            sa.Column("day", sa.String(10), primary_key=True), sa.Column("chars", sa.BigInteger, nullable=False))
        try:
            meta.create_all(self.engine)
            self._upgrade()
        except sa.exc.SQLAlchemyError as e:
            raise ValueError(f"{self.where}: cannot open the database: {_kind(e)}") from None

    def _upgrade(self) -> None:
        """A database made by an older aiayn: its keys given the ``uid`` column, and each key a uid."""
        sa = self.sa
        if "uid" not in {c["name"] for c in sa.inspect(self.engine).get_columns("api_keys")}:
            with self.engine.begin() as c:
                c.execute(sa.text("ALTER TABLE api_keys ADD COLUMN uid VARCHAR(32)"))
        with self.engine.begin() as c:
            for (row_id,) in c.execute(sa.select(self.keys.c.id).where(self.keys.c.uid.is_(None))).all():
                c.execute(self.keys.update().where(self.keys.c.id == row_id).values(uid=secrets.token_hex(16)))

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
        row = {"hash": digest(key), "uid": secrets.token_hex(16), "name": name, "start": key[:SHOWN], "req_limit": req_limit,
               "char_limit": char_limit, "daily_chars": daily_chars, "origin": origin and origin.rstrip("/"),
               "created": time.time()}
        with self.engine.begin() as c:
            new_id = int(c.execute(self.keys.insert().values(**row)).inserted_primary_key[0])
        return key, self._key({**row, "id": new_id})

    @staticmethod
    def _key(row: Any) -> Key:
        r = dict(row)
        return Key(r["id"], r["uid"], r["name"] or "", r["start"], r["req_limit"], r["char_limit"], r["daily_chars"],
                   r["origin"], r["created"])

    def find(self, key: str) -> Key | None:
        """The row of ``key`` (None: no such key); Unavailable when the database does not answer."""
        def work() -> Any:
            with self.engine.connect() as c:
                return c.execute(self.keys.select().where(self.keys.c.hash == digest(key))).mappings().first()

        row = self._run(work)
        return None if row is None else self._key(row)

    def ping(self) -> None:
        """Nothing, if the database answers; Unavailable if not."""
        def work() -> None:
            with self.engine.connect() as c:
                c.execute(self.sa.text("SELECT 1"))

        self._run(work)

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
        """One suggestion stored; Unavailable (its text not in the message) when the database does not answer."""
        def work() -> None:
            with self.engine.begin() as c:
                c.execute(self.suggestions.insert().values(q=q, s=s, source=source, target=target, key_id=key_id,
                                                           created=time.time()))

        self._run(work)

    def suggested(self) -> list[dict[str, Any]]:
        """Every suggestion, oldest first."""
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(self.suggestions.select().order_by(self.suggestions.c.id)).mappings()]


def _kind(e: Exception) -> str:
    """A database error in words without its statement or parameters: its class and the driver's first line."""
    orig = getattr(e, "orig", None) or e
    first = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    if "[SQL:" in first:
        first = first.split("[SQL:")[0].strip()
    return f"{orig.__class__.__name__}: {first[:200]}" if first else orig.__class__.__name__


def _engine(sa: Any, url: str) -> Any:
    """The SQLAlchemy engine of ``url``: SQLite in WAL mode with a busy timeout, others with a connect timeout and
    a check of each pooled connection (a restarted PostgreSQL leaves the pool's connections dead)."""
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": BUSY_S})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(connection: Any, _: Any) -> None:
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={int(BUSY_S * 1000)}")
            cursor.close()

        return engine
    args = {"connect_timeout": CONNECT_S} if url.startswith("postgresql") else {}
    return sa.create_engine(url, pool_pre_ping=True, connect_args=args)
