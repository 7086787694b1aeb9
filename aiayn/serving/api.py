"""The translation APIs, on the same paths: aiayn's own (:func:`add_aiayn_routes`: ``POST /translate`` with ``text``,
``POST /attention``; serve.py lists its fields) and LibreTranslate's (:func:`add_routes`), so that the tools that speak
it (libretranslatepy, Mastodon, Weblate, Discourse, Nextcloud, TranslateYou, browser extensions) can use aiayn's models.

LibreTranslate's:

    POST /translate   q (a string; a list in a JSON body: a batch), source (a code or auto), target, format (text
                      or html: markup.py), alternatives (n-best; text only), api_key
                      ->  {"translatedText": ..., "detectedLanguage", "alternatives", aiayn's own "confidence" (in
                      [0, 1]: hypotheses.py) and "alternativesConfidence" (one per alternative, which stay strings
                      for the clients that know them), "pivot" (aiayn's: a pair translated through a third language
                      names it)}
    POST /detect      q  ->  [{"confidence": 0-100, "language": code}, ...], best first
    GET  /languages   ->  [{"code", "name", "targets"}]          GET /frontend/settings
    POST /translate_file  file (multipart), source, target, api_key  ->  {"translatedFileUrl"}: the document
                      translated in its own format (files.py, documents/: txt, html, xhtml, md, srt, vtt, po,
                      xliff, docx, pptx, odt, odp, epub)
    GET  /download_file/NAME  ->  the translated file
    POST /suggest     q, s (the translation a user suggests), source, target, api_key  ->  {"success": true}: stored
                      (aiayn serve --suggestions DB; without: 403) for ``aiayn suggestions export``

Fields are read as LibreTranslate reads them: the JSON body when the Content-Type is JSON, otherwise the form fields
(url-encoded or multipart) merged with the query string, which wins. ``POST /translate`` is LibreTranslate's when its
fields have ``q`` and aiayn's when they have ``text``. Errors are ``{"error": ...}`` with LibreTranslate's
codes: 400 (a missing field, an unsupported language, a text over the limits, a required api_key missing), 403 (a
wrong key), 429 (the request limit), 500. A text is cut into its sentences, translated, and joined back with its own
line breaks (pipeline.py, spans.py), as ``aiayn translate`` does; aiayn's own fields are the request's other
options (:data:`OPTIONS`): ``sentences: false`` translates each line as one sentence. ``source: auto`` is detected
with py3langid (its model ships with it; offline) among every language it knows (97), and a text in a language no
model translates to the target is a 400 that says so; ``/detect`` answers among them all too.
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations (serve.py says why).
import asyncio
import dataclasses
import threading
import typing
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..config import DecodeConfig
from ..documents.formats import EXTENSIONS
from ..engines.base import require
from ..quoting import brief, cut
from ..translation.pipeline import Request, Translation, option_hints
from ..translation.route import Route, canonical, language_name
from .files import Files
from .middleware import Access, ServiceError, form_fields, header_key, json_body
from .models import Models, Served, refused


def _is_json(request: Any) -> bool:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


async def fields(request: Any) -> dict[str, Any]:
    """The request's fields, read as LibreTranslate reads them (the module's docstring)."""
    if _is_json(request):
        data = await json_body(request) if (await request.body()).strip() else {}
        if not isinstance(data, dict):
            raise ServiceError(400, "Invalid request: malformed JSON: the body must be an object")
        return data
    texts, _ = await form_fields(request)
    return {**texts, **dict(request.query_params)}


LIBRETRANSLATE_ONLY = frozenset({"source", "target", "format", "alternatives", "api_key"})


async def speaks_libretranslate(request: Any) -> bool:
    """Whether a ``POST /translate`` is LibreTranslate's: ``q`` in the query string or in a JSON object, a body that
    is not a JSON object sent without a JSON Content-Type (a form), or an object with neither ``q`` nor ``text`` but
    LibreTranslate's other fields (its "missing q" is the clearer answer there). aiayn's own is a JSON object with
    ``text``, sent with any Content-Type (as ``curl -d`` sends it). A body that starts as an object but is not valid
    JSON is either API's 400 (middleware.json_body)."""
    body = (await request.body()).lstrip()          # read first: api._unless_gone listens to the connection next
    if "q" in request.query_params:
        return True
    if body[:1] == b"{":
        data = await json_body(request)
        return isinstance(data, dict) and ("q" in data or "text" not in data and not LIBRETRANSLATE_ONLY.isdisjoint(data))
    return not _is_json(request)


