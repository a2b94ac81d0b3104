# Two commands: `make serve` and `make test`. Both set up everything themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: serve test setup models examples check-windows

# (Re)install whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	@echo "setting up $(VENV): installing the dependencies (a few minutes the first time)..."
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[build,dev,plot]"
	touch $(STAMP)

setup: $(STAMP)

models: $(STAMP)
	$(BIN)/rag models prepare

examples: models
	$(BIN)/rag ingest examples/docs/

serve: examples
	$(BIN)/rag models check
	$(BIN)/rag serve --host $(HOST) --port $(PORT)

# The suite runs on SmolLM2-135M whatever this machine's default generator is (tests/conftest.py): prepare only it.
test: $(STAMP)
	$(BIN)/rag models prepare --generator smollm2-135m
	$(BIN)/lint-imports
	$(BIN)/python -m pytest

# Every runtime dependency has a win_amd64 wheel for Python 3.11 and 3.12 (pip download; needs only PyPI).
check-windows: $(STAMP)
	$(BIN)/python tools/windows/check_wheels.py --python 3.11 --python 3.12 --extra postgres
