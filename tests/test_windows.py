"""Native Windows (issue 27), proved on Linux: Windows' file-system rules imposed by ``tests/windows.py``,
a FAISS that cannot open non-ASCII paths, a cp1252 console, a registry that maps .js to text/plain,
case-insensitive names, Office lock files, hidden files, junctions, device names and short paths."""

from __future__ import annotations

import dataclasses
import json

import faiss
import numpy as np
import pytest

from contextlib import contextmanager
from pathlib import Path

from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedStore
from rag.core.files import path_for_native_library
from windows import WindowsRules, windows_rules  # noqa: F401  (the fixture)

WOMBAT = b"Wombats are short-legged marsupials that dig burrows in south-eastern Australia.\n"
QUOKKA = b"Quokkas are small wallabies that live on Rottnest Island near Perth.\n"


# ------------------------------------------------------------------------------------- 1. non-ASCII paths
@pytest.fixture()
def ansi_faiss(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """FAISS as on Windows: a path string goes to C ``fopen`` in the ANSI code page, so a non-ASCII one fails."""
    refused: list[str] = []
    real_write, real_read = faiss.write_index, faiss.read_index

    def refuse(path) -> None:
        if isinstance(path, str) and not path.isascii():
            refused.append(path)
            raise RuntimeError(f"Error: 'f' failed: could not open {path} for writing: No such file or directory")

    def write_index(index, target, *args):
        refuse(target)
        return real_write(index, target, *args)

    def read_index(source, *args):
        refuse(source)
        return real_read(source, *args)

    monkeypatch.setattr(faiss, "write_index", write_index)
    monkeypatch.setattr(faiss, "read_index", read_index)
    return refused


def test_an_index_under_a_non_ascii_home_commits_and_loads(tmp_path: Path, embedder, ansi_faiss: list[str],
                                                           windows_rules: WindowsRules):
    home = tmp_path / "Jürgen" / "Документы"
    docs = home / "docs"
    docs.mkdir(parents=True)
    (docs / "wombat.txt").write_bytes(WOMBAT)
    store = EmbeddedStore(home / "indexes")
    windows_rules.fail_next(1, ".faiss")  # and a scanner holds the new vectors file for a moment
    first = ingest_paths([docs], store.index("default"), IngestParameters.defaults(embedder))
    (docs / "quokka.txt").write_bytes(QUOKKA)
    second = ingest_paths([docs], store.index("default"),
                          IngestParameters.defaults(embedder))  # loads generation 1, writes 2
    assert (first.generation, second.generation) == (1, 2) and ansi_faiss == []
    assert any("injected" in r for r in windows_rules.refused)
    reader = store.index("default").reader()
    hits = reader.dense_search(embedder.embed(["Where do quokkas live?"])[0], 1)
    assert reader.chunks([hits[0][0]])[hits[0][0]].text.startswith("Quokkas")
    reader.close()


def test_the_generator_gets_a_path_its_library_can_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    models = tmp_path / "Jürgen" / "models" / "gen"
    models.mkdir(parents=True)
    assert path_for_native_library(models, windows=False) == str(models)  # Linux: any path
    monkeypatch.chdir(tmp_path / "Jürgen")  # on Windows: relative to the current folder, which holds the ü
    assert path_for_native_library(models, windows=True) == str(Path("models") / "gen")
    monkeypatch.chdir(models)
    assert path_for_native_library(models, windows=True) == "."
    monkeypatch.chdir(tmp_path)
    assert path_for_native_library(models, windows=True) is None  # the caller says what to do
    assert path_for_native_library(tmp_path, windows=True) == str(tmp_path)


# ------------------------------------------------------------------ 2. letter case; 6-7. locks, short names
def _add(uploads, index, embedder, *files: tuple[str, bytes]):
    from ingest.uploads import IncomingFile

    parameters = dataclasses.replace(IngestParameters.defaults(embedder), max_file_bytes=10_000)
    return uploads.add(index, [IncomingFile(n, c) for n, c in files], parameters)


def test_names_that_differ_only_in_case_are_one_file_and_one_index(tmp_path: Path, embedder):
    from ingest.uploads import Uploads
    from rag.core.errors import BadRequestError

    store, uploads = EmbeddedStore(tmp_path / "indexes"), Uploads(tmp_path / "uploads")
    with pytest.raises(BadRequestError, match="several files named Report.txt, report.txt"):
        _add(uploads, store.index("Docs"), embedder, ("Report.txt", WOMBAT), ("report.txt", QUOKKA))
    assert _add(uploads, store.index("Docs"), embedder, ("Report.txt", WOMBAT)).outcomes[0].status == "added"
    # Later, the same name in other letters updates that file, in the same index ("docs" is the folder "Docs").
    again = _add(uploads, store.index("docs"), embedder, ("REPORT.txt", QUOKKA))
    assert [(o.path, o.status) for o in again.outcomes] == [("Report.txt", "updated")]
    assert [p.name for p in (tmp_path / "uploads").iterdir()] == ["Docs"]
    assert [p.name for p in (tmp_path / "uploads" / "Docs").iterdir()] == ["Report.txt"]
    assert (tmp_path / "uploads" / "Docs" / "Report.txt").read_bytes() == QUOKKA
    assert store.names() == ["Docs"]
    assert uploads._lock("Docs") is uploads._lock("docs")


def test_uploads_survive_a_scanner_and_a_reader_holding_the_file(tmp_path: Path, embedder,
                                                                  windows_rules: WindowsRules):
    from ingest.uploads import Uploads

    store, uploads = EmbeddedStore(tmp_path / "indexes"), Uploads(tmp_path / "uploads")
    stored = tmp_path / "uploads" / "default" / "wombat.txt"
    windows_rules.fail_next(2, str(tmp_path / "uploads"))  # the scanner opens each new file for a moment
    first = _add(uploads, store.index("default"), embedder, ("wombat.txt", WOMBAT))
    windows_rules.fail_next(2, str(tmp_path / "uploads"))
    second = _add(uploads, store.index("default"), embedder, ("wombat.txt", QUOKKA))
    assert [o.status for o in first.outcomes + second.outcomes] == ["added", "updated"]
    assert len(windows_rules.refused) == 4 and stored.read_bytes() == QUOKKA
    assert [p.name for p in stored.parent.iterdir()] == ["wombat.txt"]  # nothing staged or kept aside is left
    with stored.open("rb"):  # someone has it open: the document goes, the held file stays (no error after commit)
        record = uploads.delete(store.index("default"), second.outcomes[0].document_id)
    assert record.path.endswith("wombat.txt")
    assert any(f"unlink {stored} (open" in r for r in windows_rules.refused)
    reader = store.index("default").reader()
    assert reader.documents() == []
    reader.close()


def test_staged_uploads_fit_in_max_path_and_a_refused_path_is_reported(tmp_path: Path, embedder,
                                                                        windows_rules: WindowsRules):
    from ingest.uploads import Uploads

    name = "n" * 116 + ".txt"  # 120 characters; its stored path is exactly 259 characters
    root = tmp_path / ("u" * (259 - len(str(tmp_path)) - 1 - len("/default/") - len(name)))
    store, uploads = EmbeddedStore(tmp_path / "indexes"), Uploads(root)
    windows_rules.max_path = 259
    assert len(str(root / "default" / name)) == 259
    report = _add(uploads, store.index("default"), embedder, (name, WOMBAT))
    assert [o.status for o in report.outcomes] == ["added"] and (root / "default" / name).is_file()
    windows_rules.max_path = len(str(root / "default")) + 8  # room for no file name at all
    refused = _add(uploads, store.index("default"), embedder, ("other.txt", QUOKKA))
    assert [(o.status, o.reason_type) for o in refused.outcomes] == [("failed", "unwritable")]
    assert "cannot store" in refused.outcomes[0].reason
    assert sorted(p.name for p in (root / "default").iterdir()) == [name]


# ------------------------------------------------- 8-9. share noise: lock files, hidden files, junctions
def test_lock_files_hidden_files_and_junctions_are_skipped_with_the_reason(tmp_path: Path, embedder,
                                                                         monkeypatch: pytest.MonkeyPatch):
    import stat

    import rag.core.files

    docs = tmp_path / "share"
    (docs / "junction").mkdir(parents=True)  # a junction: to Windows a reparse point, to is_symlink() a folder
    (docs / "junction" / "elsewhere.txt").write_bytes(QUOKKA)
    (docs / "Report.txt").write_bytes(WOMBAT)
    (docs / "~$Report.docx").write_bytes(b"\x0bJohn Smith" + b"\x00" * 150)  # Word's owner file: not a docx
    (docs / "Thumbs.txt").write_bytes(QUOKKA)
    (docs / "secret.txt").write_bytes(QUOKKA)
    attributes = {"junction": stat.FILE_ATTRIBUTE_REPARSE_POINT if hasattr(stat, "FILE_ATTRIBUTE_REPARSE_POINT")
                  else 0x400, "Thumbs.txt": 0x4, "secret.txt": 0x2}  # reparse point, system, hidden
    monkeypatch.setattr(rag.core.files, "windows_attributes", lambda path: attributes.get(Path(path).name, 0))
    summary = ingest_paths([docs], EmbeddedStore(tmp_path / "indexes").index("default"),
                           IngestParameters.defaults(embedder))
    outcomes = {Path(o.path).name: (o.status, o.reason) for o in summary.outcomes}
    assert outcomes["Report.txt"][0] == "added" and "elsewhere.txt" not in outcomes
    assert outcomes["~$Report.docx"] == ("skipped", "not a document: an Office lock file (the document is open "
                                                    "somewhere)")
    assert outcomes["Thumbs.txt"] == ("skipped", "not a document: a system file")
    assert outcomes["secret.txt"] == ("skipped", "not a document: a hidden file")
    assert summary.ok  # `rag ingest` exits 0 although someone has Report.docx open


def test_a_folder_that_cannot_be_listed_is_reported_not_fatal(tmp_path: Path, embedder,
                                                             monkeypatch: pytest.MonkeyPatch):
    import os

    docs = tmp_path / "share"
    (docs / ("deep" * 60)).mkdir(parents=True)
    (docs / "Report.txt").write_bytes(WOMBAT)
    real_scandir = os.scandir

    def scandir(path="."):  # Windows without long paths: the deep folder is "not found"
        if len(os.fspath(path)) > 200:
            raise FileNotFoundError(2, "The system cannot find the path specified", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    summary = ingest_paths([docs], EmbeddedStore(tmp_path / "indexes").index("default"),
                           IngestParameters.defaults(embedder))
    outcomes = {Path(o.path).name: (o.status, o.reason_type) for o in summary.outcomes}
    assert outcomes == {"Report.txt": ("added", None), "deep" * 60: ("skipped", "unreadable_folder")}


# --------------------------------------------------------------- 4. output redirected in the ANSI code page
def test_cli_output_redirected_to_a_file_takes_any_text(tmp_path: Path, settings):
    import os
    import subprocess
    import sys

    from helpers import cli_env
    from rag.core.settings import PROJECT_ROOT

    home = tmp_path / "Jürgen → 文書"
    docs = home / "Δοκιμή"
    docs.mkdir(parents=True)
    (docs / "Вомбат.txt").write_bytes(WOMBAT)
    (docs / "~$Вомбат.docx").write_bytes(b"\x00" * 162)
    env = cli_env(settings, PYTHONIOENCODING="cp1252")  # what Windows gives a redirected stream
    for args in (["config"], ["ingest", str(docs)], ["documents", "list"]):
        with open(tmp_path / "out.txt", "wb") as out:  # `rag ... > out.txt`
            proc = subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], stdout=out,
                                  stderr=subprocess.PIPE, env=env, cwd=PROJECT_ROOT)
        assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
        text = (tmp_path / "out.txt").read_text(encoding="utf-8")
        assert ("文書" in text) if args == ["config"] else ("Вом" in text), text
    assert os.environ.get("PYTHONIOENCODING") != "cp1252"