def api_key(f: dict[str, Any], request: Any) -> str | None:
    """The key a LibreTranslate request carries: its ``api_key`` field (empty or null: none), else aiayn's headers."""
    given = f.get("api_key") or header_key(request)
    return str(given) if given else None


class Detector:
    """Language identification (py3langid, its model loaded on first use) among given languages: a best-first list
    of ``{"confidence": 0-100, "language": code}``; languages py3langid does not know come last, at 0.

    **What the server serves comes first when the detector is unsure.** On a short text the detector's best guess is
    often a neighbour ("Ein Hund." is Faroese 12.7 against German 12.3): where the likeliest of the ``preferred``
    languages (those the server translates) scores at least :data:`UNSURE` times the best, it is put first
    (``python -m benchmarks detect``: test_2016_flickr's first two words, German found 88.4% -> 98.3%, English
    53.9% -> 94.5% on a German-English server; French, which it does not serve, 46.0% -> 40.2%)."""

    UNSURE = 0.3

    def __init__(self) -> None:
        self._identifier: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._identifier is None:
                try:
                    from py3langid.langid import MODEL_FILE, LanguageIdentifier
                except ImportError:
                    raise ServiceError(500, "language detection needs py3langid: pip install 'aiayn[serve]'") from None
                self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            return self._identifier

    def rank(self, text: str, among: list[str] | None = None, best: int = 3,
             preferred: list[str] | None = None) -> list[dict[str, Any]]:
        """The ``best`` likeliest languages of ``text`` among ``among`` (None: every language py3langid knows),
        the likeliest of ``preferred`` first where the detector is unsure (the class's docstring)."""
        if among is not None and len(among) == 1:
            return [{"confidence": 100.0, "language": among[0]}]
        scores = {canonical(lang): p for lang, p in self._load().rank(text) if among is None or lang in among}
        total = sum(scores.values()) or 1.0
        ranked = sorted(among if among is not None else scores, key=lambda lang: -scores.get(lang, -1.0))
        mine = [lang for lang in ranked if lang in (preferred or ())]
        if mine and ranked and mine[0] != ranked[0] and \
                scores.get(mine[0], 0.0) >= self.UNSURE * scores.get(ranked[0], 0.0):
            ranked.remove(mine[0])
            ranked.insert(0, mine[0])
        return [{"confidence": round(100 * scores.get(lang, 0.0) / total, 2), "language": lang}
                for lang in ranked[:best]]


def _text(f: dict[str, Any], json_body: bool, max_lines: int) -> tuple[list[str], bool]:
    """(the texts of ``q``, whether it was a batch), within the server's lines per request (its characters:
    middleware.py)."""
    q = f.get("q")
    if not q:
        raise ServiceError(400, "Invalid request: missing q parameter")
    batch = isinstance(q, list)
    items = q if batch else [q]
    if not all(isinstance(t, str) for t in items):
        raise ServiceError(400, "Invalid request: q must be a string or a list of strings")
    if not json_body:
        items = ["\n".join(t.splitlines()) for t in items]
    lines = sum(t.count("\n") + 1 for t in items)
    if lines > max_lines:
        raise ServiceError(400, f"Invalid request: request ({lines} lines) exceeds text limit ({max_lines} lines)")
    return items, batch


def _alternatives(f: dict[str, Any], most: int) -> int:
    """The ``alternatives`` field: an integer (in JSON a number without a fraction, in a form its digits; not a
    boolean, nor 1.5 taken as 1)."""
    value = f.get("alternatives")
    if value is None or value == "":
        return 0
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ServiceError(400, f"Invalid request: alternatives must be an integer, not {brief(value)}")
    n = value
    if not 0 <= n < most:
        raise ServiceError(400, f"Invalid request: alternatives must be in [0, {most - 1}]")
    return n


