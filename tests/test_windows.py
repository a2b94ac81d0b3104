"""Native Windows (issue 27), proved on Linux: Windows' file-system rules imposed by ``tests/windows.py``,
a FAISS that cannot open non-ASCII paths, a cp1252 console, a registry that maps .js to text/plain,
case-insensitive names, Office lock files, hidden files, junctions, device names and short paths."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from pathlib import Path

from ingest.pipeline import ingest_paths
from ingest.store.embedded import EmbeddedStore
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
    first = ingest_paths([docs], store.index("default"), embedder)
    (docs / "quokka.txt").write_bytes(QUOKKA)
    second = ingest_paths([docs], store.index("default"), embedder)  # loads generation 1, writes 2
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