# ------------------------------------------------------------- 5. a registry that says .js is text/plain
def test_the_app_serves_its_scripts_as_javascript_whatever_the_registry_says():
    import mimetypes

    from litestar import Litestar
    from litestar.testing import TestClient

    from api.web import STATIC_DIR, web_handlers

    mimetypes.add_type("text/plain", ".js")  # HKCR\.js on many Windows machines; mimetypes.init() reads it
    try:
        with TestClient(Litestar(web_handlers())) as client:
            for asset in sorted(path for path in STATIC_DIR.rglob("*") if path.is_file()):
                response = client.get(f"/static/{asset.relative_to(STATIC_DIR).as_posix()}")
                assert response.status_code == 200 and response.content == asset.read_bytes()
                expected = {".js": "text/javascript", ".css": "text/css", ".html": "text/html",
                            ".txt": "text/plain", ".json": "application/json"}[asset.suffix]
                assert response.headers["content-type"].split(";")[0] == expected, asset.name
                assert response.headers["cache-control"] == "no-cache"
            assert client.head("/static/app.js").status_code == 200
            assert client.get("/static/nothing.js").status_code == 404
            assert client.get("/static/%2e%2e%2fapp.js").status_code == 404
            assert client.get("/static/i18n/%2e%2e%2fapp.js").status_code == 404
            assert client.get("/static/i18n/app.js").status_code == 404
    finally:
        mimetypes.add_type("text/javascript", ".js")


# ------------------------------------------------------------------------ 6. model install; 10. device names
def _model(folder: Path, marker: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "genai_config.json").write_text('{"model": {"eos_token_id": 2}}', encoding="utf-8")
    (folder / "tokenizer.json").write_text('{"model": {"vocab": {}}}', encoding="utf-8")
    (folder / "model.onnx").write_text(marker, encoding="utf-8")
    return folder


def test_installing_a_model_never_loses_the_last_good_one(tmp_path: Path, windows_rules: WindowsRules):
    from rag.core.errors import ModelError
    from rag.core.files import MOVE_RETRIES
    from rag.modelstore.importer import install_dir

    final = _model(tmp_path / "models" / "gen", "old")
    windows_rules.fail_next(MOVE_RETRIES, "/models/new")  # each retry refused
    with pytest.raises(ModelError, match="cannot install the new model"):  # the new one cannot move in
        install_dir(_model(tmp_path / "models" / "new", "new"), final)
    assert (final / "model.onnx").read_text() == "old"
    with (final / "model.onnx").open("rb"), pytest.raises(ModelError, match="in use"):  # a server holds it
        install_dir(tmp_path / "models" / "new", final)
    assert (final / "model.onnx").read_text() == "old"
    windows_rules.fail_next(1, "/gen")  # a scanner, for a moment
    install_dir(tmp_path / "models" / "new", final)
    assert (final / "model.onnx").read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["gen"]


def test_a_model_copied_from_read_only_media_is_writable(tmp_path: Path):
    import os
    import stat

    from rag.modelstore.importer import import_model

    source = _model(tmp_path / "dvd" / "gen", "dvd")
    for path in [*source.iterdir(), source]:
        os.chmod(path, 0o444 if path.is_file() else 0o555)
    try:
        result = import_model(tmp_path / "models", source, validate=lambda folder: None, name="gen",
                              report=lambda message: None)
    finally:
        for path in [source, *source.iterdir()]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    assert all(os.stat(p).st_mode & stat.S_IWRITE for p in [result.path, *result.path.iterdir()])