# LibreTranslate's names for what a pipeline.Request holds (and its words for what HTML refuses); every other option
# of a Request is aiayn's own field of the same name (OPTIONS), but those LibreTranslate's answer has no room for
LT_NAMES = {"texts": "q", "format": "format html", "nbest": "alternatives", "unit": "fragment"}
UNANSWERED = ("alignments",)
OPTIONS = tuple(name for name in option_hints() if name not in (*LT_NAMES, *UNANSWERED))


def _options(f: dict[str, Any]) -> dict[str, Any]:
    """aiayn's own fields (:data:`OPTIONS`: ``sentences``, ``repair``, ``protect``, ...), each read from JSON or a
    form by its type (a boolean: true or false, in a form also 1/0, yes/no, on/off; an integer: in a form its digits)
    or by its field's ``parse`` (kinds: a list, in a form comma-separated); absent or empty: not given."""
    fields = {f.name: f for f in dataclasses.fields(Request)}
    out: dict[str, Any] = {}
    for name in OPTIONS:
        value, hint, parse = f.get(name), option_hints()[name], fields[name].metadata.get("parse")
        if value is None or value == "":
            continue
        text = value.strip().lower() if isinstance(value, str) else None
        if parse is not None:
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                value = ",".join(value)
            if not isinstance(value, str):
                raise ServiceError(400, f"Invalid request: {name} must be a list or a string, not {brief(value)}")
            try:
                value = parse(value)
            except ValueError as e:
                raise ServiceError(400, f"Invalid request: {name}: {e}") from None
        elif hint is bool and text in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            value = text not in ("false", "0", "no", "off")
        elif hint is int and text is not None and text.lstrip("-").isdigit():
            value = int(text)
        if hint is bool and not isinstance(value, bool):
            raise ServiceError(400, f"Invalid request: {name} must be true or false, not {brief(value)}")
        if hint is int and (not isinstance(value, int) or isinstance(value, bool)):
            raise ServiceError(400, f"Invalid request: {name} must be an integer, not {brief(value)}")
        out[name] = value
    return out


async def _translate_items(models: Models, route: Route[Served], items: list[str], alternatives: int, fmt: str,
                           options: dict[str, Any]) -> list[list[Translation]]:
    """Each item (format text: its sentences, decoded together with every other request's, joined back with its line
    breaks; html: a fragment) as its 1 + ``alternatives`` best translations (fewer found: the last repeated)."""
    with refused(400):
        asked = Request(items, decode={"nbest": 1 + alternatives}, format=fmt, names=LT_NAMES, **options)
    out = await models.translate(route, 400, asked)
    return [[ts[min(k, len(ts) - 1)] for k in range(1 + alternatives)] for ts in out]


def _sure(t: Translation) -> float | None:
    """A translation's confidence as the API gives it (aiayn's field: in [0, 1], 4 decimals)."""
    return None if t.confidence is None else round(t.confidence, 4)


async def _detect(detector: Detector, text: str, models: Models) -> list[dict[str, Any]]:
    """``text``'s likeliest languages, those ``models`` translate first where the detector is unsure."""
    served = [lang["code"] for lang in models.languages()]
    return await asyncio.get_running_loop().run_in_executor(None, lambda: detector.rank(text, preferred=served))


async def _detected(detector: Detector, items: list[str], models: Models, target: str) -> list[dict[str, Any]]:
    """Each text's language (``source: auto``), among every language the detector knows; 400 for a text in a language
    no model translates to ``target``. As LibreTranslate: texts of 40 characters or fewer take the overall guess."""
    overall = (await _detect(detector, " ".join(items), models))[0]
    detected = [(await _detect(detector, t, models))[0] if len(t) > 40 else overall for t in items]
    for d in detected:
        if not models.reaches(d["language"], target):
            raise ServiceError(400, f"Invalid request: the text is {language_name(d['language'])} ({d['language']}, "
                                    f"detected with confidence {d['confidence']:g}), and no model translates it to "
                                    f"{target}: name its source to translate it")
    return detected


