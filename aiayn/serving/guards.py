"""What ``aiayn serve`` checks of every request before it does any work for it, in both of its APIs (serve.py,
libretranslate.py): the JSON body, the text as Unicode, the API key's comparison, and clients too
slow to send their request. One place for each rule (what wraps every request, middleware.py, keeps some of them):

- **JSON**: a body that is not valid JSON (or not UTF-8) is a 400 ``Invalid request: malformed JSON ...``, whichever
  API it meant to speak, before the key is asked for.
- **Unicode**: JSON can carry a lone surrogate (``"\\ud800"``), which no encoder can write; such text is refused
  with a 400 naming the field, not repaired, since what the client meant is unknown and the answer must be text it
  can read back. Form fields and query strings are decoded by Starlette, which replaces bytes that are not UTF-8 by
  U+FFFD (as browsers do), so they always arrive as valid text.
- **Errors quote little**: a message names what it refuses by at most :data:`QUOTE` characters of it.
- **The key** is compared whole, in constant time (``hmac.compare_digest``).
- **Keys and limits** are access.py's (who a client is, its requests per minute and characters), counted in
  shared.py's storage.
- **Proxies**: a request from a trusted proxy (``--forwarded-allow-ips``) is taken as the proxy says it came
  (middleware.Forwarded): its client, scheme and host, so that limits count the real client and download links name the
  address the client used.
- **Forms** are read as UTF-8, or the charset the request declares (:func:`form_fields`), as LibreTranslate reads
  them; Starlette reads a url-encoded body's unescaped bytes as Latin-1.
- **Slow clients**: the headers of a request must arrive within ``read_timeout_s`` of its first byte (of the
  connection, or of the end of the previous request on it), and its body within ``read_timeout_s`` of its headers;
  past either the server answers 408 and closes the connection. uvicorn bounds idle keep-alive connections
  (``timeout_keep_alive``) but not a request sent slowly, hence middleware.timed_protocol (the headers) and
  middleware.BodyLimit (the body, and its size).
"""

from __future__ import annotations

import codecs
import hmac
import json
from typing import Any
from urllib.parse import parse_qsl

from ..quoting import cut


class ServiceError(Exception):
    """A request answered with an error: its HTTP ``status`` (from the batcher, 503: the queue is full, 504: it took
    longer than its timeout, 500: decoding failed; the server adds its own), a message, and headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


async def json_body(request: Any) -> Any:
    """The request's body parsed as JSON (once per request, kept on ``request.state``); ServiceError(400) when it is
    not JSON, (400) naming the field where a string is not valid Unicode."""
    if not hasattr(request.state, "json"):
        body = await request.body()
        try:
            data = json.loads(body)
        except UnicodeDecodeError as e:
            raise ServiceError(400, f"Invalid request: malformed JSON: the body is not UTF-8 (byte {e.start})") from None
        except json.JSONDecodeError as e:
            raise ServiceError(400, f"Invalid request: malformed JSON: {e}") from None
        except RecursionError:                        # arrays or objects nested a thousand deep
            raise ServiceError(400, "Invalid request: malformed JSON: nested too deep") from None
        check_unicode(data)
        request.state.json = data
    return request.state.json


def check_unicode(value: Any) -> None:
    """ServiceError(400) naming the field (``text[2]``, ``glossary.Hund``) of a string in ``value`` (JSON data:
    dicts, lists, strings) that is not valid Unicode: a lone surrogate, which UTF-8 cannot encode. Walked with a
    stack of its own, so that no nesting exhausts Python's."""
    todo: list[tuple[Any, str]] = [(value, "")]
    while todo:
        v, where = todo.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ServiceError(400, f"Invalid request: {cut(where) or 'the body'} is not valid Unicode (a lone "
                                        f"surrogate at character {e.start})") from None
        elif isinstance(v, list):
            todo += [(x, f"{where}[{i}]") for i, x in enumerate(v)]
        elif isinstance(v, dict):
            dot = "." if where else ""
            todo += [(k, f"{where}{dot}(a field name)") for k in v] + [(x, f"{where}{dot}{k}") for k, x in v.items()]


def same_key(given: str | None, required: str) -> bool:
    """Whether ``given`` is the whole of ``required``, compared in constant time."""
    return bool(given) and hmac.compare_digest(str(given).encode(), required.encode())


def header_key(request: Any) -> str | None:
    """The API key in aiayn's headers: X-API-Key, else Authorization: Bearer (LibreTranslate's ``api_key`` field
    comes first there: libretranslate.api_key)."""
    return request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ") or None


def address(request: Any) -> str:
    return request.client.host if request.client else "?"


async def form_fields(request: Any) -> tuple[dict[str, str], Any]:
    """A form's text fields (url-encoded or multipart) and the form itself (its uploads; None for a url-encoded
    one): each field decoded as UTF-8 or the request's declared charset, bytes that are not of it replaced by U+FFFD
    (the module's docstring)."""
    kind, _, params = request.headers.get("content-type", "").partition(";")
    if kind.strip().lower() != "application/x-www-form-urlencoded":
        form = await request.form()
        return {k: v for k, v in form.items() if isinstance(v, str)}, form
    charset = "utf-8"
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
    try:
        charset = codecs.lookup(charset).name
    except LookupError:
        raise ServiceError(400, f"Invalid request: unknown charset {cut(charset)!r}") from None
    text = (await request.body()).decode(charset, errors="replace")
    return dict(parse_qsl(text, keep_blank_values=True, encoding=charset, errors="replace")), None


