"""One multilingual model served as every direction it knows (serving/models.py Served.load_all): in LibreTranslate's
API through the real ``libretranslatepy`` client and in aiayn's, its weights loaded once, the directions it was not
trained on pivoted through one it was. The model is tests/conftest.py's ``three_ways``: fw, nx (each letter the next)
and up (capitals), trained to and from fw, its tag on the target side."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..helpers import Server

lt_client = pytest.importorskip("libretranslatepy", reason="the LibreTranslate client: pip install libretranslatepy")

IN = {"fw": "a b c j e", "nx": "b c d a f", "up": "A B C J E"}


@pytest.fixture(scope="module")
def served(three_ways: Path) -> Iterator[Server]:
    s = Server("--engine", "torch", model=three_ways)
    try:
        yield s
    finally:
        assert s.stop() == 0
    assert "Traceback" not in s.output(), s.output()[-3000:]


def test_every_direction_through_the_libretranslatepy_client(served: Server) -> None:
    lt = lt_client.LibreTranslateAPI(f"http://127.0.0.1:{served.port}")
    langs = {x["code"]: x["targets"] for x in lt.languages()}
    assert langs == {"fw": ["nx", "up"], "nx": ["fw", "up"], "up": ["fw", "nx"]}, langs
    for a in IN:
        for b in IN:
            if a != b:
                assert lt.translate(IN[a], a, b) == IN[b], (a, b)


def test_aiayn_api_routes_by_pair_and_the_zero_shot_pair_goes_through_one_it_knows(served: Server) -> None:
    status, _, body = served.post("/translate", {"text": [IN["fw"], ""], "source": "fw", "target": "up"})
    assert status == 200 and body["translations"] == [IN["up"], ""], body
    status, _, body = served.post("/translate", {"q": IN["nx"], "source": "nx", "target": "up", "format": "text"})
    assert status == 200 and body["translatedText"] == IN["up"], body
    status, _, body = served.post("/translate", {"q": "a", "source": "fw", "target": "de"})
    assert status == 400 and "de is not supported" in body["error"], body


def test_its_weights_are_loaded_and_counted_once(served: Server) -> None:
    status, _, info = served.request("GET", "/info")
    assert status == 200
    models = info["models"]
    mine = {m["name"]: m for m in models}
    assert sorted(mine) == ["fw-nx", "fw-up", "nx-fw", "up-fw"], sorted(mine)
    sizes = sorted(m["memory_bytes"] for m in models)
    assert sizes[:3] == [0, 0, 0] and sizes[3] > 0, sizes
    assert {m["multilingual"] for m in models} == {"run"}