async def translate(request: Any, models: Models, cfg: Any, access: Access, detector: Detector) -> dict[str, Any]:
    """LibreTranslate's ``POST /translate`` (the module's docstring)."""
    f = await fields(request)
    client = await access.identify(request, api_key(f, request), True)
    await access.admit(client)
    items, batch = _text(f, _is_json(request), cfg.max_lines)
    await access.spend(client, sum(len(t) for t in items), True)
    for name in ("source", "target"):
        if not f.get(name):
            raise ServiceError(400, f"Invalid request: missing {name} parameter")
        if not isinstance(f[name], str):
            raise ServiceError(400, f"Invalid request: {name} must be a language code, not {brief(f[name])}")
    fmt = f.get("format") or "text"
    if fmt not in ("text", "html"):
        raise ServiceError(400, f"{brief(fmt)} format is not supported")
    alternatives, options = _alternatives(f, cfg.max_beam), _options(f)
    source, target = canonical(str(f["source"])), canonical(str(f["target"]))
    detected = await _detected(detector, items, models, target) if source == "auto" and models.sources() else None
    routes = [models.route(d["language"] if d else None, target) for d in detected] if detected else \
        [models.route(None if source == "auto" else source, target)] * len(items)
    results: list[list[Translation]] = [[] for _ in items]
    for served in dict.fromkeys(routes):          # one batch per model, in the order first named
        mine = [i for i, r in enumerate(routes) if r is served]
        for i, ts in zip(mine, await _translate_items(models, served, [items[i] for i in mine], alternatives, fmt,
                                                                options),
                         strict=True):
            results[i] = ts
    texts = [[t.text for t in r] for r in results]
    sure = [[_sure(t) for t in r] for r in results]
    # (aiayn's own fields, which LibreTranslate's clients pass over: how sure each translation is, in [0, 1])
    answer: dict[str, Any] = {"translatedText": [r[0] for r in texts] if batch else texts[0][0],
                              "confidence": [r[0] for r in sure] if batch else sure[0][0]}
    if detected:
        answer["detectedLanguage"] = detected if batch else detected[0]
    if alternatives:
        answer["alternatives"] = [r[1:] for r in texts] if batch else texts[0][1:]
        answer["alternativesConfidence"] = [r[1:] for r in sure] if batch else sure[0][1:]
    vias = [list(r.via) for r in routes]
    if any(vias):                                 # (aiayn's own field: the languages a pivot went through)
        answer["pivot"] = vias if batch else vias[0]
    return answer


def add_routes(app: Any, models: Models, cfg: Any, access: Access, suggestions: Any = None) -> Any:
    """LibreTranslate's routes on ``app``; returns its ``POST /translate`` handler, which serve.py calls for the
    requests that speak LibreTranslate. ``cfg``: the ServeConfig; ``access``: its keys and limits (middleware.py);
    ``suggestions``: the database that keeps POST /suggest's corrections (database.py; None: refused)."""
    from fastapi import Request

    detector = Detector()

    async def admitted(f: dict[str, Any], request: Any) -> Any:
        client = await access.identify(request, api_key(f, request), True)
        await access.admit(client)
        return client

    @app.post("/detect")
    async def detect(request: Request) -> list[dict[str, Any]]:
        f = await fields(request)
        await admitted(f, request)
        q = f.get("q")
        if not q or not isinstance(q, str):
            raise ServiceError(400, "Invalid request: missing q parameter")
        return await _detect(detector, q, models)

    @app.get("/languages")
    async def languages() -> list[dict[str, Any]]:
        return models.languages()

    @app.get("/frontend/settings")
    async def settings() -> dict[str, Any]:
        first = next((m.pair for m in models if m.pair), ("auto", "auto"))
        return {"charLimit": cfg.max_chars, "frontendTimeout": 500, "apiKeys": access.keyed,
                "keyRequired": access.required, "suggestions": suggestions is not None, "filesTranslation": True,
                "supportedFilesFormat": list(EXTENSIONS),
                "language": {"source": {"code": first[0], "name": language_name(first[0])},
                             "target": {"code": first[1], "name": language_name(first[1])}}}

    files = Files(models, cfg, admitted, LT_NAMES, lambda report: app.state.metrics.documented(report), access.charge,
                  access.shared)

    @app.post("/translate_file")
    async def translate_file(request: Request) -> dict[str, Any]:
        return await files.translate(request)

    @app.get("/download_file/{name}")
    async def download_file(name: str) -> Any:
        return await files.download(name)

    @app.post("/suggest")
    async def suggest(request: Request) -> dict[str, Any]:
        return await _suggest(request, models, access, suggestions, admitted)

    app.state.files = files                       # (closed by serve.py's lifespan: on_shutdown is not run beside one)
    return lambda request: translate(request, models, cfg, access, detector)


