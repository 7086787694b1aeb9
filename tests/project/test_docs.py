"""The documentation site (docs/conf.py): it builds strictly (``make docs``' command: any warning, such as a broken
link or reference or a failed walkthrough cell, fails it), every page of the README's list is in it, the pages need
no network (MathJax bundled, no script from elsewhere), and the walkthrough pages, opened in headless Chromium from
a real HTTP server, show their formulas typeset and their figures drawn; the Chinese one says it is Chinese."""

from __future__ import annotations

import functools
import http.server
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..helpers import chrome, free_port, open_chrome

pytestmark = pytest.mark.ci     # make test leaves the site to CI (.ci/run), which builds it with make docs as well

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["index", "getting-started", "cli", "api", "languages", "pretrained", "recipes", "terminology", "deploy",
         "scaling", "walkthrough/walkthrough", "walkthrough/walkthrough.zh", "paper-to-code", "seed-bugs",
         "architecture", "results", "performance", "contributing"]


def sphinx_command(out: Path) -> list[str]:
    """The Makefile's `make docs` build, read from it (one owner of the flags)."""
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    flags = re.search(r"\$\(BIN\)/sphinx-build (.+?) docs build/docs", make)
    assert flags, "the Makefile's docs target runs $(BIN)/sphinx-build FLAGS docs build/docs"
    return [sys.executable, "-m", "sphinx", *flags.group(1).split(), str(ROOT / "docs"), str(out)]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]' (make docs installs it)")
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(sphinx_command(out), capture_output=True, text=True, timeout=850, cwd=ROOT)  # a hang guard
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    return out


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    assert "-W" in sphinx_command(site)                         # warnings are errors
    missing = [p for p in PAGES if not (site / f"{p}.html").is_file()]
    assert missing == []
    api = (site / "api.html").read_text(encoding="utf-8")
    assert "translate_hypotheses" in api and "keep_plain" in api    # generated from the docstrings


def test_the_pages_need_no_network(site: Path) -> None:
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        outside = re.findall(r'<(?:script|link)[^>]+(?:src|href)="(https?://[^"]+)"', html)
        assert outside == [], f"{page.name} loads {outside}"
    assert (site / "_static" / "mathjax" / "tex-chtml.js").is_file()


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    port = free_port()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.skipif(chrome() is None, reason="no Chromium + chromedriver here: `make browser` installs them (Debian: "
                    "apt-get install chromium chromium-driver)")
@pytest.mark.parametrize(("page", "lang"), [("walkthrough/walkthrough", "en"), ("walkthrough/walkthrough.zh", "zh-Hans")])
def test_the_walkthrough_renders_its_formulas_and_figures_in_a_browser(served: str, page: str, lang: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    d = open_chrome()
    try:
        d.get(f"{served}/{page}.html")
        # MathJax typesets every formula into an <mjx-container>; none is left as raw TeX
        WebDriverWait(d, 60).until(lambda d: d.execute_script(
            "return document.querySelectorAll('mjx-container').length > 0 && "
            "!document.querySelector('.math:not(:has(mjx-container))')"))
        formulas = d.execute_script("return document.querySelectorAll('mjx-container').length")
        images = d.execute_script("return [...document.images].map(i => [i.src, i.complete && i.naturalWidth > 0])")
        html_lang = d.execute_script("return document.documentElement.lang")
        errors = d.execute_script("return document.querySelectorAll('mjx-merror').length")
    finally:
        d.quit()
    assert formulas >= 10 and errors == 0
    figures = [src for src, ok in images if "_images" in src]
    drawn = (ROOT / "docs" / f"{page}.py").read_text(encoding="utf-8").count("\nshow(fig, ")
    assert len(figures) == drawn >= 6, images                # every figure the script draws, shown
    assert all(ok for _, ok in images), [src for src, ok in images if not ok]
    assert html_lang == lang