@pytest.mark.parametrize("name", ["CON", "nul", "com1", "Lpt9", "aux.docs", "abc.", "CON.tar"])
def test_device_names_and_trailing_dots_are_no_index_names(name: str):
    from rag.core.errors import BadRequestError
    from rag.core.names import validate_index_name

    with pytest.raises(BadRequestError, match="invalid index name"):
        validate_index_name(name)
    for fine in ("default", "console", "com10", "a.b", "nul-docs"):
        assert validate_index_name(fine) == fine


@pytest.mark.parametrize("name", ["COM¹.txt", "lpt².pdf", "CONIN$.txt", "conout$.md", "nul .txt", "Clock$.txt"])
def test_every_device_name_is_renamed_when_stored(name: str):
    from ingest.uploads import safe_filename
    from rag.core.files import is_device_name

    stored = safe_filename(name)
    assert not is_device_name(stored) and stored.endswith(name.rpartition(".")[2])


def test_device_names_are_no_model_names(tmp_path: Path):
    from rag.core.errors import BadRequestError
    from rag.modelstore.importer import import_model

    source = _model(tmp_path / "con", "x")
    with pytest.raises(BadRequestError, match="device name"):
        import_model(tmp_path / "models", source, validate=lambda folder: None, report=lambda message: None)


# ------------------------------------------------------------------------------- 3. installable on Windows
@pytest.mark.pypi
def test_every_runtime_dependency_has_a_windows_wheel_for_the_supported_pythons(tmp_path: Path):
    """What `make check-windows` runs: pip download --only-binary=:all: --platform win_amd64 for 3.11 to 3.14
    (needs a package index; no index fails the test, it is never skipped)."""
    import subprocess
    import sys
    import tomllib

    from rag.core.settings import PROJECT_ROOT

    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["requires-python"] == ">=3.11"  # onnxruntime-genai 0.18 has no 3.10 wheel (checked below)
    proc = subprocess.run([sys.executable, "tools/windows/check_wheels.py", "--extra", "postgres", "--dest",
                           str(tmp_path)], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for python in ("311", "312", "313", "314"):  # the defaults
        wheels = {p.name.split("-")[0].lower() for p in (tmp_path / f"cp{python}-win_amd64").glob("*.whl")}
        assert {"onnxruntime_genai", "onnxruntime", "faiss_cpu", "numpy", "psycopg_binary"} <= wheels
    too_old = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                              "--platform", "win_amd64", "--python-version", "3.10", "-d", str(tmp_path / "old"),
                              "onnxruntime-genai>=0.18,<0.19"], capture_output=True, text=True)
    assert too_old.returncode != 0 and "No matching distribution" in too_old.stderr


# ------------------------------------------------------ 6. the log file of `rag serve --workers N`
def test_workers_sharing_a_rotating_log_lose_no_record(tmp_path: Path, windows_rules: WindowsRules):
    import logging

    from rag.core.logfiles import SharedRotatingFileHandler

    log = tmp_path / "logs" / "api.log"
    log.parent.mkdir()
    # Two workers' handlers on one file: on Windows neither can rename it while the other holds it open, so a
    # worker lets go of a file due for rotation (issue 35, 5: tests the bound below).
    workers = [SharedRotatingFileHandler(log, maxBytes=2_000, backupCount=9, encoding="utf-8") for _ in range(2)]
    for handler in workers:
        handler.setFormatter(logging.Formatter("%(message)s"))
    for i in range(200):
        workers[i % 2].emit(logging.makeLogRecord({"msg": f"record {i:04d} " + "x" * 40}))
    assert (tmp_path / "logs" / "api.log.1").is_file()  # rotated while both were open
    for handler in workers:
        handler.close()
    windows_rules.refused.clear()
    last = SharedRotatingFileHandler(log, maxBytes=2_000, backupCount=9, encoding="utf-8")  # alone now
    last.setFormatter(logging.Formatter("%(message)s"))
    last.emit(logging.makeLogRecord({"msg": "record 0200"}))
    last.close()
    written = sorted(line for p in log.parent.iterdir() for line in p.read_text(encoding="utf-8").splitlines())
    assert [w.split()[1] for w in written] == [f"{i:04d}" for i in range(201)]  # every record, once
    assert (tmp_path / "logs" / "api.log.1").is_file() and windows_rules.refused == []


# ------------------------------------------------------- 11. Tesseract where its Windows installer puts it
def test_tesseract_is_found_where_the_windows_installer_puts_it(tmp_path: Path):
    from ingest.formats.ocr import find_tesseract, install_hint

    installed = tmp_path / "Program Files" / "Tesseract-OCR" / "tesseract.exe"
    installed.parent.mkdir(parents=True)
    installed.write_bytes(b"MZ")
    windows = {"PATH": str(tmp_path / "empty"), "ProgramFiles": str(tmp_path / "Program Files")}
    assert find_tesseract(windows, windows=True) == str(installed)
    user = {"PATH": "", "LOCALAPPDATA": str(tmp_path / "AppData"), "ProgramFiles": str(tmp_path / "none")}
    assert find_tesseract(user, windows=True) == "tesseract"  # not installed: the message says how
    (tmp_path / "AppData" / "Programs").mkdir(parents=True)
    installed.parent.rename(tmp_path / "AppData" / "Programs" / "Tesseract-OCR")
    assert find_tesseract(user, windows=True).endswith(str(Path("Programs") / "Tesseract-OCR" / "tesseract.exe"))
    assert find_tesseract(user, windows=False) == "tesseract"
    assert "UB Mannheim" in install_hint(windows=True) and "tesseract-ocr" in install_hint(windows=False)


class FakeRegistryKey:
    """A registry key for the stand-in winreg below: named subkeys and values."""

    def __init__(self, subkeys: dict | None = None, values: dict | None = None) -> None:
        self.subkeys, self.values = subkeys or {}, values or {}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def test_rag_info_sees_the_cpu_flags_and_gpus_windows_reports(monkeypatch: pytest.MonkeyPatch):
    """No Windows here: a stand-in winreg holds the display-adapter class as Windows lays it out, and the
    kernel32 feature query answers as an AVX2-only desktop does."""
    import ctypes
    import sys
    import types

    from app import diagnostics

    root = FakeRegistryKey({diagnostics.WINDOWS_DISPLAY_CLASS: FakeRegistryKey({
        "0000": FakeRegistryKey(values={"DriverDesc": "NVIDIA GeForce RTX 3060"}),
        "0001": FakeRegistryKey(values={"DriverDesc": "Intel(R) UHD Graphics 770"}),
        "0002": FakeRegistryKey(values={"DriverDesc": "Microsoft Basic Display Adapter"}),
        "Properties": FakeRegistryKey(),
    })})

    def open_key(key, name):
        if name not in key.subkeys:
            raise FileNotFoundError(name)
        return key.subkeys[name]

    def enum_key(key, position):
        names = sorted(key.subkeys)
        if position >= len(names):
            raise OSError("no more data")
        return names[position]

    def query_value(key, name):
        if name not in key.values:
            raise FileNotFoundError(name)
        return key.values[name], 1

    winreg = types.SimpleNamespace(HKEY_LOCAL_MACHINE=root, OpenKey=open_key, EnumKey=enum_key,
                                   QueryValueEx=query_value)
    monkeypatch.setitem(sys.modules, "winreg", winreg)
    monkeypatch.setattr(sys, "platform", "win32")
    features = {40: 1, 41: 0, 43: 0}  # AVX2 yes, AVX-512F no
    kernel32 = types.SimpleNamespace(IsProcessorFeaturePresent=lambda feature: features.get(feature, 0))
    monkeypatch.setattr(ctypes, "windll", types.SimpleNamespace(kernel32=kernel32), raising=False)

    assert diagnostics.gpu_facts() == ["NVIDIA GeForce RTX 3060", "Intel(R) UHD Graphics 770"]
    facts = diagnostics.cpu_facts(cpuinfo="")
    assert facts["instruction_sets"] == ["AVX2"]
    assert facts["int8_path"].startswith("AVX2 (u8 x s8 pairs summed in int16")