async def _suggest(request: Any, models: Models, access: Access, db: Any, admitted: Any) -> dict[str, Any]:
    """LibreTranslate's ``POST /suggest``: q (the source text), s (the translation the user suggests), source,
    target; stored with its time and key (database.py), ``{"success": true}``. Without --suggestions, 403 as
    LibreTranslate answers."""
    if db is None:
        raise ServiceError(403, "Suggestions are disabled on this server.")
    f = await fields(request)
    client = await admitted(f, request)
    for name in ("q", "s", "source", "target"):
        if not f.get(name) or not isinstance(f[name], str):
            raise ServiceError(400, f"Invalid request: missing {name} parameter")
    source, target = canonical(f["source"]), canonical(f["target"])
    if not models.reaches(source, target):
        raise ServiceError(400, f"Invalid request: no model translates {source} to {target}")
    await access.spend(client, len(f["q"]) + len(f["s"]), True)
    key_id = client.key.id if client.key is not None else None
    await asyncio.get_running_loop().run_in_executor(None, db.suggest, f["q"], f["s"], source, target, key_id)
    return {"success": True}


# --- aiayn's own API ------------------------------------------------------------------------------------------------


def request_models(cfg: Any) -> tuple[Any, Any]:
    """The bodies of ``POST /translate`` and ``POST /attention`` as pydantic models (422 on anything else).

    /translate's optional fields are the DecodeConfig fields marked ``per_request`` and the request's options
    (pipeline.Request), each with its type, bounds and help (config.setting); the server only adds its own caps (the
    beam's, ``max_beam``, which also caps nbest; the length limits')."""
    from pydantic import ConfigDict, Field, create_model

    caps = {"beam": cfg.max_beam, "nbest": cfg.max_beam, "max_len_a": cfg.max_len_a_cap,
            "max_len_b": cfg.max_len_b_cap, "min_len": cfg.max_len_b_cap}
    hints = {**typing.get_type_hints(DecodeConfig), **option_hints()}
    options: dict[str, Any] = {}
    for f in [f for f in dataclasses.fields(DecodeConfig) if f.metadata.get("per_request")] + \
            [f for f in dataclasses.fields(Request) if f.name in hints]:
        bounds = {k: f.metadata[k] for k in ("ge", "gt", "le") if f.metadata.get(k) is not None}
        if f.name in caps:
            bounds["le"] = min(bounds.get("le", caps[f.name]), caps[f.name])
        hint = hints[f.name]
        if typing.get_origin(hint) is tuple:             # (a JSON list; its items checked by the Request: a 422)
            hint = list[typing.get_args(hint)[0]]  # type: ignore[misc]
        options[f.name] = (hint | None, Field(None, description=f.metadata["help"], **bounds))
    strict = ConfigDict(extra="forbid", strict=True)
    pair: dict[str, Any] = {name: (str | None, Field(None, description=f"the {name} language (where several models "
                                                                       "are loaded)")) for name in ("source", "target")}
    lexical: dict[str, Any] = {
        "constraints": (list[list[str] | None] | None, Field(None, description="per line, target phrases its "
                                                             "translation must contain (or null)")),
        "glossary": (dict[str, str] | None, Field(None, description="source term -> target term: a line containing "
                                                  "a term is translated with its target term"))}
    translate = create_model("TranslateRequest", __config__=strict, text=(list[str], ...), **pair, **options,
                             **lexical)
    attention = create_model("AttentionRequest", __config__=strict, text=(str, Field(max_length=cfg.max_chars)),
                             beam=options["beam"], **pair)
    return translate, attention


async def parse(request: Any, model: Any) -> Any:
    """The body as JSON (whatever Content-Type says; middleware.json_body: 400 when it is not JSON or not valid Unicode)
    validated by ``model``; 422 naming what is wrong."""
    from pydantic import ValidationError

    await json_body(request)                   # (its errors say JSON's words: "array", not "list")
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as e:
        raise ServiceError(422, "; ".join(describe(err, model.model_fields) for err in e.errors()[:5])) from None


