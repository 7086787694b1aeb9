# aiayn — one command per job. Each target sets itself up (a .venv in this directory).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TORCH   ?= torch==2.13.0
STAMP   := $(VENV)/.installed
MINUTES ?= 15

.PHONY: setup test test-fast lint typecheck demo bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first: the CPU wheel (a plain `pip install torch` pulls a multi-GB CUDA build)
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest tests; rc=$$?; [ $$rc -eq 5 ] && echo "no tests collected" && exit 0; exit $$rc

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check aiayn tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy aiayn

demo: $(STAMP)
	$(BIN)/aiayn demo --minutes $(MINUTES)

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e ".[bench]"
	@# OpenNMT-py pins torch<2.3: its code goes to benchmarks/.peers without dependencies (see peers.py)
	$(BIN)/python -m pip install -q --upgrade --no-deps --target benchmarks/.peers "OpenNMT-py==3.5.1" \
		"pyonmttok>=1.37,<2" configargparse || echo "OpenNMT-py could not be installed; its rows will say so"
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