# ==================================================================== issue 35: the second Windows pass
# ------------------------------------------------------------- 1. click expands the command line on Windows
def test_the_command_line_arrives_as_typed_on_windows(tmp_path: Path, settings, monkeypatch: pytest.MonkeyPatch):
    """click >= 8 globs, expands ~ and variables in every argument when ``os.name == "nt"`` (what cmd.exe and
    PowerShell leave to the program): ``--glob "*.txt"`` in a folder holding a.txt and b.txt would arrive as
    ``--glob a.txt b.txt``. The entry point (and ``python -m app.cli``) calls ``main`` without that."""
    import os
    import sys
    import types

    import click.core

    import app.cli

    (tmp_path / "a.txt").write_bytes(WOMBAT)
    (tmp_path / "b.txt").write_bytes(QUOKKA)
    (tmp_path / "share").mkdir()
    (tmp_path / "share" / "report.txt").write_bytes(WOMBAT)
    (tmp_path / "share" / "notes.md").write_bytes(QUOKKA)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(click.core, "os", types.SimpleNamespace(name="nt", environ=os.environ, path=os.path))
    monkeypatch.setenv("RAG_EMBEDDER_DIR", str(settings.embedder_path))
    monkeypatch.setattr(sys, "argv", ["rag", "--home", str(tmp_path / "home"), "ingest", "share", "--glob",
                                      "*.txt", "--json"])
    with pytest.raises(SystemExit) as exited:
        app.cli.main()  # what the console script `rag` calls
    assert exited.value.code == 0
    reader = EmbeddedStore(tmp_path / "home" / "indexes").index("default").reader()
    try:
        assert [Path(d.path).name for d in reader.documents()] == ["report.txt"]  # expanded: --glob a.txt, b.txt
    finally:
        reader.close()


# ------------------------------------------------------------------ 2. deleting an index that has answered
def _retrieve(client, index: str):
    return client.post("/v1/retrieve", json={"query": "Where do quokkas live and what do wombats dig?",
                                             "index": index, "top_k": 1})


@pytest.mark.parametrize("windows", [False, True], ids=["linux", "windows"])
def test_a_deleted_index_stops_answering_and_its_name_serves_the_new_index(
        tmp_path: Path, settings, embedder, windows: bool, request: pytest.FixtureRequest):
    """The app caches one retriever per index, which holds ``store.sqlite`` open: Windows refused to rename the
    folder (500), and elsewhere the deleted index kept answering and a new one of its name was served stale."""
    import time

    from litestar.testing import TestClient

    from api.app import create_app

    if windows:
        request.getfixturevalue("windows_rules")
    home = tmp_path / "home"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "wombat.txt").write_bytes(WOMBAT)
    ingest_paths([tmp_path / "docs"], EmbeddedStore(home / "indexes").index("docs"),
                 IngestParameters.defaults(embedder))
    with TestClient(create_app(settings.replace(home=home)), base_url="http://127.0.0.1", timeout=120) as client:
        while client.get("/healthz").json()["status"] == "loading":
            time.sleep(0.1)
        assert "Wombats" in _retrieve(client, "docs").json()["chunks"][0]["text"]
        deleted = client.delete("/v1/indexes/docs", params={"confirm": "docs"})
        assert deleted.status_code == 200, deleted.text
        gone = _retrieve(client, "docs")
        assert (gone.status_code, gone.json()["error"]["type"]) == (404, "index_not_found"), gone.text
        (tmp_path / "docs" / "wombat.txt").unlink()
        (tmp_path / "docs" / "quokka.txt").write_bytes(QUOKKA)
        ingest_paths([tmp_path / "docs"], EmbeddedStore(home / "indexes").index("docs"),
                     IngestParameters.defaults(embedder))
        assert "Quokkas" in _retrieve(client, "docs").json()["chunks"][0]["text"]
    assert sorted(p.name for p in (home / "indexes").iterdir()) == ["docs"]


def test_deleting_an_index_another_process_reads_waits_for_it_or_says_index_busy(
        tmp_path: Path, settings, embedder, windows_rules: WindowsRules):
    """A `rag serve` that answered from an index holds its files (to Windows: a sharing violation for our
    rename): the tombstone makes it let go within a poll, and the delete goes through. A process that never lets
    go gets 409 ``index_busy``: the index is deleted all the same, and its folder goes once it is free."""
    import httpx
    from click.testing import CliRunner

    from helpers import server_process
    from app.cli.main import main as cli
    from rag.core.errors import IndexBusyError
    from app.runtime import delete_index

    home = tmp_path / "home"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "wombat.txt").write_bytes(WOMBAT)
    store = EmbeddedStore(home / "indexes")
    for name in ("docs", "kept"):
        ingest_paths([tmp_path / "docs"], store.index(name), IngestParameters.defaults(embedder))
    with server_process(settings, home, tmp_path / "serve.log") as base:
        answered = httpx.post(f"{base}/v1/retrieve", json={"query": "What do wombats dig?", "index": "docs"})
        assert answered.status_code == 200, answered.text
        deleted = CliRunner().invoke(cli, ["--home", str(home), "index", "delete", "docs", "--yes"])
        assert deleted.exit_code == 0, deleted.output
        assert any("open in process" in r for r in windows_rules.refused), windows_rules.refused  # it waited
        gone = httpx.post(f"{base}/v1/retrieve", json={"query": "What do wombats dig?", "index": "docs"})
        assert (gone.status_code, gone.json()["error"]["type"]) == (404, "index_not_found")

    database = home / "indexes" / "kept" / "store.sqlite"
    holder = windows_rules.hold(database)  # a backup tool, say, that never lets go
    with pytest.raises(IndexBusyError, match="another process"):
        delete_index(settings.replace(home=home), store, "kept")
    assert store.names() == [] and not store.index("kept").exists()
    busy = CliRunner().invoke(cli, ["--home", str(home), "index", "delete", "kept", "--yes"])
    assert busy.exit_code == 2 and "does not exist" in busy.output  # deleted already
    windows_rules.release(holder)
    ingest_paths([tmp_path / "docs"], store.index("kept"),
                 IngestParameters.defaults(embedder))  # the old folder goes first
    assert store.names() == ["kept"] and sorted(p.name for p in (home / "indexes").iterdir()) == ["kept"]


# -------------------------------------------------- 3. folders left by a delete or a restore; 6. scheduled syncs
@contextmanager
def _app(settings):
    """The app in-process (its background loops included), once its models are loaded."""
    import time

    from litestar.testing import TestClient

    from api.app import create_app

    with TestClient(create_app(settings), base_url="http://127.0.0.1", timeout=120) as client:
        while client.get("/healthz").json()["status"] == "loading":
            time.sleep(0.1)
        yield client


def _scheduled_source(home: Path, tmp_path: Path, embedder) -> Path:
    from ingest.sources import add_source

    folder = tmp_path / "share"
    folder.mkdir()
    (folder / "wombat.txt").write_bytes(WOMBAT)
    add_source(EmbeddedStore(home / "indexes").index("docs"), embedder, folder, every_s=3600)  # due at once
    return folder


def _synced(home: Path) -> bool:
    from ingest.sources import index_sources

    return all(s.last is not None and s.last.status == "ok"
               for s in index_sources(EmbeddedStore(home / "indexes").index("docs")))