def add_aiayn_routes(app: Any, models: Models, cfg: Any, access: Access,
                     speak_libretranslate: Callable[[Any], Awaitable[dict[str, Any]]]) -> None:
    """POST /translate (aiayn's API, or LibreTranslate's where the fields are its) and POST /attention."""
    from fastapi import Request

    TranslateRequest, AttentionRequest = request_models(cfg)

    @app.post("/translate")
    async def translate(request: Request) -> dict[str, Any]:
        speaks = await speaks_libretranslate(request)     # its body is read (and kept) here
        return await _unless_gone(request, (speak_libretranslate if speaks else translate_aiayn)(request))

    async def translate_aiayn(request: Request) -> dict[str, Any]:
        await json_body(request)                       # 400 for a body that is not JSON, whatever the key
        client = await access.identify(request, header_key(request), False)
        await access.admit(client)
        req = await parse(request, TranslateRequest)
        route = models.route(req.source, req.target)
        if len(req.text) > cfg.max_lines:
            raise ServiceError(413, f"{len(req.text)} lines in one request; at most {cfg.max_lines}")
        await access.spend(client, sum(len(t) for t in req.text), False)
        with refused(422):
            asked = _asked(req)
        out = await models.translate(route, 422, asked)
        pivot = {"pivot": list(route.via)} if route.via else {}          # the languages it went through, if any
        sure = [[None if t.confidence is None else round(t.confidence, 4) for t in ts] for ts in out]
        if req.format == "html":
            return {"translations": [ts[0].text for ts in out], "confidence": [c[0] for c in sure], **pivot}
        nbest = (req.nbest or 1) > 1
        answer: dict[str, Any] = {"translations": [[{"text": t.text, "score": round(t.score, 4), "confidence": c}
                                                    for t, c in zip(ts, cs, strict=True)]
                                                   if nbest else ts[0].text for ts, cs in zip(out, sure, strict=True)],
                                  **({} if nbest else {"confidence": [c[0] for c in sure]}), **pivot}
        if req.alignments:
            answer["alignments"] = [[t.alignment for t in ts] if nbest else ts[0].alignment for ts in out]
        return answer

    @app.post("/attention")
    async def attention(request: Request) -> dict[str, Any]:
        await access.admit(await access.identify(request, header_key(request), False))
        req = await parse(request, AttentionRequest)
        if not req.text.strip():
            raise ServiceError(422, "text is empty")
        async with models.direct(req.source, req.target).use() as served:
            translator: Any = served.translator
            require(translator, "attention")
            options = {"beam": req.beam} if req.beam else {}
            return dict(await asyncio.get_running_loop().run_in_executor(      # one sentence: not batched
                None, lambda: translator.attention(req.text, **options, workers=1)))


async def _unless_gone(request: Any, work: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """``work``'s answer, unless the client disconnects first: then it is cancelled, so that its lines are dropped
    from their search (a batch whose requests are all gone stops: batcher.py, processes.py), and the answer is a 499
    nobody reads."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":   # the body is read: only a disconnect comes
            pass

    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not task.done():
        task.cancel()
        raise ServiceError(499, "the client closed the connection")
    return task.result()


def _asked(req: Any) -> Request:
    """aiayn's request as the pipeline's: its fields by name (pipeline.Request.of: the request's own, and
    DecodeConfig's), a glossary given as an object (source term -> target term)."""
    given = {k: v for k, v in req.model_dump().items() if k not in ("text", "source", "target") and v is not None}
    if "glossary" in given:
        from ..decoding.constraints import Glossary  # (PyTorch: the constraints it becomes)

        given["glossary"] = Glossary(list(given["glossary"].items()), "glossary")
    return Request.of(list(req.text), **given)


def describe(err: Any, known: Iterable[str]) -> str:
    """One pydantic error in words; ``known``: the request's fields, listed when an unknown one is sent."""
    where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "the body"
    if err.get("type") == "extra_forbidden":
        return f"unknown field {brief(where)} (known: {', '.join(known)})"
    return f"{cut(where)}: {err.get('msg')}"
