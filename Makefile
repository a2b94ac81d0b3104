# Two commands: `make serve` and `make test`. Both set up everything themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: serve test setup models examples docs check-windows

RUNTIME := $(VENV)/.runtime-stamp
DEV     := $(VENV)/.dev-stamp
DOCS    := $(VENV)/.docs-stamp
BUILD_VENV := .venv-build

# `make serve` installs the runtime dependencies and the docs extra (MkDocs, to build the manual it serves at
# /docs/) only (no torch, transformers, pytest, playwright, matplotlib);
# `make test` adds the build, test and plotting extras. Each (re)installs whenever pyproject.toml changes.
$(RUNTIME): pyproject.toml
	@echo "setting up $(VENV): installing the runtime dependencies (a few minutes the first time)..."
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME)

$(DEV): $(RUNTIME)
	@echo "adding the build, test and plotting extras to $(VENV)..."
	$(BIN)/python -m pip install --quiet -e ".[build,dev,plot,docs]"
	touch $(DEV) $(DOCS)

# The manual: docs/*.md built by MkDocs (the docs extra, pure Python) into site/, which `rag serve` serves at
# /docs/. Built, not committed: site/ is git-ignored and rebuilt whenever a page or mkdocs.yml changes.
$(DOCS): $(RUNTIME)
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $(DOCS)

site/index.html: $(DOCS) mkdocs.yml $(wildcard docs/*)
	$(BIN)/mkdocs build --quiet

docs: site/index.html

setup: $(RUNTIME)

# Building the default models needs torch and transformers (the build extra), once. With them in .venv (make
# test) they are used; otherwise a throwaway venv holds them for the build and is removed after it, so a
# serving install never keeps them. Models already built: nothing to do.
models: $(RUNTIME)
	@if $(BIN)/python -c "import torch, transformers" 2>/dev/null; then \
		$(BIN)/rag models prepare; \
	elif $(BIN)/rag models check >/dev/null 2>&1; then \
		echo "models: already prepared"; \
	else \
		echo "building the models needs torch and transformers once: installing them in $(BUILD_VENV) (removed after)"; \
		rm -rf $(BUILD_VENV); \
		$(PYTHON) -m venv $(BUILD_VENV) && $(BUILD_VENV)/bin/python -m pip install --quiet --upgrade pip && \
		$(BUILD_VENV)/bin/python -m pip install --quiet -e ".[build]" && $(BUILD_VENV)/bin/rag models prepare; \
		status=$$?; rm -rf $(BUILD_VENV); \
		exit $$status; \
	fi

examples: models
	$(BIN)/rag ingest examples/docs/

serve: examples docs
	$(BIN)/rag models check
	$(BIN)/rag serve --host $(HOST) --port $(PORT)

# The modules that write, rename and delete files run once more under Windows' file-system rules (tests/windows.py:
# handles held by this and other processes, share modes, MAX_PATH, letter case), their servers too; the PostgreSQL
# variants keep no files.
WINDOWS_PASS := tests/test_jobs.py tests/test_backup.py tests/test_sources.py tests/test_uploads.py \
	tests/test_telemetry.py tests/test_access.py tests/test_folder_groups.py tests/test_ingest.py tests/test_audit.py

# The suite runs on SmolLM2-135M whatever this machine's default generator is (tests/conftest.py): prepare only it.
test: $(DEV)
	$(BIN)/rag models prepare --generator smollm2-135m
	$(BIN)/lint-imports
	$(BIN)/python -m pytest
	$(BIN)/python -m pytest --windows-rules -m "not pypi" -k "not postgres" $(WINDOWS_PASS)

# Every runtime dependency has a win_amd64 wheel for Python 3.11 to 3.14 (pip download; needs only PyPI).
check-windows: $(RUNTIME)
	$(BIN)/python tools/windows/check_wheels.py --extra postgres