def test_folders_left_by_a_delete_or_a_restore_break_no_list_and_no_sync(tmp_path: Path, settings, embedder,
                                                                        windows_rules: WindowsRules):
    """A scanner held a file while ``rmtree(ignore_errors=True)`` ran: ``indexes/.deleted-*`` stayed, and its
    name (no index name) failed GET /v1/indexes (400), `rag index list`, and every scheduled sync round."""
    import os
    import shutil
    import time

    from click.testing import CliRunner

    from app.cli.main import main as cli
    from windows import wait_until

    home = tmp_path / "home"
    _scheduled_source(home, tmp_path, embedder)
    indexes = home / "indexes"
    for leftover in (".deleted-1a2b3c4d", ".restore-5e6f7a8b", ".deleted-99999999"):
        (indexes / leftover).mkdir()
        shutil.copyfile(indexes / "docs" / "store.sqlite", indexes / leftover / "store.sqlite")
    for path in (indexes / ".restore-5e6f7a8b" / "store.sqlite", indexes / ".restore-5e6f7a8b"):
        os.utime(path, (time.time() - 7200, time.time() - 7200))  # a restore that stopped two hours ago
    held = windows_rules.hold(indexes / ".deleted-99999999" / "store.sqlite")  # still held: left for next time
    listed = CliRunner().invoke(cli, ["--home", str(home), "index", "list", "--json"])
    assert listed.exit_code == 0 and [i["name"] for i in json.loads(listed.output)] == ["docs"], listed.output
    with _app(settings.replace(home=home)) as client:
        assert sorted(p.name for p in indexes.iterdir()) == [".deleted-99999999", "docs"]  # swept at start
        response = client.get("/v1/indexes")
        assert response.status_code == 200 and [i["name"] for i in response.json()["indexes"]] == ["docs"]
        assert wait_until(lambda: _synced(home), 30)  # the scheduled sync ran
    windows_rules.release(held)


def test_a_job_that_cannot_be_removed_stops_no_scheduled_sync(tmp_path: Path, settings, embedder,
                                                             windows_rules: WindowsRules,
                                                             monkeypatch: pytest.MonkeyPatch):
    """Pruning old jobs ran outside the scheduler loop's ``try``: one file held by a scanner (PermissionError)
    ended the thread, silently, and no scheduled sync ran again until a restart."""
    import time

    import app.services.schedule
    from ingest.jobs import DONE, JobStore
    from windows import wait_until

    home = tmp_path / "home"
    _scheduled_source(home, tmp_path, embedder)
    jobs = JobStore(settings.replace(home=home).jobs_path)
    old = [jobs.create("sync", "docs", "schedule") for _ in range(2)]
    for job in old:
        job.state, job.finished_at = DONE, time.time() - 8 * 24 * 3600
        jobs.save(job)
    monkeypatch.setattr(app.services.schedule, "PRUNE_EVERY_S", 0.0)  # every round
    with windows_rules.held_elsewhere(jobs.folder / old[0].id / "job.json"):
        assert jobs.prune() == [old[1].id]  # the held one is left for the next time
        with _app(settings.replace(home=home)):
            assert wait_until(lambda: _synced(home), 30)
    assert jobs.prune() == [old[0].id]


# ------------------------------------------------------------------------ 7. an edit while a sync runs
def test_a_file_edited_while_a_sync_runs_is_read_again_by_the_next_sync(tmp_path: Path, embedder):
    """A sync remembered size and mtime as they were after its whole ingest, the content hash as it was
    before: a file saved in between looked unchanged to every later sync. Now it remembers the stat of the
    handle the bytes came from."""
    import hashlib
    import os

    from ingest.progress import FileDone, ProgressEvent
    from ingest.sources import add_source, index_sources, sync_source

    folder = tmp_path / "share"
    folder.mkdir()
    (folder / "notes.txt").write_bytes(WOMBAT)
    index = EmbeddedStore(tmp_path / "indexes").index("docs")
    add_source(index, embedder, folder)

    def save_meanwhile(event: ProgressEvent) -> None:
        if isinstance(event, FileDone) and event.path.endswith("notes.txt") and \
                (folder / "notes.txt").read_bytes() == WOMBAT:  # read, not yet recorded
            (folder / "notes.txt").write_bytes(QUOKKA)
            os.utime(folder / "notes.txt", ns=(os.stat(folder / "notes.txt").st_mtime_ns + 10**9,) * 2)

    first = sync_source(index, index_sources(index)[0], IngestParameters.defaults(embedder), progress=save_meanwhile)
    assert first.ingest.count("added") == 1 and (folder / "notes.txt").read_bytes() == QUOKKA
    second = sync_source(index, index_sources(index)[0], IngestParameters.defaults(embedder))
    assert [o.status for o in second.ingest.outcomes] == ["updated"]
    reader = index.reader()
    try:
        assert [d.sha256 for d in reader.documents()] == [hashlib.sha256(QUOKKA).hexdigest()]
    finally:
        reader.close()


# ------------------------------------------------------------------ 4. every rename retries a held file
def test_every_rename_goes_through_the_lock_retrying_helper():
    """On Windows a scanner or an indexer opens each new file for a moment, and a rename then fails: every
    ``os.replace``/``os.rename``/``Path.replace``/``Path.rename`` of the product goes through
    ``rag.core.files`` (``replace_file`` retries, ``try_replace`` is for what can wait for a later try)."""
    import ast

    from rag.core.settings import PROJECT_ROOT

    bare = []
    for package in ("rag", "ingest", "api"):
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            if path == PROJECT_ROOT / "rag" / "core" / "files.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                name, owner = node.func.attr, node.func.value
                if (name in ("replace", "rename", "renames") and isinstance(owner, ast.Name) and owner.id == "os") \
                        or name == "rename" or (name == "replace" and len(node.args) == 1 and not node.keywords):
                    bare.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}")  # Path.replace(target)
    assert bare == []


def test_a_backup_and_a_restore_survive_a_scanner_on_their_renames_and_temp_files(tmp_path: Path, embedder,
                                                                                   windows_rules: WindowsRules):
    """The backup's ``partial.replace(target)`` and the restore's ``staging.replace`` did not retry, and the
    temporary folder's clean-up raised after a backup that had succeeded (a scanner in %TEMP%)."""
    from rag.store.backup import backup_index, restore_index

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "wombat.txt").write_bytes(WOMBAT)
    store = EmbeddedStore(tmp_path / "indexes")
    ingest_paths([tmp_path / "docs"], store.index("docs"), IngestParameters.defaults(embedder))
    windows_rules.fail_next(1, ".partial")  # the scanner opens the finished zip as it is renamed
    windows_rules.fail_next(100, "rag-backup-")  # and holds the temporary copy of the database for good
    manifest = backup_index(store.index("docs"), tmp_path / "docs.zip", "test")
    assert manifest.documents == 1 and (tmp_path / "docs.zip").is_file()
    windows_rules.fail_next(1, ".restore-")
    restore_index(tmp_path / "docs.zip", store, "copy", embedder.config.identity)
    assert store.names() == ["copy", "docs"] and any(".partial" in r for r in windows_rules.refused)
    assert any(".restore-" in r for r in windows_rules.refused)
    windows_rules.injected.clear()


