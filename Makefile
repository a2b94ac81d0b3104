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

# The modules that write, rename and delete files run once more under Windows' file-system rules (tests/windows.py:
# handles held by this and other processes, share modes, MAX_PATH, letter case), their servers too; the PostgreSQL
# variants keep no files.
WINDOWS_PASS := tests/test_jobs.py tests/test_backup.py tests/test_sources.py tests/test_uploads.py \
	tests/test_telemetry.py tests/test_access.py tests/test_folder_groups.py tests/test_ingest.py

test: models
	$(BIN)/lint-imports
	$(BIN)/python -m pytest
	$(BIN)/python -m pytest --windows-rules -m "not pypi" -k "not postgres" $(WINDOWS_PASS)

# Every runtime dependency has a win_amd64 wheel for Python 3.11 to 3.14 (pip download; needs only PyPI).
check-windows: $(STAMP)
	$(BIN)/python tools/windows/check_wheels.py --extra postgres