# ------------------------------------------------------------------ 9. names fold as NTFS folds them
def test_upload_names_fold_letter_case_as_ntfs_does_not_more(tmp_path: Path, embedder):
    """``str.casefold`` maps ß to ss: "Strasse.txt" replaced "Straße.txt", which NTFS (and every identity here)
    keeps apart; letter case alone still makes one name."""
    from ingest.uploads import Uploads

    store, uploads = EmbeddedStore(tmp_path / "indexes"), Uploads(tmp_path / "uploads")
    both = _add(uploads, store.index("docs"), embedder, ("Straße.txt", WOMBAT), ("Strasse.txt", QUOKKA))
    assert [o.status for o in both.outcomes] == ["added", "added"]
    again = _add(uploads, store.index("docs"), embedder, ("STRASSE.txt", WOMBAT))
    assert [(o.path, o.status) for o in again.outcomes] == [("Strasse.txt", "updated")]
    assert sorted(p.name for p in (tmp_path / "uploads" / "docs").iterdir()) == ["Strasse.txt", "Straße.txt"]
    assert (tmp_path / "uploads" / "docs" / "Straße.txt").read_bytes() == WOMBAT


# ------------------------------------------------------------------ 15. a drive-root source
def test_a_source_at_a_drive_root_overlaps_every_folder_on_that_drive(tmp_path: Path, embedder):
    """The overlap check built ``root + sep``: ``D:\\`` (identity ``d:\\``) became ``d:\\\\`` and accepted
    ``D:\\Finance`` beside it, two syncs removing each other's files. ``/`` on Linux the same."""
    from ingest.sources import add_source
    from rag.core.errors import BadRequestError
    from rag.core.paths import is_under

    assert is_under("d:\\finance", "d:\\", "\\") and is_under("d:\\finance\\q1", "d:\\finance", "\\")
    assert not is_under("d:\\finance", "d:\\fin", "\\") and not is_under("d:\\", "d:\\", "\\")
    assert not is_under("e:\\finance", "d:\\", "\\") and is_under("/srv/docs", "/", "/")
    (tmp_path / "share").mkdir()
    index = EmbeddedStore(tmp_path / "indexes").index("docs")
    add_source(index, embedder, Path(Path.cwd().anchor))  # the root: recorded, not synced
    with pytest.raises(BadRequestError, match="overlaps source"):
        add_source(index, embedder, tmp_path / "share")


# ------------------------------------------------------------------ 17. MAX_PATH on the final name only
def test_a_name_too_long_for_max_path_fails_that_file_not_the_upload(tmp_path: Path, embedder,
                                                                     windows_rules: WindowsRules):
    """The staged copy (a short name) fitted in MAX_PATH, its final name did not: ``os.replace`` failed the
    whole upload with internal_error. Now only that file fails, saying why."""
    from ingest.uploads import Uploads

    long_name = "n" * 116 + ".txt"
    root = tmp_path / ("u" * (265 - len(str(tmp_path)) - len("//default/") - len(long_name)))
    store, uploads = EmbeddedStore(tmp_path / "indexes"), Uploads(root)
    windows_rules.max_path = 259
    assert len(str(root / "default" / long_name)) == 265 and len(str(root / "default" / ".incoming-123456789abc")) < 259
    report = _add(uploads, store.index("default"), embedder, ("short.txt", WOMBAT), (long_name, QUOKKA))
    assert [(o.path, o.status, o.reason_type) for o in report.outcomes] == [
        ("short.txt", "added", None), (long_name, "failed", "unwritable")]
    assert "longer than Windows allows" in report.outcomes[1].reason
    assert sorted(p.name for p in (root / "default").iterdir()) == ["short.txt"]
    assert any(r.startswith("replace") and "longer than 259" in r for r in windows_rules.refused)


# ------------------------------------------------------------------ 13. an index name as spelled on disk
def test_an_index_named_in_other_letters_is_the_one_on_disk_with_its_jobs_and_one_retriever(
        tmp_path: Path, settings, embedder, windows_rules: WindowsRules):
    """``is_dir`` ignores case on Windows, so ``Docs`` kept the typed spelling when the folder is ``docs``:
    ``/v1/jobs?index=Docs`` missed the jobs recorded as ``docs``, and the index got a second retriever."""
    from ingest.jobs import JobStore
    from rag.answering.service import AnswerService

    (tmp_path / "share").mkdir()
    (tmp_path / "share" / "wombat.txt").write_bytes(WOMBAT)
    store = EmbeddedStore(tmp_path / "indexes")
    ingest_paths([tmp_path / "share"], store.index("docs"), IngestParameters.defaults(embedder))
    assert (tmp_path / "indexes" / "DOCS").is_dir()  # as on Windows
    assert store.index("DOCS").name == store.index("Docs").name == "docs"
    jobs = JobStore(tmp_path / "jobs")
    job = jobs.create("sync", "docs", "alice")
    assert [j.id for j in jobs.list(store.index("Docs").name)] == [job.id] == [j.id for j in jobs.list("DOCS")]
    service = AnswerService(settings, store, embedder, generator=None)  # retrieval only
    try:
        assert service.retriever("Docs") is service.retriever("docs")
    finally:
        service.close()



# --------------------------------------------- 10. a scanner reading a large file; progress is best-effort
def test_a_move_waits_out_a_long_scan_and_a_refused_progress_write_is_no_failed_job(tmp_path: Path,
                                                                                     windows_rules: WindowsRules):
    """The lock-retry budget was 1.55 s, shorter than a virus scan of a large new file; and a job whose progress
    write was refused failed as a whole. Moves and commits now wait up to ~9.5 s; progress is skipped once."""
    import threading
    import time

    from ingest.jobs import JobStore, Tracker
    from ingest.progress import FileDone, Started
    from rag.core.files import replace_file

    (tmp_path / "new.faiss.tmp").write_bytes(b"vectors")
    holder = windows_rules.hold(tmp_path / "new.faiss.tmp")
    threading.Timer(3.0, windows_rules.release, [holder]).start()  # the scan takes three seconds
    started = time.monotonic()
    replace_file(tmp_path / "new.faiss.tmp", tmp_path / "vectors-1.faiss")
    assert time.monotonic() - started > 2.5 and (tmp_path / "vectors-1.faiss").read_bytes() == b"vectors"

    jobs = JobStore(tmp_path / "jobs")
    job = jobs.create("sync", "docs", "alice")
    tracker = Tracker(jobs, job, threading.Event())
    with windows_rules.held_elsewhere(jobs.folder / job.id / "job.json"):  # someone reads the record, for long
        tracker(Started(3))  # not written, not raised
        assert jobs.get(job.id).files_total == 0
    tracker(FileDone("a.txt", 1, 4))
    assert (jobs.get(job.id).files_total, jobs.get(job.id).files_done) == (3, 1)
    assert [p.name for p in (jobs.folder / job.id).iterdir() if p.name.startswith(".")] == []


# --------------------------------------------- 11. reparse points that are no links; 12. system folders
def test_cloud_placeholders_and_volume_mount_points_are_walked_only_links_are_not(
        tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch):
    """Every reparse point counted as a link: a OneDrive folder (cloud-file placeholders) was dropped without a
    word, a volume mounted into a folder skipped. Only name surrogates (symlinks, junctions) lead elsewhere."""
    import rag.core.files

    docs = tmp_path / "share"
    for folder in ("OneDrive", "Archive volume", "junction"):
        (docs / folder).mkdir(parents=True)
    (docs / "OneDrive" / "plan.txt").write_bytes(WOMBAT)
    (docs / "Archive volume" / "old.txt").write_bytes(QUOKKA)
    (docs / "junction" / "elsewhere.txt").write_bytes(QUOKKA)
    reparse = {"OneDrive": (0x9000601A, None),  # IO_REPARSE_TAG_CLOUD_6: no name surrogate
               "Archive volume": (0xA0000003, "\\\\?\\Volume{5d3c0b6a-0000-0000-0000-100000000000}\\"),
               "junction": (0xA0000003, "D:\\elsewhere")}  # IO_REPARSE_TAG_MOUNT_POINT: a junction
    monkeypatch.setattr(rag.core.files, "windows_attributes",
                        lambda path: 0x10 | 0x400 if Path(path).name in reparse else 0)
    monkeypatch.setattr(rag.core.files, "windows_reparse_point",
                        lambda path: reparse.get(Path(path).name, (0, None)))
    summary = ingest_paths([docs], EmbeddedStore(tmp_path / "indexes").index("default"),
                           IngestParameters.defaults(embedder))
    outcomes = {Path(o.path).name: (o.status, o.reason_type) for o in summary.outcomes}
    assert outcomes["plan.txt"] == ("added", None) and outcomes["old.txt"] == ("added", None)
    assert "elsewhere.txt" not in outcomes  # the junction is not descended into


def test_hidden_system_folders_such_as_the_recycle_bin_are_skipped_and_reported(
        tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch):
    """A source at a drive root, run as LocalSystem, walked ``$RECYCLE.BIN``: every user's deleted files."""
    import rag.core.files

    docs = tmp_path / "D"
    (docs / "$RECYCLE.BIN" / "S-1-5-21-1004").mkdir(parents=True)
    (docs / "$RECYCLE.BIN" / "S-1-5-21-1004" / "$RX1Y2Z3.txt").write_bytes(QUOKKA)  # someone's deleted file
    (docs / "System Volume Information").mkdir()
    (docs / "System Volume Information" / "tracking.log").write_bytes(QUOKKA)
    (docs / "Finance").mkdir()
    (docs / "Finance" / "budget.txt").write_bytes(WOMBAT)
    hidden_system = {"$RECYCLE.BIN", "System Volume Information"}
    monkeypatch.setattr(rag.core.files, "windows_attributes",
                        lambda path: 0x10 | 0x2 | 0x4 if Path(path).name in hidden_system else 0)
    summary = ingest_paths([docs], EmbeddedStore(tmp_path / "indexes").index("default"),
                           IngestParameters.defaults(embedder))
    outcomes = {Path(o.path).name: (o.status, o.reason) for o in summary.outcomes}
    assert set(outcomes) == {"budget.txt", "$RECYCLE.BIN", "System Volume Information"}
    assert outcomes["$RECYCLE.BIN"] == ("skipped", "not a document folder: a hidden system folder")


# ------------------------------------------------------------------ 14. a laptop that slept
def test_a_job_of_a_live_process_on_this_host_is_not_interrupted_by_a_long_sleep(tmp_path: Path):
    """A laptop that slept 30 s left a running job's heartbeat stale: it read as interrupted, and "Run again"
    could run it a second time beside itself. On this host the owner check decides; the heartbeat is for
    replicas on other hosts."""
    import subprocess
    import sys
    import time

    from ingest.jobs import RUNNING, JobStore, process_identity

    jobs = JobStore(tmp_path / "jobs")
    live, dead = jobs.create("sync", "docs", "alice"), jobs.create("sync", "docs", "alice")
    gone = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    dead.owner = process_identity(gone.pid)
    gone.communicate(b"")
    for job in (live, dead):
        job.state, job.updated_at = RUNNING, time.time() - 60  # the last heartbeat before the lid closed
        jobs.save(job)
    assert jobs.get(live.id).state == "running" and not jobs.can_retry(jobs.get(live.id))
    assert jobs.get(dead.id).state == "interrupted" and jobs.can_retry(jobs.get(dead.id))
    elsewhere = jobs.create("sync", "docs", "alice")
    elsewhere.owner, elsewhere.state, elsewhere.updated_at = "replica-2:4242:1.000", RUNNING, time.time() - 60
    jobs.save(elsewhere)
    assert jobs.get(elsewhere.id).state == "interrupted"  # another host: its heartbeat is all there is


# ------------------------------------------------------------------ 16. a service's current folder
def test_the_generator_loads_from_a_non_ascii_folder_whatever_the_current_folder(
        tmp_path: Path, settings, monkeypatch: pytest.MonkeyPatch):
    """ORT GenAI opens its folder in the ANSI code page on Windows; the workaround was a relative path from the
    current folder, and a service starts in C:\\Windows\\System32: the model was refused. Now an 8.3 short
    path, or failing that the model's own folder made current while it loads."""
    import os

    import onnxruntime_genai as og

    import rag.generation.ort as ort
    from rag.core import files

    models = tmp_path / "Jürgen" / "models"
    models.mkdir(parents=True)
    (models / "gen").symlink_to(settings.generator_path, target_is_directory=True)
    system32 = tmp_path / "Windows" / "System32"
    system32.mkdir(parents=True)
    monkeypatch.chdir(system32)
    real_config, refused = og.Config, []

    def ansi_config(path: str):
        if not path.isascii():
            refused.append(path)
            raise RuntimeError(f"Error opening {path}\\genai_config.json")
        return real_config(path)

    monkeypatch.setattr(og, "Config", ansi_config)
    monkeypatch.setattr(ort, "path_for_native_library", lambda path: files.path_for_native_library(path, True))
    generator = ort.LocalGenerator(models / "gen", "cpu", 1)
    assert refused == [] and os.getcwd() == str(system32)
    assert len(generator.encode("Where do wombats live?")) > 3
    short = files.path_for_native_library(models / "gen", True, short_path=lambda path: "C:\\Users\\JRGEN~1\\gen")
    assert short == "C:\\Users\\JRGEN~1\\gen"


# ------------------------------------------------------------------ 18. a port Windows reserved
def test_a_port_windows_reserved_is_explained_as_such_not_as_a_privileged_port(monkeypatch: pytest.MonkeyPatch):
    """Hyper-V, WSL and Docker reserve port ranges (often including 8000): binding one fails with WSAEACCES,
    which `rag serve` explained as "ports below 1024 need privileges" (Windows has no such rule)."""
    import errno
    import socket

    from app.cli.serve import port_problem

    refusal = [10013]

    def refused(self, address):  # what Windows answers for a port in an excluded range (Linux: EACCES)
        raise OSError(refusal[0], "An attempt was made to access a socket in a way forbidden by its access "
                                  "permissions")

    monkeypatch.setattr(socket.socket, "bind", refused)
    message = port_problem("127.0.0.1", 8000, windows=True)
    assert "netsh interface ipv4 show excludedportrange protocol=tcp" in message and "1024" not in message
    refusal[0] = errno.EACCES
    assert "below 1024 need privileges" in port_problem("127.0.0.1", 80, windows=False)
    assert "1024" not in port_problem("127.0.0.1", 8000, windows=False)


# ------------------------------------------------------------------ 20. the manual's Windows section (docs/install.md)
def test_a_rag_toml_saved_by_notepad_with_a_bom_is_read_and_a_backslash_path_gets_a_hint(tmp_path: Path):
    """Notepad (and PowerShell 5.1's Out-File) start a UTF-8 file with a BOM, which TOML refused; a Windows path
    in double quotes is an invalid escape, now with the fix in the message."""
    from rag.core.errors import ConfigError
    from rag.core.settings import load_settings

    (tmp_path / "rag.toml").write_bytes(b"\xef\xbb\xbf" + "top_k = 7\naudit_dir = 'C:\\Shares\\audit'\n"
                                        .encode("utf-8"))
    settings = load_settings({"home": tmp_path}, environ={})
    assert settings.top_k == 7 and settings.source("top_k") == str(tmp_path / "rag.toml")
    (tmp_path / "rag.toml").write_text('audit_dir = "C:\\Shares\\audit"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="single quotes"):
        load_settings({"home": tmp_path}, environ={})


def _windows_argv(line: str) -> list[str]:
    """``line`` split as a Windows program's C runtime splits its command line (CommandLineToArgvW's rules)."""
    args: list[str] = []
    current: list[str] = []
    quoted = started = False
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            n = len(line[i:]) - len(line[i:].lstrip("\\"))
            if i + n < len(line) and line[i + n] == '"':
                current.append("\\" * (n // 2))
                i += n
                if n % 2:
                    current.append('"')
                    i += 1
                continue
            current.append("\\" * n)
            i += n
            continue
        if c == '"':
            quoted, started = not quoted, True
        elif c in " \t" and not quoted:
            if current or started:
                args.append("".join(current))
            current, started = [], False
        else:
            current.append(c)
        i += 1
    if current or started:
        args.append("".join(current))
    return args


def test_the_service_commands_rag_prints_reach_rag_serve_as_typed_and_are_the_readmes(tmp_path: Path, settings):
    """`rag service commands` prints what installs `rag serve` as a Windows service (NSSM, sc.exe, icacls) or a
    scheduled task: each line, split by Windows' rules, is the argv meant, and the command line nested inside
    (NSSM's AppParameters, schtasks' /TR) splits into rag's own; the manual (docs/install.md) shows them as
    generated."""
    import subprocess

    from click.testing import CliRunner

    from app.cli.main import main as cli
    from app.cli.service import windows_service_commands
    from rag.core.settings import PROJECT_ROOT

    python, home = "C:\\Program Files\\Python312\\python.exe", "D:\\RAG Data\\home"
    serve = ["-m", "app.cli", "--home", home, "serve", "--host", "0.0.0.0", "--port", "8765"]
    for account in ("NT SERVICE\\rag", "ACME\\svc-rag"):
        commands = windows_service_commands(python, home, "0.0.0.0", 8765, account)
        for _, argv in commands:
            assert _windows_argv(subprocess.list2cmdline(argv)) == argv
        nested = {argv[argv.index("/TR") + 1] if "/TR" in argv else argv[4] for _, argv in commands
                  if "/TR" in argv or argv[:4] == ["nssm", "set", "rag", "AppParameters"]}
        assert sorted(_windows_argv(n) for n in nested) == [serve, [python, *serve]]
        assert any(argv[:3] == ["sc.exe", "config", "rag"] and argv[-1] == account for _, argv in commands)
    printed = CliRunner().invoke(cli, ["--home", str(tmp_path), "service", "commands", "--python",
                                       "C:\\rag\\.venv\\Scripts\\python.exe"])
    assert printed.exit_code == 0 and f"--home {tmp_path} serve --host 127.0.0.1 --port 8000" in printed.output
    readme = (PROJECT_ROOT / "docs" / "install.md").read_text(encoding="utf-8")  # the manual's Windows section
    for comment, argv in windows_service_commands("C:\\rag\\.venv\\Scripts\\python.exe", "C:\\rag", "127.0.0.1",
                                                  8000):
        assert subprocess.list2cmdline(argv) in readme and (not comment or f"rem {comment}" in readme)


# ------------------------------------------------------------------ 5. rotating files with several writers
def test_a_log_written_by_several_workers_rotates_and_stays_within_its_bound(tmp_path: Path,
                                                                            windows_rules: WindowsRules):
    """With `rag serve --workers N` every worker held api.log (and the telemetry files) open, so on Windows none
    could rotate it: it grew past the documented bound for as long as the server ran; a ``.rotating`` file left
    by a crash blocked rotation for good. A writer now lets go of a file that is due for rotation."""
    import logging
    import os

    from rag.core.logfiles import SharedRotatingFileHandler

    log = tmp_path / "logs" / "api.log"
    log.parent.mkdir()
    (log.parent / f"api.log.{os.getpid()}.rotating").write_text("left by a crash\n", encoding="utf-8")
    workers = [SharedRotatingFileHandler(log, maxBytes=2_000, backupCount=3, encoding="utf-8") for _ in range(3)]
    for handler in workers:
        handler.setFormatter(logging.Formatter("%(message)s"))
    for i in range(600):
        workers[i % 3].emit(logging.makeLogRecord({"msg": f"record {i:04d} " + "x" * 40}))
        assert log.stat().st_size <= 2_000 + 3 * 60, i  # a record for each worker that still held it, at most
    names = sorted(p.name for p in log.parent.iterdir())
    for handler in workers:
        handler.close()
    assert names == ["api.log", "api.log.1", "api.log.2", "api.log.3"]
    assert log.read_text(encoding="utf-8").splitlines()[-1].startswith("record 0599")


# ------------------------------------------------------------------ 8. who may change the home
# C:\rag as Windows makes it under C:\ (icacls shows "NT AUTHORITY\Authenticated Users:(I)(M)"), and as rag does.
INHERITED_FROM_C = ("O:BAG:DUD:AI(A;ID;FA;;;BA)(A;OICIIOID;GA;;;BA)(A;ID;FA;;;SY)(A;OICIIOID;GA;;;SY)"
                    "(A;OICIID;0x1200a9;;;BU)(A;ID;0x1301bf;;;AU)(A;OICIIOID;SDGXGWGR;;;AU)")


def test_rag_makes_its_home_for_its_owner_and_rag_info_says_who_else_may_change_it(tmp_path: Path, settings):
    """A home under C:\\ inherits "Authenticated Users: Modify": any local user could edit rag.toml (api_key,
    store_url, folder_groups), add an admin key or delete the audit chain. rag makes its home owner-only (an
    owner-only ACL on Windows, 0700 elsewhere), and `rag info` warns about a home, key store or audit folder
    that others may change."""
    import os
    import stat

    from rag.core.files import PRIVATE_FOLDER_SDDL, others_who_may_write
    from app.diagnostics import permission_warnings
    from app.runtime import open_store

    assert others_who_may_write(INHERITED_FROM_C) == ["Authenticated Users"]  # Users may read, not write
    assert others_who_may_write(PRIVATE_FOLDER_SDDL) == []
    assert others_who_may_write("D:(A;OICI;0x1200a9;;;WD)(A;;FA;;;S-1-5-32-545)") == ["Users"]
    home = tmp_path / "rag"
    open_store(settings.replace(home=home)).close()  # what `rag ingest`, `rag serve`... open first
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    assert permission_warnings(settings.replace(home=home)) == []
    os.chmod(home, 0o777)
    (home / "audit").mkdir(mode=0o775)
    os.chmod(home / "audit", 0o775)
    warnings = permission_warnings(settings.replace(home=home))
    assert any(str(home) in w and "others" in w for w in warnings), warnings
    assert any(str(home / "audit") in w and "group" in w for w in warnings), warnings


# ------------------------------------------------------------------ 19. Tesseract under a service
def test_a_loader_killed_for_its_time_limit_takes_its_tesseract_with_it(tmp_path: Path):
    """The loader process was killed alone: the tesseract.exe it had started ran on (no Job Object on Windows,
    no process group elsewhere), one more for every file that overran. Now they die together."""
    import io
    import sys
    import time

    import psutil
    from PIL import Image

    from ingest.formats.ocr import install_hint
    from ingest.formats.options import LoadOptions, LoadTimeout
    from ingest.formats.worker import FileLoader

    stuck = tmp_path / "tesseract"  # a Tesseract that never finishes, as one stuck on a huge page
    stuck.write_text(f"#!{sys.executable}\nimport os, sys, time\n"
                     f"open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n",
                     encoding="utf-8")
    stuck.chmod(0o755)
    page = io.BytesIO()
    Image.new("RGB", (200, 100), "white").save(page, format="PNG")
    with FileLoader(LoadOptions(tesseract_cmd=str(stuck), load_timeout_s=1.0)) as loader:
        with pytest.raises(LoadTimeout):
            loader.load(tmp_path / "scan.png", page.getvalue())
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the loader's tesseract outlived it"
        time.sleep(0.1)
    assert "for all users" in install_hint(windows=True)  # a service does not see a per-user install
